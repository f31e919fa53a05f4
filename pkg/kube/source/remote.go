package source

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"poise.dev/poise/pkg/kube/conditions"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",namespace=poise-system,resources=secrets,verbs=get;list;watch

// ClusterState is a remote cluster's sync state.
type ClusterState string

// The states of a remote cluster.
const (
	// ClusterPending: its cache has not synced yet (nothing imported from it).
	ClusterPending ClusterState = "Pending"
	// ClusterSynced: reachable, and its cache is synced.
	ClusterSynced ClusterState = "Synced"
	// ClusterUnreachable: its apiserver does not answer, for less than the
	// staleness bound; its last-known endpoints serve unchanged.
	ClusterUnreachable ClusterState = "Unreachable"
	// ClusterStale: unreachable for longer than the bound; its last-known
	// endpoints are Unavailable (never deleted) until it answers again.
	ClusterStale ClusterState = "Stale"
	// ClusterError: its Secret cannot be used (the error names the field).
	ClusterError ClusterState = "Error"
)

// ClusterStates lists every state, for the metric.
var ClusterStates = []ClusterState{ClusterPending, ClusterSynced, ClusterUnreachable, ClusterStale, ClusterError}

// Staleness bounds (--remote-stale-after).
const (
	DefaultRemoteStaleAfter = 60 * time.Second
	MinRemoteStaleAfter     = 5 * time.Second
	MaxRemoteStaleAfter     = time.Hour
)

// ClusterStatus is what one remote cluster looks like to this replica.
type ClusterStatus struct {
	Name   string       `json:"name"`
	Secret string       `json:"secret"` // namespace/name
	State  ClusterState `json:"state"`
	// Since is when the current state began (unreachable since, error since).
	Since time.Time `json:"since,omitzero"`
	// LastSync is when the cluster last answered with its cache synced.
	LastSync time.Time `json:"lastSync,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// Remotes is the registry of remote clusters: it watches the labelled
// Secrets in Poise's namespace (and no other Secret), and keeps one cache
// of Services, EndpointSlices and Nodes per remote cluster. Every replica
// runs it, so every replica reads the same clusters.
type Remotes struct {
	// Home reads the Secrets; Namespace is Poise's namespace.
	Home      *rest.Config
	Namespace string
	// HomeName is the home cluster's name (a remote may not take it).
	HomeName string
	// WatchNamespace, when set, limits the remote caches' Services and
	// EndpointSlices to that namespace, as at home.
	WatchNamespace string
	StaleAfter     time.Duration
	// Probe is how often a remote's apiserver is asked for /version (and
	// how long it may take to answer); zero is StaleAfter/10 within
	// 500ms..5s, so a cluster is Stale at most that long after the bound.
	Probe   time.Duration
	Scheme  *runtime.Scheme
	Log     *slog.Logger
	Changed func(cluster string) // a cluster's objects or state changed: re-import
	Mark    func(cluster, kind string, o client.Object)
	// Removed is told when a cluster's Secret goes (its endpoints go with it).
	Removed func(cluster, secret string)

	mu       sync.Mutex
	clusters map[string]*remote // by Secret namespace/name
	secrets  *WatchHealth       // of the Secrets' list and watch
	now      func() time.Time
}

// remote is one registered cluster.
type remote struct {
	name, secret string
	hash         [32]byte // of the kubeconfig, to tell a rotation
	err          string   // the Secret cannot be used
	errSince     time.Time
	cache        cache.Cache          // nil until the first one syncs
	reader       client.Reader        // what imports read: cache
	client       kubernetes.Interface // of cache's credential, for the probe
	stop         context.CancelFunc
	// pending is a cache (of a new credential) not yet synced; it replaces
	// cache when it syncs, and the last-known endpoints serve meanwhile
	pendingStop context.CancelFunc
	pendingErr  string
	health      *WatchHealth
	unreachable time.Time // since; zero while it answers
	stale       bool
	lastSync    time.Time
	lastErr     string
}

func (r *Remotes) staleAfter() time.Duration {
	if r.StaleAfter <= 0 {
		return DefaultRemoteStaleAfter
	}
	return r.StaleAfter
}

func (r *Remotes) probe() time.Duration {
	if r.Probe > 0 {
		return r.Probe
	}
	return min(5*time.Second, max(500*time.Millisecond, r.staleAfter()/10))
}

// NeedLeaderElection: every replica reads every cluster.
func (r *Remotes) NeedLeaderElection() bool { return false }

// Start watches the labelled Secrets until ctx is done (a controller-runtime Runnable).
func (r *Remotes) Start(ctx context.Context) error {
	r.init()
	cs, err := kubernetes.NewForConfig(r.Home)
	if err != nil {
		return fmt.Errorf("remote clusters: client for Secrets: %w", err)
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = LabelRemoteCluster
			return cs.CoreV1().Secrets(r.Namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = LabelRemoteCluster
			return cs.CoreV1().Secrets(r.Namespace).Watch(ctx, o)
		},
	}
	health := NewWatchHealth(r.Log)
	r.mu.Lock()
	r.secrets = health
	r.mu.Unlock()
	inf := health.NewInformer(lw, &corev1.Secret{}, 0, toolscache.Indexers{})
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.secret(ctx, o) },
		UpdateFunc: func(_, o any) { r.secret(ctx, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if s, ok := o.(*corev1.Secret); ok {
				r.gone(s.Namespace + "/" + s.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("remote clusters: Secret handler: %w", err)
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	t := time.NewTicker(r.probe())
	defer t.Stop()
	for {
		r.probeAll(ctx)
		select {
		case <-ctx.Done():
			r.mu.Lock()
			for _, c := range r.clusters {
				c.halt()
			}
			r.mu.Unlock()
			return nil
		case <-t.C:
		}
	}
}

func (r *Remotes) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clusters == nil {
		r.clusters = map[string]*remote{}
		if r.now == nil {
			r.now = time.Now
		}
		if r.Log == nil {
			r.Log = slog.New(slog.DiscardHandler)
		}
	}
}

func (c *remote) halt() {
	if c.stop != nil {
		c.stop()
	}
	if c.pendingStop != nil {
		c.pendingStop()
	}
}

// secret registers, rotates or refuses one Secret.
func (r *Remotes) secret(ctx context.Context, o any) {
	s, ok := o.(*corev1.Secret)
	if !ok {
		return
	}
	key := s.Namespace + "/" + s.Name
	name, cfg, err := RemoteConfig(s, r.HomeName)
	hash := sha256.Sum256(s.Data[RemoteKubeconfigKey])
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.clusters[key]
	if err == nil && old == nil && len(r.clusters) >= MaxRemoteClusters {
		err = fmt.Errorf("Secret %s: more than %d remote clusters are registered; this one is not read", key, MaxRemoteClusters)
	}
	if err == nil {
		for k, c := range r.clusters {
			if k != key && c.name == name && c.err == "" {
				err = fmt.Errorf("Secret %s label %s: cluster %q is registered already by Secret %s", key, LabelRemoteCluster, name, k)
			}
		}
	}
	if old != nil && old.name != name {
		// renamed: the old cluster goes, the new one comes
		old.halt()
		delete(r.clusters, key)
		r.Log.Info("remote cluster renamed", "secret", key, "from", old.name, "to", name)
		go r.removed(old.name, key)
		old = nil
	}
	if err != nil {
		if old != nil && old.err == err.Error() {
			return
		}
		r.Log.Error("remote cluster Secret refused", "secret", key, "error", err)
		if old != nil && old.reader != nil {
			// a bad rotation: the last good credential keeps serving, and
			// the Secret's state says what is wrong with the new one
			old.err, old.errSince, old.hash = err.Error(), r.now(), hash
			return
		}
		if old != nil {
			old.halt()
		}
		r.clusters[key] = &remote{name: name, secret: key, hash: hash, err: err.Error(), errSince: r.now()}
		return
	}
	if old != nil && old.err == "" && old.hash == hash {
		return // a resync, or a change of something else
	}
	c := old
	if c == nil || (c.err != "" && c.reader == nil) {
		c = &remote{name: name, secret: key}
		r.clusters[key] = c
	}
	c.err, c.hash = "", hash
	if c.pendingStop != nil {
		c.pendingStop()
	}
	if c.reader != nil {
		r.Log.Info("remote cluster Secret rotated; the last-known endpoints serve until the new credential syncs", "cluster", name, "secret", key)
	} else {
		r.Log.Info("remote cluster registered", "cluster", name, "secret", key, "server", cfg.Host)
	}
	cctx, cancel := context.WithCancel(ctx)
	c.pendingStop, c.pendingErr = cancel, ""
	go r.build(cctx, cancel, key, c, cfg)
}

// build starts a cache for one cluster's credential and, once it syncs,
// makes it the cluster's cache (stopping the one it replaces).
func (r *Remotes) build(ctx context.Context, cancel context.CancelFunc, key string, c *remote, cfg *rest.Config) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	cfg.Timeout = 10 * time.Second
	health := NewWatchHealth(r.Log.With("cluster", c.name))
	opts := cache.Options{
		Scheme:           r.Scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
		NewInformer:      health.NewInformer,
	}
	if r.WatchNamespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{r.WatchNamespace: {}}
		opts.ByObject = map[client.Object]cache.ByObject{&corev1.Node{}: {}}
	}
	fail := func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.clusters[key] == c && ctx.Err() == nil {
			c.pendingErr = err.Error()
		}
		r.Log.Error("remote cluster cache", "cluster", c.name, "secret", key, "error", err)
	}
	var live atomic.Bool // the handlers mark only once this cache is the cluster's
	var cs kubernetes.Interface
	var ca cache.Cache
	// an apiserver away at registration is retried until it answers
	for {
		var err error
		cs, ca, err = r.newCache(ctx, c, key, cfg, opts, &live)
		if err == nil {
			break
		}
		fail(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.probe()):
		}
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			fail(fmt.Errorf("cluster %s: %w", c.name, err))
		}
	}()
	for !ca.WaitForCacheSync(withTimeout(ctx, r.probe())) {
		if ctx.Err() != nil {
			return
		}
		// say why it has not synced yet (a refused credential, say)
		for kind, d := range health.Stale() {
			if d > 0 {
				fail(fmt.Errorf("Secret %s data.%s: cluster %s: the list of %s does not succeed: %s", key, RemoteKubeconfigKey, c.name, kind, health.lastError(kind)))
				break
			}
		}
	}
	r.mu.Lock()
	if r.clusters[key] != c || ctx.Err() != nil {
		r.mu.Unlock()
		cancel()
		return
	}
	if c.stop != nil {
		c.stop()
	}
	c.cache, c.reader, c.stop, c.health, c.client = ca, ca, cancel, health, cs
	c.pendingStop, c.pendingErr = nil, ""
	c.unreachable, c.stale, c.lastErr = time.Time{}, false, ""
	c.lastSync = r.now()
	r.mu.Unlock()
	live.Store(true)
	r.Log.Info("remote cluster synced", "cluster", c.name, "secret", key)
	if r.Changed != nil {
		r.Changed(c.name)
	}
}

// newCache builds one credential's cache of the cluster's Services,
// EndpointSlices and Nodes, with its handlers (which mark once live).
func (r *Remotes) newCache(ctx context.Context, c *remote, key string, cfg *rest.Config, opts cache.Options, live *atomic.Bool) (kubernetes.Interface, cache.Cache, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("Secret %s data.%s: client for cluster %s: %w", key, RemoteKubeconfigKey, c.name, err)
	}
	ca, err := cache.New(cfg, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("Secret %s data.%s: cache for cluster %s: %w", key, RemoteKubeconfigKey, c.name, err)
	}
	if err := ca.IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, func(o client.Object) []string {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			return []string{svc}
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("cluster %s: index EndpointSlices: %w", c.name, err)
	}
	for _, k := range []Kind{{&corev1.Service{}, "Service"}, {&discoveryv1.EndpointSlice{}, "EndpointSlice"}, {&corev1.Node{}, "Node"}} {
		inf, err := ca.GetInformer(ctx, k.Object)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster %s: informer for %s: %w", c.name, k.Name, err)
		}
		kind := k.Name
		mark := func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if obj, ok := o.(client.Object); ok && live.Load() && r.Mark != nil {
				r.Mark(c.name, kind, obj)
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: mark, DeleteFunc: mark,
			UpdateFunc: func(o, n any) {
				if sameForImport(o, n) {
					return
				}
				mark(n)
				if s, ok := o.(*discoveryv1.EndpointSlice); ok {
					mark(s) // it may have left its Service
				}
			},
		}); err != nil {
			return nil, nil, fmt.Errorf("cluster %s: handler for %s: %w", c.name, k.Name, err)
		}
	}
	return cs, ca, nil
}

func withTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c
}

// sameForImport reports whether an update changes nothing an import reads.
func sameForImport(o, n any) bool {
	switch o := o.(type) {
	case *corev1.Service:
		nn, ok := n.(*corev1.Service)
		return ok && samePorts(o.Spec.Ports, nn.Spec.Ports)
	case *discoveryv1.EndpointSlice:
		nn, ok := n.(*discoveryv1.EndpointSlice)
		return ok && o.Labels[discoveryv1.LabelServiceName] == nn.Labels[discoveryv1.LabelServiceName] &&
			o.AddressType == nn.AddressType && slices.EqualFunc(o.Ports, nn.Ports, func(a, b discoveryv1.EndpointPort) bool {
			return ptrEq(a.Name, b.Name) && ptrEq(a.Port, b.Port)
		}) && slices.EqualFunc(o.Endpoints, nn.Endpoints, sameEndpoint)
	case *corev1.Node:
		nn, ok := n.(*corev1.Node)
		return ok && o.Labels[LabelRegion] == nn.Labels[LabelRegion] && o.Labels[LabelZone] == nn.Labels[LabelZone]
	}
	return false
}

func sameEndpoint(a, b discoveryv1.Endpoint) bool {
	return slices.Equal(a.Addresses, b.Addresses) && ptrEq(a.NodeName, b.NodeName) && ptrEq(a.Zone, b.Zone) &&
		ptrEq(a.Conditions.Ready, b.Conditions.Ready) && ptrEq(a.Conditions.Serving, b.Conditions.Serving) &&
		ptrEq(a.Conditions.Terminating, b.Conditions.Terminating) &&
		(a.TargetRef == nil) == (b.TargetRef == nil) &&
		(a.TargetRef == nil || a.TargetRef.UID == b.TargetRef.UID && a.TargetRef.Name == b.TargetRef.Name && a.TargetRef.Kind == b.TargetRef.Kind)
}

func ptrEq[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// gone stops a deleted Secret's cluster.
func (r *Remotes) gone(key string) {
	r.mu.Lock()
	c := r.clusters[key]
	delete(r.clusters, key)
	r.mu.Unlock()
	if c == nil {
		return
	}
	c.halt()
	r.Log.Info("remote cluster Secret deleted; its endpoints are removed", "cluster", c.name, "secret", key)
	if c.reader != nil {
		r.removed(c.name, key)
	}
}

func (r *Remotes) removed(name, key string) {
	if r.Removed != nil {
		r.Removed(name, key)
	}
	if r.Changed != nil {
		r.Changed(name)
	}
}

// probeAll asks every synced cluster's apiserver for /version, and moves
// a cluster that has not answered for StaleAfter to Stale.
func (r *Remotes) probeAll(ctx context.Context) {
	r.mu.Lock()
	var ts []*remote
	for _, c := range r.clusters {
		if c.client != nil {
			ts = append(ts, c)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.ping(ctx, c)
			if ctx.Err() != nil {
				return
			}
			r.observe(c, err)
		}()
	}
	wg.Wait()
}

// ping is the cheap request: GET /version, bounded by the probe period.
// It asks the server itself: an informer's cache would answer from memory.
func (r *Remotes) ping(ctx context.Context, c *remote) error {
	r.mu.Lock()
	cs := c.client
	r.mu.Unlock()
	ictx, cancel := context.WithTimeout(ctx, r.probe())
	defer cancel()
	return cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ictx).Error()
}

// observe records a probe's answer.
func (r *Remotes) observe(c *remote, err error) {
	r.mu.Lock()
	now := r.now()
	changed := false
	if err != nil {
		c.lastErr = err.Error()
		if c.unreachable.IsZero() {
			// since the first sign: this probe, or a watch that broke before it
			c.unreachable = now
			if c.health != nil {
				if b := c.health.BrokenSince(); !b.IsZero() && b.Before(now) {
					c.unreachable = b
				}
			}
			r.Log.Warn("remote cluster unreachable; its last-known endpoints keep serving", "cluster", c.name, "servedFor", r.staleAfter(), "error", err)
		}
		if !c.stale && now.Sub(c.unreachable) >= r.staleAfter() {
			c.stale, changed = true, true
			r.Log.Warn("remote cluster unreachable past the staleness bound; its endpoints are Unavailable", "cluster", c.name, "since", c.unreachable.UTC().Format(time.TimeOnly))
		}
	} else {
		if !c.unreachable.IsZero() {
			r.Log.Info("remote cluster reachable again", "cluster", c.name, "unreachableFor", now.Sub(c.unreachable).Round(time.Millisecond))
			changed = c.stale
		}
		c.unreachable, c.stale, c.lastErr = time.Time{}, false, ""
		c.lastSync = now
	}
	name := c.name
	r.mu.Unlock()
	if changed && r.Changed != nil {
		r.Changed(name)
	}
}

// remoteView is what an import reads of one cluster.
type remoteView struct {
	name   string
	reader client.Reader
	// staleSince is set while the cluster is past the staleness bound
	staleSince time.Time
}

// views returns the usable clusters (a synced cache) in name order.
func (r *Remotes) views() []remoteView {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []remoteView
	for _, c := range r.clusters {
		if c.reader == nil {
			continue
		}
		v := remoteView{name: c.name, reader: c.reader}
		if c.stale {
			v.staleSince = c.unreachable
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b remoteView) int { return strings.Compare(a.name, b.name) })
	return out
}

// Status returns every registered cluster's state, in name order.
func (r *Remotes) Status() []ClusterStatus {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ClusterStatus, 0, len(r.clusters))
	for _, c := range r.clusters {
		s := ClusterStatus{Name: c.name, Secret: c.secret, LastSync: c.lastSync}
		switch {
		case c.err != "" && c.reader != nil:
			s.State, s.Since, s.Error = ClusterError, c.errSince, c.err+" (the previous credential keeps serving)"
		case c.err != "":
			s.State, s.Since, s.Error = ClusterError, c.errSince, c.err
		case c.reader == nil && c.pendingErr != "":
			s.State, s.Error = ClusterError, c.pendingErr
		case c.reader == nil:
			s.State = ClusterPending
		case c.stale:
			s.State, s.Since, s.Error = ClusterStale, c.unreachable, c.lastErr
		case !c.unreachable.IsZero():
			s.State, s.Since, s.Error = ClusterUnreachable, c.unreachable, c.lastErr
		default:
			s.State = ClusterSynced
			if c.pendingErr != "" {
				s.Error = "a rotated credential has not synced; the previous one serves: " + c.pendingErr
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return strings.Compare(a.Name+"/"+a.Secret, b.Name+"/"+b.Secret) })
	return out
}

// StateValues is poise_remote_cluster_state: 1 for each cluster's current state.
func (r *Remotes) StateValues() map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, s := range r.Status() {
		for _, st := range ClusterStates {
			v := 0.0
			if st == s.State {
				v = 1
			}
			out[[2]string{s.Name, string(st)}] = v
		}
	}
	return out
}

// LastSyncSeconds is poise_remote_cluster_last_sync_seconds: seconds since
// each cluster last answered synced (since registration while it never has).
func (r *Remotes) LastSyncSeconds() map[string]float64 {
	out := map[string]float64{}
	if r == nil {
		return out
	}
	now := time.Now()
	for _, s := range r.Status() {
		if !s.LastSync.IsZero() {
			out[s.Name] = now.Sub(s.LastSync).Seconds()
		} else {
			out[s.Name] = -1
		}
	}
	return out
}

// Warnings are the /readyz lines: one per remote cluster that is not
// Synced. A remote cluster never makes a replica unready: its staleness is
// every replica's, and the rest of the topology serves.
func (r *Remotes) Warnings() []string {
	var out []string
	r.mu.Lock()
	h := r.secrets
	r.mu.Unlock()
	if h != nil {
		// the remote clusters' Secrets cannot be read (RBAC, say): the
		// clusters last registered keep serving
		for _, w := range h.Warnings() {
			out = append(out, "remote clusters' Secrets in "+r.Namespace+": "+w)
		}
	}
	for _, s := range r.Status() {
		line := fmt.Sprintf("remote cluster %s (Secret %s): %s", s.Name, s.Secret, s.State)
		switch s.State {
		case ClusterSynced:
			if s.Error == "" {
				continue
			}
		case ClusterUnreachable:
			line += fmt.Sprintf(" since %s; its last-known endpoints serve until %s", s.Since.UTC().Format(time.TimeOnly), s.Since.Add(r.staleAfter()).UTC().Format(time.TimeOnly))
		case ClusterStale:
			line += fmt.Sprintf(" since %s; its endpoints are Unavailable until it answers", s.Since.UTC().Format(time.TimeOnly))
		}
		if s.Error != "" {
			line += ": " + conditions.Clip(s.Error, maxWatchErrorText)
		}
		out = append(out, line)
	}
	return out
}
