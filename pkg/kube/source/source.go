package source

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
)

const sourceName = "kubernetes"

// KindService names the endpoint sets imported from a Service's EndpointSlices.
const KindService = "Service"

// Source feeds a Directory from the cluster. All replicas run it.
type Source struct {
	Reader client.Reader // the informer cache, with the index Register adds
	Dir    *topology.Directory
	// Debounce bounds how long a change waits for others to join its batch;
	// 0 means 50ms. A batch is applied as soon as events pause for a tenth
	// of it, and at the latest Debounce after its first event.
	Debounce time.Duration
	Log      *slog.Logger
	Metrics  *metrics.Source
	// ClusterName is the home cluster's name ("" is DefaultClusterName);
	// Remotes, when set, are the remote clusters a Service is imported from.
	ClusterName string
	Remotes     *Remotes

	syncMu   sync.Mutex // one batch at a time
	mu       sync.Mutex
	dirty    map[topology.ObjectRef]struct{}
	kick     chan struct{}
	rejected map[topology.ObjectRef]conditions.Rejection
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
	// last read (a conditions.ReasonServiceNotFound, conditions.ReasonPortNotFound or conditions.ReasonResolved)
	refs map[topology.Key]string
	// clusterConds: the RemoteClustersSynced condition of each Upstream
	// that imports from remote clusters
	clusterConds map[topology.Key]metav1.Condition
	changed      chan struct{} // closed when rejections or refs change
	// readErr is the last error reading an object (which is retried).
	readErr error
}

func (s *Source) init() {
	if s.dirty == nil {
		s.dirty = map[topology.ObjectRef]struct{}{}
		s.kick = make(chan struct{}, 1)
		s.rejected = map[topology.ObjectRef]conditions.Rejection{}
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
	for _, k := range append(Kinds(), []Kind{
		{&corev1.Service{}, "Service"},
		{&discoveryv1.EndpointSlice{}, "EndpointSlice"},
		{&corev1.Node{}, "Node"},
	}...) {
		inf, err := c.GetInformer(ctx, k.Object)
		if err != nil {
			return fmt.Errorf("informer for %s: %w", k.Name, err)
		}
		kind := k.Name
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
			return fmt.Errorf("event handler for %s: %w", k.Name, err)
		}
	}
	return nil
}

// update marks what an update changes, and nothing when it changes nothing
// the source reads: the status writer's own status patches, a kubelet's
// Node heartbeats, a resync.
func (s *Source) update(kind string, o, n client.Object) {
	if o.GetResourceVersion() == n.GetResourceVersion() && o.GetResourceVersion() != "" {
		// a relist's copy of an object held: unchanged, unless the copy
		// held was read with an older schema of its CRD (WatchHealth.Relist)
		if !equality.Semantic.DeepEqual(o, n) {
			s.mark(kind, n)
		}
		return
	}
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
func (s *Source) Rejections() map[topology.ObjectRef]conditions.Rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rejected)
}

// Rejection says whether one object is set aside, and why.
func (s *Source) Rejection(ref topology.ObjectRef) (conditions.Rejection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rejected[ref]
	return r, ok
}

// ServiceRefs returns how each importing Upstream's Service reference
// resolved at its last read (conditions.ReasonResolved, conditions.ReasonServiceNotFound or conditions.ReasonPortNotFound).
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

// Importers lists the Upstreams that import a Service, in order.
func (s *Source) Importers() []topology.Key {
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
