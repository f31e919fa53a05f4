package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// resolveConflicts settles the problems that are two Locality objects of
// one (upstream, priority, locality) setting different weights as Gateway
// API settles conflicting routes: the older object (by
// metadata.creationTimestamp, then name) wins and stays in the topology;
// the newer is taken out of it (its op dropped, or a delete added when it
// is already in the Directory) and rejected as Conflicted, naming the
// winner. It reports whether it settled any; other problems are left to
// setAside, on the next round when this one settled some.
func (s *Source) resolveConflicts(ctx context.Context, ops []op, be *topology.BatchError, rejected map[topology.ObjectRef]conditions.Rejection) ([]op, bool) {
	settled := false
	for _, p := range be.Problems {
		if len(p.Objects) != 2 || p.Objects[0].Kind != topology.KindLocality || p.Objects[1].Kind != topology.KindLocality ||
			!errors.Is(p.Err, weights.ErrInconsistentTopology) {
			continue
		}
		winner, loser, created, ok := s.olderLocality(ctx, p.Objects[0], p.Objects[1])
		if prev, done := rejected[loser]; !ok || (done && prev.Reason == v1alpha1.ReasonConflicted) {
			continue // unreadable, or settled already this batch: setAside names both
		}
		rejected[loser] = conditions.Rejection{Reason: v1alpha1.ReasonConflicted, Message: fmt.Sprintf(
			"%v; %s is older (created %s) and wins: this Locality is not in the topology until it sets the same weight or the other goes",
			p.Err, winner, created)}
		n := len(ops)
		ops = slices.DeleteFunc(ops, func(o op) bool { return o.ref == loser })
		if len(ops) == n {
			key := loser.Key
			ops = append(ops, op{ref: loser, upstream: p.Upstream, apply: func(b *topology.Batch) { b.DeleteLocality(key) }})
		}
		settled = true
	}
	return ops, settled
}

// olderLocality orders two Localities by creationTimestamp, then name,
// from the informer cache; ok is false when either cannot be read.
func (s *Source) olderLocality(ctx context.Context, a, b topology.ObjectRef) (older, newer topology.ObjectRef, created string, ok bool) {
	var x, y v1alpha1.Locality
	if s.Reader.Get(ctx, types.NamespacedName{Namespace: a.Key.Namespace, Name: a.Key.Name}, &x) != nil ||
		s.Reader.Get(ctx, types.NamespacedName{Namespace: b.Key.Namespace, Name: b.Key.Name}, &y) != nil {
		return a, b, "", false
	}
	if y.CreationTimestamp.Before(&x.CreationTimestamp) || (y.CreationTimestamp.Equal(&x.CreationTimestamp) && b.Key.Compare(a.Key) < 0) {
		a, b, x = b, a, y
	}
	return a, b, x.CreationTimestamp.UTC().Format(time.RFC3339), true
}

// setAside removes from ops every object a problem names (or, when it names
// none of them, every op of the broken upstream) and records why.
func (s *Source) setAside(ops []op, be *topology.BatchError, rejected map[topology.ObjectRef]conditions.Rejection) []op {
	drop := map[topology.ObjectRef]bool{}
	for _, p := range be.Problems {
		reason := reasonOf(p.Err)
		names := make([]string, len(p.Objects))
		for i, o := range p.Objects {
			names[i] = o.String()
		}
		named := false
		for _, o := range ops {
			if slices.Contains(p.Objects, o.ref) {
				drop[o.ref], named = true, true
			}
		}
		if !named {
			for _, o := range ops {
				if o.upstream == p.Upstream {
					drop[o.ref] = true
				}
			}
		}
		for _, ref := range p.Objects {
			rejected[importOwner(ref, ops)] = conditions.Rejection{Reason: reason, Message: fmt.Sprintf("%v (involves %s)", p.Err, joinOthers(names, ref.String()))}
		}
		if !named {
			for ref := range drop {
				rejected[ref] = conditions.Rejection{Reason: reason, Message: p.Err.Error()}
			}
		}
	}
	out := ops[:0:0]
	for _, o := range ops {
		if !drop[o.ref] {
			out = append(out, o)
		}
	}
	return out
}

// importOwner maps an imported endpoint set to the Upstream whose import it
// is, so the status lands on an object a person can see.
func importOwner(ref topology.ObjectRef, ops []op) topology.ObjectRef {
	if ref.Kind != KindService {
		return ref
	}
	for _, o := range ops {
		if o.ref == ref {
			return topology.ObjectRef{Kind: topology.KindUpstream, Key: o.upstream}
		}
	}
	return ref
}

func joinOthers(names []string, self string) string {
	others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == self })
	if len(others) == 0 {
		return self
	}
	return strings.Join(others, ", ")
}
