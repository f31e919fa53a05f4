package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/topology"
)

// watchObjects queues an object on each add and update of the five kinds;
// adding the handlers to synced informers queues every object that exists.
func (r *statusRun) watchObjects(ctx context.Context) (func(), error) {
	var undo []func()
	unregister := func() {
		for _, f := range undo {
			f()
		}
	}
	for _, k := range source.Kinds() {
		inf, err := r.w.informers.GetInformer(ctx, k.Object)
		if err != nil {
			unregister()
			return nil, fmt.Errorf("status writer: informer for %s: %w", k.Name, err)
		}
		kind := k.Name
		add := func(obj any) {
			if o, ok := obj.(client.Object); ok {
				r.q.Add(topology.ObjectRef{Kind: kind, Key: keyOf(o)})
			}
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    add,
			UpdateFunc: func(_, n any) { add(n) },
		})
		if err != nil {
			unregister()
			return nil, fmt.Errorf("status writer: event handler for %s: %w", k.Name, err)
		}
		undo = append(undo, func() {
			if err := inf.RemoveEventHandler(reg); err != nil {
				r.log.Warn("status writer: removing an event handler failed", "kind", kind, "error", err)
			}
		})
	}
	return unregister, nil
}

// followDirectory queues, for each new snapshot, the upstreams and spatial
// domains whose part of the topology changed, with their objects.
func (r *statusRun) followDirectory(ctx context.Context, last *topology.Snapshot) {
	for {
		changed := r.w.Dir.Changed()
		cur := r.w.Dir.Current()
		if cur == last {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		keys, ok := cur.ChangedSince(last.Revision)
		if !ok {
			keys = changedUpstreams(last, cur)
		}
		for _, k := range keys {
			r.queueUpstream(ctx, k)
		}
		for _, k := range changedDomains(last, cur) {
			r.queueDomain(ctx, k)
		}
		last = cur
	}
}

// changedUpstreams lists the upstreams whose state differs between two
// snapshots (unchanged states are shared between snapshots).
func changedUpstreams(a, b *topology.Snapshot) []topology.Key {
	x, y := a.Upstreams(), b.Upstreams()
	var out []topology.Key
	for len(x) > 0 || len(y) > 0 {
		switch {
		case len(y) == 0 || (len(x) > 0 && x[0].Upstream.Key.Compare(y[0].Upstream.Key) < 0):
			out, x = append(out, x[0].Upstream.Key), x[1:]
		case len(x) == 0 || x[0].Upstream.Key.Compare(y[0].Upstream.Key) > 0:
			out, y = append(out, y[0].Upstream.Key), y[1:]
		default:
			if x[0] != y[0] {
				out = append(out, y[0].Upstream.Key)
			}
			x, y = x[1:], y[1:]
		}
	}
	return out
}

// changedDomains lists the spatial domains whose state differs between two snapshots.
func changedDomains(a, b *topology.Snapshot) []topology.Key {
	var out []topology.Key
	for _, s := range b.Spatial() {
		if a.SpatialDomain(s.Domain.Key) != s {
			out = append(out, s.Domain.Key)
		}
	}
	for _, s := range a.Spatial() {
		if b.SpatialDomain(s.Domain.Key) == nil {
			out = append(out, s.Domain.Key)
		}
	}
	return out
}

// queueUpstream queues an Upstream and the Localities and EndpointSets that name it.
func (r *statusRun) queueUpstream(ctx context.Context, k topology.Key) {
	r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
	r.queueIndexed(ctx, &v1alpha1.LocalityList{}, topology.KindLocality, localityUpstreamIndex, k)
	r.queueIndexed(ctx, &v1alpha1.EndpointSetList{}, topology.KindEndpointSet, endpointSetUpstreamIndex, k)
}

// queueDomain queues a SpatialDomain and its Partitions.
func (r *statusRun) queueDomain(ctx context.Context, k topology.Key) {
	r.q.Add(topology.ObjectRef{Kind: topology.KindSpatialDomain, Key: k})
	r.queueIndexed(ctx, &v1alpha1.PartitionList{}, topology.KindPartition, partitionDomainIndex, k)
}

// queueIndexed queues the objects of a kind in k's namespace whose index
// value is k's name, from the informer cache.
func (r *statusRun) queueIndexed(ctx context.Context, list client.ObjectList, kind, index string, k topology.Key) {
	if err := r.w.Client.List(ctx, list, client.InNamespace(k.Namespace), client.MatchingFields{index: k.Name}, client.UnsafeDisableDeepCopy); err != nil {
		if ctx.Err() == nil {
			r.log.Error("status writer: listing from the cache", "kind", kind, "naming", k.String(), "error", err)
		}
		return
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if co, ok := o.(client.Object); ok {
			r.q.Add(topology.ObjectRef{Kind: kind, Key: keyOf(co)})
		}
		return nil
	})
}

// followPublication queues the objects that wait for a publication each time
// one happens after revision seen.
func (r *statusRun) followPublication(ctx context.Context, seen uint64) {
	for {
		// the channel is taken before the revision is read, so a publication
		// between two waits is seen by its revision
		changed := r.pub.Changed()
		if rev := r.pub.LastRevision(); rev != seen {
			seen = rev
			r.mu.Lock()
			for ref := range r.deferred {
				r.q.Add(ref)
			}
			r.mu.Unlock()
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// followClientRejections queues the Upstreams whose resources this
// replica's clients start or stop rejecting: their Programmed follows it.
func (r *statusRun) followClientRejections(ctx context.Context, cr ClientRejections) {
	seen := map[topology.Key]string{}
	for {
		changed := cr.RejectedChanged()
		for _, u := range r.w.Dir.Current().Upstreams() {
			k := u.Upstream.Key
			if why := cr.RejectedBy(k); why != seen[k] {
				if why == "" {
					delete(seen, k)
				} else {
					seen[k] = why
				}
				r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// followRejections queues the objects whose rejection changed, and the
// Upstreams whose Service reference resolves differently.
func (r *statusRun) followRejections(ctx context.Context, rejected map[topology.ObjectRef]conditions.Rejection, refs map[topology.Key]string) {
	conds := r.w.Source.ClusterConditions()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.w.Source.RejectionsChanged():
		}
		nowRejected, nowRefs := r.w.Source.Rejections(), r.w.Source.ServiceRefs()
		for ref, rej := range nowRejected {
			if old, was := rejected[ref]; (!was || old != rej) && ref.Kind != source.KindService {
				r.q.Add(ref)
			}
		}
		for ref := range rejected {
			if _, still := nowRejected[ref]; !still && ref.Kind != source.KindService {
				r.q.Add(ref)
			}
		}
		for k, v := range nowRefs {
			if refs[k] != v {
				r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
			}
		}
		for k := range refs {
			if _, still := nowRefs[k]; !still {
				r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
			}
		}
		nowConds := r.w.Source.ClusterConditions()
		for k, c := range nowConds {
			if !sameCondition(conds[k], &c) {
				r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
			}
		}
		for k := range conds {
			if _, still := nowConds[k]; !still {
				r.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: k})
			}
		}
		rejected, refs, conds = nowRejected, nowRefs, nowConds
	}
}

// sameCondition compares what the source's ClusterConditions say, as the
// source does.
func sameCondition(a metav1.Condition, b *metav1.Condition) bool {
	if b == nil {
		return a.Type == ""
	}
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}
