package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/healthcheck"
	"poise.dev/poise/pkg/kubereplica"
	"poise.dev/poise/pkg/loadreport"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/outlier"
	"poise.dev/poise/pkg/source/files"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// Config is one control-plane process.
type Config struct {
	Source                                         string // "files" (default) or "kubernetes"
	Paths                                          []string
	Kubeconfig, Namespace, LeaderElectionNamespace string
	RestConfig                                     *rest.Config // overrides Kubeconfig
	LeaderElectionID                               string
	LeaseDuration, RenewDeadline, RetryPeriod      time.Duration
	// KubeQPS and KubeBurst bound the requests to the apiserver, all together;
	// StatusShare is the part of them status writes may take, StatusWriters
	// how many status writes may be in flight at once. Zero: the defaults of
	// pkg/source/kube.
	KubeQPS                  float64
	KubeBurst                int
	StatusShare              float64
	StatusWriters            int
	XDSAddress, AdminAddress string
	// MetricsAddress, when set, serves /healthz, /readyz and /metrics alone
	// (no debug endpoints), for probes and scrapers that must not reach
	// the admin port.
	MetricsAddress string
	TLS            *server.TLS
	// MaxStreams and MaxStreamsPerConnection bound the xDS streams (zero:
	// the server's defaults).
	MaxStreams, MaxStreamsPerConnection int
	// DrainPeriod: how long stopping takes to end the xDS streams (see
	// server.Config.DrainPeriod).
	DrainPeriod time.Duration
	// LoadReportMaxCells is the hard cap of the load-report store (cells:
	// one reporter's counts for one endpoint); 0 is
	// loadreport.DefaultMaxCells.
	LoadReportMaxCells int
	// HealthCheckConcurrency and HealthCheckMaxEndpoints bound the active
	// health checks (healthcheck.Config); 0 is the package's default.
	HealthCheckConcurrency, HealthCheckMaxEndpoints int
	// ReplicaName names this replica where it decides something, as the
	// active checks' origins do; "" is the hostname (a pod's name).
	ReplicaName string
	// LoadReportBucket is the load-report store's bucket (the window is six
	// of them) and the period of fleet outlier detection; 0 is
	// loadreport.DefaultBucket. Shorter is for tests and tuning.
	LoadReportBucket time.Duration
	// MaxClientClasses bounds the client-locality classes rendered at once
	// (xdscache.WithMaxZones); 0 is xdscache.DefaultMaxZones.
	MaxClientClasses int
	// ClusterName is the home cluster's name and RemoteStaleAfter how long
	// an unreachable remote cluster's endpoints serve (kube.Options).
	ClusterName      string
	RemoteStaleAfter time.Duration
	// NoRemoteClusters: read no Secret, import from the home cluster only
	// (serve --remote-clusters=false).
	NoRemoteClusters bool
	// MetricsNoLocalityGauges leaves out poise_upstream_locality_traffic
	// (the zero value exports it); MetricsMaxUpstreams bounds the upstreams
	// with per-upstream gauges (0: metrics.DefaultMaxUpstreams; negative:
	// none). See metrics.Upstreams.
	MetricsNoLocalityGauges bool
	MetricsMaxUpstreams     int
	// Spatial says where Envoy's spatial routing listener binds (zero: 0.0.0.0:10080).
	Spatial translate.SpatialOptions
	// Debounce: the files source applies a change once the files have been
	// quiet this long; the Kubernetes source coalesces the changes arriving
	// within it. 0: the source's default.
	Debounce time.Duration
	// DebounceMax bounds how long the files source holds changes that never
	// fall quiet: they are applied at the latest this long after the first.
	// 0: twice Debounce.
	DebounceMax time.Duration
	// Settle: a change to the manifest files that empties, removes or cuts
	// a file to less than half of its objects is applied only once it has
	// lasted this long (files.Source.Settle). 0: the source's default;
	// negative: at once.
	Settle time.Duration
	Log    *slog.Logger
	Out    io.Writer // where the start-up banner goes; nil for none
	// BannerFormat is "json" for a banner that is one JSON object (a log
	// record beside the others under --log-format json); else text.
	BannerFormat string
	Version      string
	// Started, when set, is called once both ports listen.
	Started func(Addrs)
}

// reportsLoad says which upstreams' clients report load: those with
// spec.loadReporting.
func reportsLoad(u *topology.UpstreamState) bool { return u.Upstream.LoadReportInterval > 0 }

// Addrs are where a running control plane listens.
type Addrs struct {
	XDS, Admin, Instance string
	Metrics              string // empty without Config.MetricsAddress
}

// libraryLogs is set once per process: controller-runtime and client-go log
// through process-wide loggers, and setting them again while another Run in
// the same process (a test's second replica) is logging would race.
var libraryLogs sync.Once

func routeLibraryLogs(log *slog.Logger) {
	libraryLogs.Do(func() {
		ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
		klog.SetLoggerWithOptions(logr.FromSlogHandler(log.Handler()), klog.WriteKlogBuffer(klogWriter(log)))
	})
}

// klogWriter logs klog's unstructured lines (klog.Warning, Infof, ...) at
// their own level. Through a logr.Logger klog hands a warning to Info, so
// it would read as INFO; given a writer, it hands over the formatted line,
// whose header ("W0102 15:04:05.000000 42 file.go:7] ") names the severity.
// Structured calls (InfoS, ErrorS, V(n)) still go through the logr.Logger.
func klogWriter(log *slog.Logger) func([]byte) {
	return func(line []byte) {
		text := strings.TrimRight(string(line), "\n")
		level := slog.LevelInfo
		if text != "" {
			switch text[0] {
			case 'W':
				level = slog.LevelWarn
			case 'E', 'F':
				level = slog.LevelError
			}
		}
		var attrs []any
		if i := strings.Index(text, "] "); i >= 0 {
			if f := strings.Fields(text[:i]); len(f) == 4 {
				attrs = append(attrs, "caller", f[3])
			}
			text = text[i+2:]
		}
		log.Log(context.Background(), level, text, attrs...)
	}
}

// Run runs the control plane until ctx is done: the source fills the
// topology, the publisher publishes it, the xDS and admin servers serve it.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	m := metrics.New()
	m.SetBuildInfo(cfg.Version)
	// controller-runtime's registry holds client-go's REST client metrics
	// (requests by code, latency, rate-limiter wait, retries), its work
	// queues' and the leader election's; /metrics serves it beside ours,
	// less its own Go and process collectors, which would repeat ours.
	ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency, ctrlmetrics.MetricRateLimiterLatency,
		ctrlmetrics.MetricRequestRetry)
	m.Include(metrics.Without(ctrlmetrics.Registry, "go_", "process_"))
	dir := topology.NewDirectory()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	instance := publish.NewInstanceID()
	maxClasses := cfg.MaxClientClasses
	if maxClasses == 0 {
		maxClasses = xdscache.DefaultMaxZones
	}
	cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) },
		xdscache.WithMaxZones(maxClasses))
	m.SetClientClasses(func() map[string]float64 {
		out := make(map[string]float64, translate.NumRenderings)
		for v := range translate.NumRenderings {
			out[v.String()] = float64(len(cache.Zones(int(v))))
		}
		return out
	}, func() float64 { return float64(cache.ZoneFallback()) }, func() float64 { return float64(cache.ZoneOverflow()) })
	pub := publish.New(cache, instance, log)
	pub.SetCensus(cache)
	pub.SetSpatialOptions(cfg.Spatial)
	maxUpstreams := cfg.MetricsMaxUpstreams
	if maxUpstreams == 0 {
		maxUpstreams = metrics.DefaultMaxUpstreams
	}
	m.Upstreams.SetLimits(!cfg.MetricsNoLocalityGauges, maxUpstreams, log)
	// Clients of upstreams with spec.loadReporting report their load over
	// LRS into loads, which keeps only what its catalog publishes.
	loads := loadreport.NewStore(loadreport.Config{MaxCells: cfg.LoadReportMaxCells, Bucket: cfg.LoadReportBucket})
	pub.SetLoadDemand(loadDemand(loads)) // a Balanced upstream's demand, where its clients report
	m.SetSpatialLoads(loads)
	pub.OnPublish = func(st publish.Stats) {
		if len(st.Changed) > 0 || loads.Catalog().SpatialChanged(st.Snapshot) {
			// the catalog follows every upstream change before clients
			// can report on it; unchanged upstreams keep their entries,
			// and with them the store's cells
			loads.SetCatalog(loadreport.NewCatalog(loads.Catalog(), st.Snapshot, reportsLoad))
		}
		// only queued here, under the publisher's lock; the gauges are set
		// on their own goroutine
		for _, c := range st.Changed {
			m.Upstreams.Queue(c.Old, c.Cur)
		}
		m.SnapshotBuilds.WithLabelValues("published").Inc()
		m.SnapshotDuration.Observe(st.Duration.Seconds())
		m.PublishedRevision.Set(float64(st.Revision))
		for t, n := range st.Changes {
			if n > 0 {
				m.ResourceChanges.WithLabelValues(xdscache.ShortType(xdscache.TypeOrder[t])).Add(float64(n))
			}
		}
	}
	pub.OnReject = func(rev uint64, err error) {
		m.SnapshotBuilds.WithLabelValues("rejected").Inc()
		log.Error("translation refused; the last good snapshot keeps serving", "revision", rev, "error", err)
	}
	clients := server.NewClients(m, log)
	replicaName := cfg.ReplicaName
	if replicaName == "" {
		replicaName = checkerName()
	}
	checks := healthcheck.Config{Name: replicaName, Concurrency: cfg.HealthCheckConcurrency, MaxEndpoints: cfg.HealthCheckMaxEndpoints,
		Observe: m.ObserveActiveCheck}

	// The source fills the directory before anything is served, so the first
	// publication is the whole topology.
	var runSource func() error
	var runChecks func() error   // active health checks, where this replica runs them
	var runOutliers func() error // fleet outlier detection, where this replica decides
	var outlierStatus func(topology.Key) (outlier.Status, bool)
	var warnings func() []string
	var clusters func() any // the remote clusters' states (/debug/clusters)
	switch cfg.Source {
	case "kubernetes":
		routeLibraryLogs(log)
		rc, contextNamespace := cfg.RestConfig, ""
		if rc == nil {
			kc, err := loadKubeClient(cfg.Kubeconfig)
			if err != nil {
				return fmt.Errorf("kubernetes client configuration: %w", err)
			}
			log.Info("kubernetes client configuration", "from", kc.from, "server", kc.config.Host)
			rc, contextNamespace = kc.config, kc.namespace
		}
		replica, err := kubereplica.NewReplica(rc, dir, kubereplica.Options{
			Namespace: cfg.Namespace, LeaderElectionNamespace: cfg.LeaderElectionNamespace, LeaderElectionID: cfg.LeaderElectionID,
			ContextNamespace: contextNamespace,
			LeaseDuration:    cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Debounce: cfg.Debounce, Log: log, Metrics: m,
			Publication: rejectingPublication{pub, clients}, ClientQPS: cfg.KubeQPS, ClientBurst: cfg.KubeBurst, StatusShare: cfg.StatusShare,
			StatusWorkers: cfg.StatusWriters, HealthChecks: checks,
			OutlierPeriod: loads.Window() / loadreport.Buckets, OutlierWindow: loads.Window(),
			ClusterName: cfg.ClusterName, RemoteStaleAfter: cfg.RemoteStaleAfter, NoRemoteClusters: cfg.NoRemoteClusters,
		})
		if err != nil {
			return err
		}
		errc, err := replica.Start(ctx)
		if err != nil {
			return err
		}
		warnings = func() []string { return append(replica.Watch.Warnings(), replica.Remotes.Warnings()...) }
		clusters = func() any { return replica.Remotes.Status() }
		// every replica shares its own clients' load aggregates with the
		// leader, which decides fleet outlier detection for all
		runOutliers = func() error {
			return shareLoads(ctx, dir, loads, replica.Shares, loads.Window()/loadreport.Buckets, log)
		}
		m.InitSource("kubernetes")
		m.SetInvalidObjects(func() map[string]float64 {
			out := map[string]float64{}
			for ref := range replica.Source.Rejections() {
				out[ref.Kind]++
			}
			return out
		})
		runSource = func() error {
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				return <-errc
			}
		}
	default:
		src := &files.Source{Paths: cfg.Paths, Dir: dir, Debounce: cfg.Debounce, MaxDelay: cfg.DebounceMax, Settle: cfg.Settle, Log: log, Metrics: m}
		if _, err := src.Load(); err != nil {
			return fmt.Errorf("initial manifests are invalid; nothing to serve:\n%s", "  "+strings.ReplaceAll(err.Error(), "\n", "\n  "))
		}
		runSource = func() error { return src.Run(ctx) }
		// Alone in files mode, this replica checks every upstream with
		// spec.healthCheck; an idle Checker costs a goroutine and a timer.
		checker := healthcheck.New(checks)
		m.SetActiveCheckEndpoints(checker.States)
		runChecks = func() error { return runHealthChecks(ctx, dir, checker, log) }
		// and decides fleet outlier detection, once a bucket
		detector := newOutliers(dir, loads, m, log)
		outlierStatus = detector.Status
		runOutliers = func() error { return detector.run(ctx, loads.Window()/loadreport.Buckets) }
		m.InitSource("files")
		warnings = func() []string {
			if r := src.Refusal(); r != "" {
				return []string{r}
			}
			return nil
		}
	}

	grpcServer, err := server.New(cache, clients, server.Config{TLS: cfg.TLS, Log: log, MaxStreams: cfg.MaxStreams, MaxStreamsPerConnection: cfg.MaxStreamsPerConnection, DrainPeriod: cfg.DrainPeriod,
		LoadReports: loads})
	if err != nil {
		return err
	}
	xdsLis, err := net.Listen("tcp", cfg.XDSAddress)
	if err != nil {
		return fmt.Errorf("xds listener: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.AdminAddress)
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	sources := admin.Sources{
		Ready: func() (bool, string) {
			if !pub.Published() {
				return false, "no snapshot published yet"
			}
			return true, ""
		},
		Snapshot: dir.Current,
		Clients:  clients.List,
		Metrics:  m,
		Warnings: warnings,
		Demand:   appliedDemand(pub),
		Serving:  clients.Serving,
		Loads:    loads,
		Outliers: outlierStatus,
		Clusters: clusters,
	}
	adminSrv := &http.Server{Handler: admin.Handler(sources), ReadHeaderTimeout: 10 * time.Second}
	var metricsLis net.Listener
	var metricsSrv *http.Server
	if cfg.MetricsAddress != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			xdsLis.Close()
			adminLis.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		metricsSrv = &http.Server{Handler: admin.HealthHandler(sources), ReadHeaderTimeout: 10 * time.Second}
	}

	addrs := Addrs{XDS: xdsLis.Addr().String(), Admin: adminLis.Addr().String(), Instance: instance}
	if metricsLis != nil {
		addrs.Metrics = metricsLis.Addr().String()
	}
	writeBanner(out, cfg, addrs)
	log.Info("serving", "xds", xdsLis.Addr().String(), "admin", adminLis.Addr().String(), "instance", instance)
	if cfg.Started != nil {
		cfg.Started(addrs)
	}

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	// A start decodes and builds the whole topology at once, and what that
	// took is garbage once it is published: handing it back to the system
	// then keeps the resident size near the live heap, not the start's peak.
	firstPublication := pub.Changed()
	go func() {
		select {
		case <-firstPublication:
			debug.FreeOSMemory()
		case <-ctx.Done():
		}
	}()
	run("publisher", func() error { return pub.Run(ctx, dir) })
	run("client classes", func() error { return pub.RunClasses(ctx) })
	run("upstream gauges", func() error { return m.Upstreams.Run(ctx) })
	run("xds server", func() error { return server.Serve(ctx, grpcServer, xdsLis) })
	run("admin server", func() error { return serveHTTP(ctx, adminSrv, adminLis) })
	if metricsSrv != nil {
		run("metrics server", func() error { return serveHTTP(ctx, metricsSrv, metricsLis) })
	}
	run(cfg.Source+" source", runSource)
	if runChecks != nil {
		run("health checks", runChecks)
	}
	if runOutliers != nil {
		run("outlier detection", runOutliers)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	log.Info("stopped")
	return nil
}

// writeBanner says where the control plane listens and what it serves: a
// few aligned lines, or with Config.BannerFormat "json" one JSON record.
func writeBanner(out io.Writer, cfg Config, a Addrs) {
	if cfg.BannerFormat == "json" {
		attrs := []any{"version", cfg.Version, "instance", a.Instance, "xds", a.XDS,
			"transport", strings.Trim(tlsNote(cfg.TLS), " ()"), "admin", a.Admin}
		if a.Metrics != "" {
			attrs = append(attrs, "metrics", a.Metrics)
		}
		if cfg.Source == "kubernetes" {
			attrs = append(attrs, "source", "kubernetes", "namespace", cfg.Namespace)
		} else {
			attrs = append(attrs, "source", "files", "watching", cfg.Paths)
		}
		slog.New(slog.NewJSONHandler(out, nil)).Info("poise control plane", attrs...)
		return
	}
	fmt.Fprintf(out, "poise control plane %s (instance %s)\n", cfg.Version, a.Instance)
	fmt.Fprintf(out, "  xDS (ADS, SotW and Delta): %s%s\n", a.XDS, tlsNote(cfg.TLS))
	fmt.Fprintf(out, "  admin:                     http://%s (/readyz /metrics /debug/explain /debug/clients /map)\n", a.Admin)
	if a.Metrics != "" {
		fmt.Fprintf(out, "  metrics:                   http://%s (/healthz /readyz /metrics)\n", a.Metrics)
	}
	if cfg.Source == "kubernetes" {
		fmt.Fprintf(out, "  source:                    kubernetes (namespace %q)\n", cfg.Namespace)
	} else {
		fmt.Fprintf(out, "  watching:                  %v\n", cfg.Paths)
	}
}

func tlsNote(t *server.TLS) string {
	switch {
	case t == nil:
		return " (plaintext)"
	case t.ClientCAFile != "":
		return " (mTLS)"
	}
	return " (TLS)"
}

// serveHTTP serves srv on lis until ctx is done, then shuts it down (bounded).
func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener) error {
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 2*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	return srv.Serve(lis)
}
