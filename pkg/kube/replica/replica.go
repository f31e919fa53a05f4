package replica

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/config/crd"
	"poise.dev/poise/pkg/kube/checks"
	"poise.dev/poise/pkg/kube/crdschema"
	"poise.dev/poise/pkg/kube/leader"
	"poise.dev/poise/pkg/kube/outliers"
	"poise.dev/poise/pkg/kube/shares"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/kube/status"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/healthcheck"
	"poise.dev/poise/pkg/topology"
)

// DefaultLeaderElectionID is the name of the status writer's Lease when
// Options.LeaderElectionID is empty.
const DefaultLeaderElectionID = "poise-status-writer"

// Options configure one replica's Kubernetes side.
type Options struct {
	// Namespace limits the source to one namespace; "" watches all.
	Namespace string
	// LeaderElectionNamespace and LeaderElectionID name the Lease that
	// elects the status writer.
	LeaderElectionNamespace, LeaderElectionID string
	// StopLeading, when set, ends this replica's part in the election (and
	// the leader's work with it) before the context Start runs on ends: a
	// stopping replica hands the Lease on at once and goes on reading the
	// cluster for its xDS clients while their streams drain.
	StopLeading context.Context
	// ContextNamespace is the namespace of the kubeconfig context the
	// replica runs with, outside a pod: where the Lease lives when neither
	// flag nor the pod's own namespace says.
	ContextNamespace string
	// LeaseDuration, RenewDeadline, RetryPeriod tune the election; zero means
	// controller-runtime's defaults (15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Debounce                                  time.Duration
	Log                                       *slog.Logger
	Metrics                                   Metrics
	// Publication tells the status writer what xDS carries (nil: every
	// snapshot counts as published once it is current).
	Publication status.Publication
	// ClientQPS and ClientBurst bound every request this replica makes to the
	// apiserver, all clients together (informers, leader election, status
	// writes); zero means DefaultClientQPS and DefaultClientBurst.
	ClientQPS   float64
	ClientBurst int
	// StatusShare is the part of ClientQPS and ClientBurst that status writes
	// may take, in (0, 1]; zero means DefaultStatusShare. The rest is kept
	// for the Lease renewals and the informers' lists and watches.
	StatusShare float64
	// StatusWorkers is how many status writes may be in flight at once; zero
	// means DefaultStatusWorkers.
	StatusWorkers int
	// HealthChecks configures the active health checks the leader runs
	// (spec.healthCheck); its Name names this replica in their origins and
	// its shared load aggregate.
	HealthChecks healthcheck.Config
	// OutlierPeriod is how often the leader decides fleet outlier detection
	// (spec.outlierDetection), and OutlierWindow the load reports' window;
	// zero OutlierPeriod means 5s, zero OutlierWindow six periods.
	OutlierPeriod, OutlierWindow time.Duration
	// ClusterName is the home cluster's name ("" is DefaultClusterName);
	// RemoteStaleAfter how long an unreachable remote cluster's last-known
	// endpoints serve before they are Unavailable (zero is
	// DefaultRemoteStaleAfter). See docs/multicluster.md.
	ClusterName      string
	RemoteStaleAfter time.Duration
	// NoRemoteClusters: watch no Secret and import from the home cluster
	// only (an install without multi-cluster has no RBAC for Secrets).
	NoRemoteClusters bool
}

// Defaults of the Kubernetes client and of the status writer's share of it
// (docs/kubernetes.md, "Status at scale", says why these figures).
const (
	DefaultClientQPS     = 1000
	DefaultClientBurst   = 2000
	DefaultStatusShare   = 0.8
	DefaultStatusWorkers = 16
)

// StatusBudgetOf is the status writer's budget under the options.
func (o Options) StatusBudgetOf() status.Budget {
	qps, burst, share, workers := o.ClientQPS, o.ClientBurst, o.StatusShare, o.StatusWorkers
	if qps <= 0 {
		qps = DefaultClientQPS
	}
	if burst <= 0 {
		burst = DefaultClientBurst
	}
	if share <= 0 || share > 1 {
		share = DefaultStatusShare
	}
	if workers <= 0 {
		workers = DefaultStatusWorkers
	}
	return status.Budget{QPS: qps * share, Burst: max(1, int(float64(burst)*share)), Workers: workers}
}

// Replica is one control-plane replica's Kubernetes side: a manager whose
// informers feed the Directory on every replica, and whose status writer
// runs only on the elected leader.
type Replica struct {
	Manager manager.Manager
	Source  *source.Source
	Status  *status.Writer
	// Shares carries this replica's load aggregate to the leader.
	Shares *shares.Store
	// Watch says which kinds' watches are broken, and since when.
	Watch *source.WatchHealth
	// Remotes are the remote clusters Services are imported from.
	Remotes *source.Remotes
	// CRDs says how the cluster's CRDs stand to those this binary was
	// built with.
	CRDs *crdschema.Watcher
	log  *slog.Logger
}

// crdCheckWait bounds how long a replica that starts waits for the first
// reading of the cluster's CRDs before its first publication.
const crdCheckWait = 10 * time.Second

// relistsAfterCRDChange are how long after a CRD's spec changes the kind
// is listed again (source.WatchHealth.Relist): the apiserver serves new
// requests from the new schema once its own CRD informer has the change,
// which may come after this replica's (seconds later on a loaded
// apiserver), and tears the old storage down, ending the watches opened
// before, a second or more later. A watch the first relist opens may still
// be served the old schema; the later ones are opened after the switch on
// any apiserver that is not minutes behind. Five lists of one kind per CRD
// change, which an upgrade makes once.
var relistsAfterCRDChange = []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}

// Metrics are the metrics the replica hands to what it assembles: the
// source's, the status writer's (with the leader gauge), the active
// checks' and fleet outlier detection's. A nil group is not recorded.
type Metrics struct {
	Source   *metrics.Source
	Status   *metrics.Status
	Checks   *metrics.Checks
	Outliers *metrics.Outliers
}

// NewReplica builds the manager, the source and the status writer.
func NewReplica(cfg *rest.Config, dir *topology.Directory, o Options) (*Replica, error) {
	scheme, err := source.Scheme()
	if err != nil {
		return nil, err
	}
	conns := connrotation.NewConnectionTracker()
	cfg = clientConfig(cfg, o, conns)
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	health := source.NewWatchHealth(log)
	crds, err := crdWatcher(cfg, log.With("component", "crd-schemas"))
	if err != nil {
		return nil, err
	}
	crds.SchemaChanged = func(kind string) {
		for _, after := range relistsAfterCRDChange {
			time.AfterFunc(after, func() { health.Relist(kind) })
		}
	}
	if o.Metrics.Source != nil {
		o.Metrics.Source.SetKubeStale(health.StaleSeconds)
		o.Metrics.Source.SetCRDSchemas(crds.Outdated, crds.PrunedFields)
	}
	id := o.LeaderElectionID
	if id == "" {
		id = DefaultLeaderElectionID
	}
	ns, why, err := leader.LeaseNamespace(o.LeaderElectionNamespace, o.Namespace, leader.PodNamespaceFile, o.ContextNamespace)
	if err != nil {
		return nil, err
	}
	log.Info("status-writer Lease", "namespace", ns, "name", id, "chosenBecause", why)
	// The manager runs no election of its own: every replica's informers and
	// source run always, and the elector below gates only the status writer.
	mopts := manager.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions(o, health),
		Logger:                 logr.FromSlogHandler(log.Handler()),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	lease, renew, retry := 15*time.Second, 10*time.Second, 2*time.Second
	if o.LeaseDuration > 0 {
		lease, renew, retry = o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	}
	m, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("kubernetes manager: %w", err)
	}
	server, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes apiserver address: %w", err)
	}
	if err := m.Add(&source.Heartbeat{Health: health, Client: m.GetHTTPClient(), URL: server.JoinPath("version").String(),
		Every: source.DefaultHeartbeat, Timeout: source.DefaultHeartbeatTimeout, CloseAll: conns.CloseAll}); err != nil {
		return nil, err
	}
	home, stale, err := homeCluster(o)
	if err != nil {
		return nil, err
	}
	remotes := &source.Remotes{Home: cfg, Namespace: ns, HomeName: home, WatchNamespace: o.Namespace, StaleAfter: stale,
		Scheme: scheme, Log: log.With("component", "remote-clusters")}
	src := &source.Source{Reader: m.GetCache(), Dir: dir, Debounce: o.Debounce, Log: log, Metrics: o.Metrics.Source, ClusterName: home, Remotes: remotes}
	events := m.GetEventRecorder("poise-controlplane")
	var leading atomic.Bool
	remotes.Mark, remotes.Changed = src.MarkRemote, src.ClusterChanged
	remotes.Removed = removedClusterEvents(m.GetCache(), src, events, &leading)
	if o.Metrics.Source != nil {
		o.Metrics.Source.SetRemoteClusters(remotes.StateValues, remotes.LastSyncSeconds)
	}
	if !o.NoRemoteClusters {
		if err := m.Add(remotes); err != nil {
			return nil, err
		}
	}
	sw := &status.Writer{Client: m.GetClient(), Dir: dir, Source: src, Publication: o.Publication, Log: log, Metrics: o.Metrics.Status,
		Budget: o.StatusBudgetOf(), Events: events}
	if err := m.Add(src); err != nil {
		return nil, err
	}
	cw := &checks.Writer{Client: m.GetClient(), Dir: dir, Config: o.HealthChecks, Log: log, Metrics: o.Metrics.Checks}
	period, window := o.OutlierPeriod, o.OutlierWindow
	if period <= 0 {
		period = 5 * time.Second
	}
	if window <= 0 {
		window = 6 * period
	}
	shares := &shares.Store{Writer: m.GetClient(), Reader: m.GetAPIReader(), Namespace: ns, Lease: id, Replica: o.HealthChecks.Name}
	ow := &outliers.Writer{Client: m.GetClient(), Dir: dir, Shares: shares, Period: period, Window: window, Log: log, Metrics: o.Metrics.Outliers, Events: events}
	ce := &status.CRDEvents{Schemas: crds, Events: events, LeaseNamespace: ns, LeaseName: id}
	el := &leader.Elector{Config: cfg, Namespace: ns, Name: id, Identity: leader.NewIdentity(), LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
		Lead: leaderWork(sw, []leaderTask{cw.Run, ow.Run, ce.Run}, log), Log: log, Events: events, Leading: leading.Store, Until: o.StopLeading}
	if o.Metrics.Status != nil {
		el.Leading = func(l bool) {
			leading.Store(l)
			v := 0.0
			if l {
				v = 1
			}
			o.Metrics.Status.Leader.Set(v)
		}
	}
	if err := m.Add(el); err != nil {
		return nil, err
	}
	return &Replica{Manager: m, Source: src, Status: sw, Watch: health, Shares: shares, Remotes: remotes, CRDs: crds, log: log}, nil
}

// crdWatcher follows the cluster's copies of the CRDs this binary embeds.
func crdWatcher(cfg *rest.Config, log *slog.Logger) (*crdschema.Watcher, error) {
	binary, err := crdschema.Load(crd.Files, crd.Pattern)
	if err != nil {
		return nil, fmt.Errorf("the CRDs this binary was built with: %w", err)
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("CRD client: %w", err)
	}
	return crdschema.NewWatcher(cs.ApiextensionsV1().CustomResourceDefinitions(), binary, log), nil
}

// clientConfig is cfg with one token bucket for every client made from it,
// so ClientQPS bounds the replica as a whole, and with every connection
// its clients dial tracked by conns, for the heartbeat to end them all
// when the apiserver stops answering.
func clientConfig(cfg *rest.Config, o Options, conns *connrotation.ConnectionTracker) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	dial := cfg.Dial
	if dial == nil {
		// a short dial timeout: during a partition each retried watch
		// dials again every few seconds, so one resumes soon after the
		// link heals instead of waiting out a long SYN back-off
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	cfg.Dial = connrotation.NewDialerWithTracker(dial, conns).DialContext
	cfg.QPS, cfg.Burst = float32(o.ClientQPS), o.ClientBurst
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultClientQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultClientBurst
	}
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	return cfg
}

// cacheOptions are the informer cache's options: in the watched namespace
// (Nodes are cluster-wide), without managedFields, and with lists and
// watches that health follows.
func cacheOptions(o Options, health *source.WatchHealth) cache.Options {
	copts := cache.Options{
		// managedFields are large and never read: keep them out of memory
		DefaultTransform: cache.TransformStripManagedFields(),
		// lists and watches retried within seconds of an apiserver's return
		NewInformer: health.NewInformer,
	}
	if o.Namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
		copts.ByObject = map[client.Object]cache.ByObject{&corev1.Node{}: {}}
	}
	return copts
}

// homeCluster is the home cluster's name and how long an unreachable remote
// cluster's endpoints serve, defaulted and checked.
func homeCluster(o Options) (home string, stale time.Duration, err error) {
	home = o.ClusterName
	if home == "" {
		home = source.DefaultClusterName
	}
	if why := source.ValidClusterName(home); why != "" {
		return "", 0, fmt.Errorf("--cluster-name: %s", why)
	}
	stale = o.RemoteStaleAfter
	if stale == 0 {
		stale = source.DefaultRemoteStaleAfter
	}
	if stale < source.MinRemoteStaleAfter || stale > source.MaxRemoteStaleAfter {
		return "", 0, fmt.Errorf("--remote-stale-after %v: must be within %v..%v", stale, source.MinRemoteStaleAfter, source.MaxRemoteStaleAfter)
	}
	return home, stale, nil
}

// removedClusterEvents is what a remote cluster's removal does on top of
// removing its endpoints, which every replica does: the leader puts an
// Event on each importing Upstream.
func removedClusterEvents(r client.Reader, src *source.Source, events status.EventRecorder, leading *atomic.Bool) func(cluster, secret string) {
	return func(cluster, secret string) {
		if !leading.Load() {
			return
		}
		for _, up := range src.Importers() {
			var u v1alpha1.Upstream
			if err := r.Get(context.Background(), client.ObjectKey{Namespace: up.Namespace, Name: up.Name}, &u); err == nil {
				events.Eventf(&u, nil, corev1.EventTypeWarning, "RemoteClusterRemoved", status.EventAction,
					"remote cluster %s (Secret %s) is no longer registered: its endpoints are removed from this Upstream", cluster, secret)
			}
		}
	}
}

// leaderTask is work the leader runs beside the status writer, until its
// context ends.
type leaderTask func(context.Context) error

// leaderWork is what the leader runs while it holds the Lease: it writes
// every status and, beside it, runs the active checks, decides fleet
// outlier detection and records the CRD schema Events (tasks).
func leaderWork(sw *status.Writer, tasks []leaderTask, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, len(tasks))
		for _, task := range tasks {
			go func() { done <- task(cctx) }()
		}
		err := sw.Start(ctx)
		cancel()
		for range tasks {
			if lerr := <-done; lerr != nil {
				log.Error("leader work stopped", "error", lerr)
			}
		}
		return err
	}
}

// Start registers the informers, starts the manager, and returns once the
// caches are synced, the cluster's CRDs read once (or crdCheckWait has
// passed), and the first batch (everything that exists) is applied: a CRD
// that prunes fields this binary knows is warned of before the first
// publication. The manager runs until ctx is done; its error arrives on the
// channel.
func (r *Replica) Start(ctx context.Context) (<-chan error, error) {
	// first, and outside the manager: a CRD that is not installed keeps the
	// caches from syncing, and the watcher's log says why
	go func() { _ = r.CRDs.Run(ctx) }()
	if err := r.Source.Register(ctx, r.Manager.GetCache()); err != nil {
		return nil, err
	}
	if err := r.Status.Register(ctx, r.Manager.GetCache()); err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Manager.Start(ctx) }()
	if !r.Manager.GetCache().WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("kubernetes caches did not sync: %w", err)
		default:
			return nil, fmt.Errorf("kubernetes caches did not sync")
		}
	}
	select {
	case <-r.CRDs.Checked():
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(crdCheckWait):
		r.log.Warn("the cluster's CRDs were not read within the wait: serving meanwhile, the check goes on", "wait", crdCheckWait)
	}
	if err := r.Source.InitialSync(ctx); err != nil {
		return nil, err
	}
	return errc, nil
}
