package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

const sourceName = "kubernetes"

// KindService names the endpoint sets imported from a Service's EndpointSlices.
const KindService = "Service"

// +kubebuilder:rbac:groups=poise.dev,resources=upstreams;localities;endpointsets;spatialdomains;partitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Source feeds a Directory from the cluster. All replicas run it.
type Source struct {
	Reader client.Reader // the informer cache, with the index Register adds
	Dir    *topology.Directory
	// Debounce bounds how long a change waits for others to join its batch;
	// 0 means 50ms. A batch is applied as soon as events pause for a tenth
	// of it, and at the latest Debounce after its first event.
	Debounce time.Duration
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// ClusterName is the home cluster's name ("" is DefaultClusterName);
	// Remotes, when set, are the remote clusters a Service is imported from.
	ClusterName string
	Remotes     *Remotes

	syncMu   sync.Mutex // one batch at a time
	mu       sync.Mutex
	dirty    map[topology.ObjectRef]struct{}
	kick     chan struct{}
	rejected map[topology.ObjectRef]Rejection
	// imported: the endpoint sets each Upstream imported from its Service
	imported map[topology.Key][]topology.Key
	// importers: which Upstreams import a Service (namespace/name), and
	// which Service each importing Upstream imports
	importers map[topology.Key]map[topology.Key]struct{}
	serviceOf map[topology.Key]topology.Key
	// nodeUsers: the importing Upstreams whose endpoints a Node places (at
	// their last import), and nodesOf the other way round
	nodeUsers map[string]map[topology.Key]struct{}
	nodesOf   map[topology.Key][]string
	// refs: how each importing Upstream's Service reference resolved at the
	// last read (a ReasonServiceNotFound, ReasonPortNotFound or ReasonResolved)
	refs map[topology.Key]string
	// clusterConds: the RemoteClustersSynced condition of each Upstream
	// that imports from remote clusters
	clusterConds map[topology.Key]metav1.Condition
	changed      chan struct{} // closed when rejections or refs change
	// readErr is the last error reading an object (which is retried).
	readErr error
}

// Rejection is why an object is not in the topology (its last accepted
// version, if any, still is).
type Rejection struct {
	Reason  string // a v1alpha1 Reason*
	Message string
}

func (s *Source) init() {
	if s.dirty == nil {
		s.dirty = map[topology.ObjectRef]struct{}{}
		s.kick = make(chan struct{}, 1)
		s.rejected = map[topology.ObjectRef]Rejection{}
		s.imported = map[topology.Key][]topology.Key{}
		s.importers = map[topology.Key]map[topology.Key]struct{}{}
		s.serviceOf = map[topology.Key]topology.Key{}
		s.nodeUsers = map[string]map[topology.Key]struct{}{}
		s.nodesOf = map[topology.Key][]string{}
		s.refs = map[topology.Key]string{}
		s.clusterConds = map[topology.Key]metav1.Condition{}
		s.changed = make(chan struct{})
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
	}
}

// sliceServiceIndex indexes EndpointSlices by the Service they belong to,
// so importing one Service reads its slices and no others.
const sliceServiceIndex = "poise.dev/service-name"

// Register adds event handlers to the informers of every kind the source
// reads, and the index it reads EndpointSlices by. Call it before the cache
// starts.
func (s *Source) Register(ctx context.Context, c cache.Cache) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	if err := c.IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, func(o client.Object) []string {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			return []string{svc}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index EndpointSlices by Service: %w", err)
	}
	for _, k := range append(slices.Clone(statusKinds), []kindOf{
		{&corev1.Service{}, "Service"},
		{&discoveryv1.EndpointSlice{}, "EndpointSlice"},
		{&corev1.Node{}, "Node"},
	}...) {
		inf, err := c.GetInformer(ctx, k.obj)
		if err != nil {
			return fmt.Errorf("informer for %s: %w", k.kind, err)
		}
		kind := k.kind
		mark := func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(client.Object); ok {
				s.mark(kind, o)
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: mark,
			UpdateFunc: func(o, n any) {
				oldObj, ok1 := o.(client.Object)
				newObj, ok2 := n.(client.Object)
				if ok1 && ok2 {
					s.update(kind, oldObj, newObj)
				}
			},
			DeleteFunc: mark,
		}); err != nil {
			return fmt.Errorf("event handler for %s: %w", k.kind, err)
		}
	}
	return nil
}

// update marks what an update changes, and nothing when it changes nothing
// the source reads: the status writer's own status patches, a kubelet's
// Node heartbeats, a resync.
func (s *Source) update(kind string, o, n client.Object) {
	switch o := o.(type) {
	case *v1alpha1.EndpointSet:
		// its health comes from status, which does not move the generation
		if nn, ok := n.(*v1alpha1.EndpointSet); ok && o.Generation == nn.Generation && o.Generation != 0 &&
			slices.Equal(o.Status.Health, nn.Status.Health) {
			return
		}
	case *v1alpha1.Upstream:
		// the source reads spec, name, and the leader's active-check and
		// outlier verdicts from status; the rest of status is the status
		// writer's own
		if nn, ok := n.(*v1alpha1.Upstream); ok && o.Generation == nn.Generation && o.Generation != 0 &&
			equality.Semantic.DeepEqual(o.Status.ActiveChecks, nn.Status.ActiveChecks) &&
			equality.Semantic.DeepEqual(o.Status.OutlierEjections, nn.Status.OutlierEjections) {
			return
		}
	case *v1alpha1.Locality, *v1alpha1.SpatialDomain, *v1alpha1.Partition:
		// their status subresource keeps status changes out of the
		// generation, and the source reads only spec and name
		if o.GetGeneration() == n.GetGeneration() && o.GetGeneration() != 0 {
			return
		}
	case *corev1.Service:
		// the ports resolve the reference; trafficDistribution may set the
		// importers' affinity
		if nn, ok := n.(*corev1.Service); ok && samePorts(o.Spec.Ports, nn.Spec.Ports) &&
			equality.Semantic.DeepEqual(o.Spec.TrafficDistribution, nn.Spec.TrafficDistribution) {
			return
		}
	case *discoveryv1.EndpointSlice:
		nn, ok := n.(*discoveryv1.EndpointSlice)
		if !ok {
			break
		}
		if o.Labels[discoveryv1.LabelServiceName] != nn.Labels[discoveryv1.LabelServiceName] {
			s.mark(kind, o) // it left that Service
			break
		}
		if o.AddressType == nn.AddressType && equality.Semantic.DeepEqual(o.Ports, nn.Ports) &&
			equality.Semantic.DeepEqual(o.Endpoints, nn.Endpoints) {
			return
		}
	case *corev1.Node:
		if nn, ok := n.(*corev1.Node); ok && o.Labels[LabelRegion] == nn.Labels[LabelRegion] && o.Labels[LabelZone] == nn.Labels[LabelZone] {
			return
		}
	}
	s.mark(kind, n)
}

// samePorts compares what ServicePort reads of a Service's ports.
func samePorts(a, b []corev1.ServicePort) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.ServicePort) bool { return x.Name == y.Name && x.Port == y.Port })
}

// mark records a changed object; the Run loop picks it up after the debounce.
func (s *Source) mark(kind string, o client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := topology.Key{Namespace: o.GetNamespace(), Name: o.GetName()}
	switch kind {
	case "Service":
		for up := range s.importers[key] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	case "EndpointSlice":
		svc := topology.Key{Namespace: o.GetNamespace(), Name: o.GetLabels()[discoveryv1.LabelServiceName]}
		for up := range s.importers[svc] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	case "Node":
		// a node's labels place the imported endpoints on it
		for up := range s.nodeUsers[o.GetName()] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	default:
		s.dirty[topology.ObjectRef{Kind: kind, Key: key}] = struct{}{}
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// retry marks an object whose read failed, so the next batch reads it again.
func (s *Source) retry(ref topology.ObjectRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirty[ref] = struct{}{}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Rejections returns the objects currently set aside and why.
func (s *Source) Rejections() map[topology.ObjectRef]Rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rejected)
}

// Rejection says whether one object is set aside, and why.
func (s *Source) Rejection(ref topology.ObjectRef) (Rejection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rejected[ref]
	return r, ok
}

// ServiceRefs returns how each importing Upstream's Service reference
// resolved at its last read (ReasonResolved, ReasonServiceNotFound or ReasonPortNotFound).
func (s *Source) ServiceRefs() map[topology.Key]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.refs)
}

// ClusterConditions returns the RemoteClustersSynced condition of each
// Upstream that imports from remote clusters.
func (s *Source) ClusterConditions() map[topology.Key]metav1.Condition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.clusterConds)
}

// MarkRemote marks what a remote cluster's object changes: the Upstreams
// importing its Service, or placed by its Node.
func (s *Source) MarkRemote(cluster, kind string, o client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	switch kind {
	case "Service":
		for up := range s.importers[topology.Key{Namespace: o.GetNamespace(), Name: o.GetName()}] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	case "EndpointSlice":
		for up := range s.importers[topology.Key{Namespace: o.GetNamespace(), Name: o.GetLabels()[discoveryv1.LabelServiceName]}] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	case "Node":
		for up := range s.nodeUsers[cluster+"\x00"+o.GetName()] {
			s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
		}
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// importersOf lists the Upstreams that import a Service, in order.
func (s *Source) importersOf() []topology.Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Collect(maps.Keys(s.serviceOf))
	slices.SortFunc(keys, topology.Key.Compare)
	return keys
}

// ClusterChanged re-imports every importing Upstream: a cluster came, went,
// synced, or crossed the staleness bound.
func (s *Source) ClusterChanged(string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	for up := range s.serviceOf {
		s.dirty[topology.ObjectRef{Kind: topology.KindUpstream, Key: up}] = struct{}{}
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// RejectionsChanged is closed the next time the set of rejections changes,
// or an Upstream's Service reference resolves differently (a Service or
// port appearing changes a status condition even when it imports nothing).
func (s *Source) RejectionsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	return s.changed
}

// NeedLeaderElection: every replica feeds its own Directory and serves xDS.
func (s *Source) NeedLeaderElection() bool { return false }

// Start runs the batching loop until ctx is done (a controller-runtime Runnable).
func (s *Source) Start(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	limit := s.Debounce
	if limit <= 0 {
		limit = 50 * time.Millisecond
	}
	quiet := max(limit/10, time.Millisecond)
	timer := time.NewTimer(limit)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
		// coalesce: what arrives before events pause for quiet joins this
		// batch, up to limit after its first event, so a lone change waits
		// quiet and a stream of them is applied every limit
		deadline := time.Now().Add(limit)
		timer.Reset(quiet)
	collect:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-s.kick:
				timer.Reset(min(quiet, time.Until(deadline)))
			case <-timer.C:
				break collect
			}
		}
		s.sync(ctx)
	}
}

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
	rejected := map[topology.ObjectRef]Rejection{}
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
				s.Metrics.SourceBatches.WithLabelValues(sourceName, "applied").Inc()
				s.Metrics.Revision.Set(float64(snap.Revision))
			}
			break
		}
		if s.Metrics != nil {
			s.Metrics.SourceBatches.WithLabelValues(sourceName, "rejected").Inc()
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

// resolveConflicts settles the problems that are two Locality objects of
// one (upstream, priority, locality) setting different weights as Gateway
// API settles conflicting routes: the older object (by
// metadata.creationTimestamp, then name) wins and stays in the topology;
// the newer is taken out of it (its op dropped, or a delete added when it
// is already in the Directory) and rejected as Conflicted, naming the
// winner. It reports whether it settled any; other problems are left to
// setAside, on the next round when this one settled some.
func (s *Source) resolveConflicts(ctx context.Context, ops []op, be *topology.BatchError, rejected map[topology.ObjectRef]Rejection) ([]op, bool) {
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
		rejected[loser] = Rejection{Reason: v1alpha1.ReasonConflicted, Message: fmt.Sprintf(
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
func (s *Source) setAside(ops []op, be *topology.BatchError, rejected map[topology.ObjectRef]Rejection) []op {
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
			rejected[importOwner(ref, ops)] = Rejection{Reason: reason, Message: fmt.Sprintf("%v (involves %s)", p.Err, joinOthers(names, ref.String()))}
		}
		if !named {
			for ref := range drop {
				rejected[ref] = Rejection{Reason: reason, Message: p.Err.Error()}
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

// read turns one dirty object into batch operations, or a rejection when
// the object itself is invalid.
func (s *Source) read(ctx context.Context, ref topology.ObjectRef) ([]op, *Rejection, error) {
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
			return nil, &Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		// the import comes first: it may give u its affinity
		imp, err := s.importFor(ctx, &u)
		if err != nil {
			return nil, nil, err
		}
		checks, ejections := checkVerdicts(&obj), outlierVerdicts(&obj)
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
			return nil, &Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
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
			return nil, &Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
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
			return nil, &Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
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
			return nil, &Rejection{Reason: v1alpha1.ReasonInvalid, Message: errs.ToAggregate().Error()}, nil
		}
		return []op{{ref: ref, apply: func(b *topology.Batch) { b.PutPartition(p) }}}, nil, nil
	}
	return nil, nil, nil
}
