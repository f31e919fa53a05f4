package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
)

// op is one object's change in a batch.
type op struct {
	ref      topology.ObjectRef
	upstream topology.Key // the upstream it belongs to, for falling back on unnamed problems
	apply    func(*topology.Batch)
}

// sync turns the dirty objects into one batch and applies it. Objects the
// Directory refuses are set aside and the rest is applied without them.
func (s *Source) sync(ctx context.Context) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = map[topology.ObjectRef]struct{}{}
	// set-aside objects are tried again with every batch: a change elsewhere may resolve them
	for ref := range s.rejected {
		if ref.Kind != KindService {
			dirty[ref] = struct{}{}
		}
	}
	s.mu.Unlock()

	refs := make([]topology.ObjectRef, 0, len(dirty))
	for ref := range dirty {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b topology.ObjectRef) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return a.Key.Compare(b.Key)
	})
	var ops []op
	rejected := map[topology.ObjectRef]conditions.Rejection{}
	resolved := map[topology.ObjectRef]bool{}
	for _, ref := range refs {
		o, rej, err := s.read(ctx, ref)
		if err != nil {
			s.Log.Error("reading object failed; will retry", "object", ref.String(), "error", err)
			s.mu.Lock()
			s.readErr = fmt.Errorf("%s: %w", ref, err)
			s.mu.Unlock()
			s.retry(ref)
			continue
		}
		if rej != nil {
			rejected[ref] = *rej
			continue
		}
		resolved[ref] = true
		ops = append(ops, o...)
	}

	for {
		var b topology.Batch
		for _, o := range ops {
			o.apply(&b)
		}
		current := s.Dir.Current()
		snap, err := s.Dir.Apply(b)
		if err == nil {
			// a batch that changed nothing (a resync, a write of what is there) is not counted
			if s.Metrics != nil && snap != current {
				s.Metrics.Batches.WithLabelValues(sourceName, "applied").Inc()
				s.Metrics.Revision.Set(float64(snap.Revision))
			}
			break
		}
		if s.Metrics != nil {
			s.Metrics.Batches.WithLabelValues(sourceName, "rejected").Inc()
		}
		var be *topology.BatchError
		if !errors.As(err, &be) {
			s.Log.Error("topology batch refused", "error", err)
			break
		}
		before := len(ops)
		var yielded bool
		ops, yielded = s.resolveConflicts(ctx, ops, be, rejected)
		if !yielded {
			ops = s.setAside(ops, be, rejected)
		}
		if !yielded && len(ops) == before {
			s.Log.Error("topology batch refused and nothing in it could be set aside", "error", err)
			break
		}
	}
	for ref := range rejected {
		delete(resolved, ref)
	}
	s.mu.Lock()
	changedRejections := false
	for ref := range resolved {
		if _, was := s.rejected[ref]; was {
			delete(s.rejected, ref)
			changedRejections = true
		}
	}
	for ref, r := range rejected {
		if old, was := s.rejected[ref]; !was || old != r {
			s.Log.Warn("object not accepted; its last accepted version (if any) keeps serving", "object", ref.String(), "reason", r.Reason, "message", r.Message)
			changedRejections = true
		}
		s.rejected[ref] = r
	}
	if changedRejections {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
}

// read turns one dirty object into batch operations, or a rejection when
// the object itself is invalid.
func (s *Source) read(ctx context.Context, ref topology.ObjectRef) ([]op, *conditions.Rejection, error) {
	nn := types.NamespacedName{Namespace: ref.Key.Namespace, Name: ref.Key.Name}
	switch ref.Kind {
	case topology.KindUpstream:
		var obj v1alpha1.Upstream
		if err := s.Reader.Get(ctx, nn, &obj); apierrors.IsNotFound(err) {
			return s.upstreamGone(ref.Key), nil, nil
		} else if err != nil {
			return nil, nil, err
		}
		u, errs := convert.Upstream(&obj)
		if len(errs) > 0 {
			return nil, &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		// the import comes first: it may give u its affinity
		imp, err := s.importFor(ctx, &u)
		if err != nil {
			return nil, nil, err
		}
		checks, ejections := CheckVerdicts(&obj), outlierVerdicts(&obj)
		return append([]op{{ref: ref, upstream: u.Key, apply: func(b *topology.Batch) {
			b.PutUpstream(u)
			b.ReplaceCheckVerdicts(u.Key, checks)
			b.ReplaceOutlierVerdicts(u.Key, ejections)
		}}}, imp...), nil, nil
	case topology.KindLocality:
		var obj v1alpha1.Locality
		if err := s.Reader.Get(ctx, nn, &obj); apierrors.IsNotFound(err) {
			return []op{{ref: ref, apply: func(b *topology.Batch) { b.DeleteLocality(ref.Key) }}}, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
		l, errs := convert.Locality(&obj)
		if len(errs) > 0 {
			return nil, &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		return []op{{ref: ref, upstream: topology.Key{Namespace: l.Key.Namespace, Name: l.Upstream}, apply: func(b *topology.Batch) { b.PutLocality(l) }}}, nil, nil
	case topology.KindEndpointSet:
		var obj v1alpha1.EndpointSet
		if err := s.Reader.Get(ctx, nn, &obj); apierrors.IsNotFound(err) {
			return []op{{ref: ref, apply: func(b *topology.Batch) { b.DeleteEndpointSet(ref.Key) }}}, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
		es, errs := convert.EndpointSet(&obj)
		if len(errs) > 0 {
			return nil, &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		return []op{{ref: ref, upstream: topology.Key{Namespace: es.Key.Namespace, Name: es.Upstream}, apply: func(b *topology.Batch) { b.PutEndpointSet(es) }}}, nil, nil
	// The spatial kinds belong to no single upstream, so their ops name none: a
	// topology problem sets them aside by naming them.
	case topology.KindSpatialDomain:
		var obj v1alpha1.SpatialDomain
		if err := s.Reader.Get(ctx, nn, &obj); apierrors.IsNotFound(err) {
			return []op{{ref: ref, apply: func(b *topology.Batch) { b.DeleteSpatialDomain(ref.Key) }}}, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
		d, errs := convert.SpatialDomain(&obj)
		if len(errs) > 0 {
			return nil, &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		return []op{{ref: ref, apply: func(b *topology.Batch) { b.PutSpatialDomain(d) }}}, nil, nil
	case topology.KindPartition:
		var obj v1alpha1.Partition
		if err := s.Reader.Get(ctx, nn, &obj); apierrors.IsNotFound(err) {
			return []op{{ref: ref, apply: func(b *topology.Batch) { b.DeletePartition(ref.Key) }}}, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
		p, errs := convert.Partition(&obj)
		if len(errs) > 0 {
			return nil, &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		return []op{{ref: ref, apply: func(b *topology.Batch) { b.PutPartition(p) }}}, nil, nil
	}
	return nil, nil, nil
}

// InitialSync applies every object that exists as one batch.
func (s *Source) InitialSync(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	var ups v1alpha1.UpstreamList
	var locs v1alpha1.LocalityList
	var sets v1alpha1.EndpointSetList
	var domains v1alpha1.SpatialDomainList
	var parts v1alpha1.PartitionList
	for _, l := range []client.ObjectList{&ups, &locs, &sets, &domains, &parts} {
		if err := s.Reader.List(ctx, l); err != nil {
			return fmt.Errorf("initial list: %w", err)
		}
	}
	for i := range ups.Items {
		s.mark(topology.KindUpstream, &ups.Items[i])
	}
	for i := range locs.Items {
		s.mark(topology.KindLocality, &locs.Items[i])
	}
	for i := range sets.Items {
		s.mark(topology.KindEndpointSet, &sets.Items[i])
	}
	for i := range domains.Items {
		s.mark(topology.KindSpatialDomain, &domains.Items[i])
	}
	for i := range parts.Items {
		s.mark(topology.KindPartition, &parts.Items[i])
	}
	s.sync(ctx)
	return nil
}
