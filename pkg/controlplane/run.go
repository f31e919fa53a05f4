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
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/metrics/upstreamgauges"
	"poise.dev/poise/pkg/planelog"
	"poise.dev/poise/pkg/signals/demand"
	"poise.dev/poise/pkg/signals/healthcheck"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// Addrs are where a running control plane listens.
type Addrs struct {
	XDS, Admin, Instance string
	Metrics              string // empty without Config.MetricsAddress
}

// Run runs the control plane until ctx is done: the source fills the
// topology, the publisher publishes it, the xDS and admin servers serve it.
// A zero field of cfg is its default (see Config); Run does not Validate.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	export, problems := DefaultExport(cfg.DefaultExportTo)
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	p := newParts(cfg, export, log)
	// Stopping begins when ctx ends or the first task fails (so does a
	// failure before the tasks start): the xDS server then drains its
	// streams over the drain period, and the Kubernetes replica hands the
	// Lease on at once. What follows the cluster or the files (the source,
	// the publisher, the admin port) goes on until the xDS server has
	// stopped, so a client still connected to a stopping replica receives
	// every change until its stream ends.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, stopping := errgroup.WithContext(ctx)
	ctx, stopFollowing := context.WithCancel(context.WithoutCancel(stopping))
	defer stopFollowing()
	// Readiness reads stopping itself: it turns with the cancellation, in
	// the goroutine that cancels (the signal's), before the xDS server is
	// even told to stop, so a load balancer in front stops sending new
	// clients while the streams drain.
	p.stopping = stopping

	// The source fills the directory before anything is served, so the first
	// publication is the whole topology.
	var md mode
	var err error
	switch cfg.Source {
	case "kubernetes":
		md, err = buildKube(ctx, stopping, cfg, p)
	default:
		md, err = buildFiles(cfg, p)
	}
	if err != nil {
		return err
	}
	td, err := cfg.clientTrustDomain()
	if err != nil {
		return err
	}
	srv, err := listen(cfg, td, p, md)
	if err != nil {
		return err
	}
	addrs := srv.addrs(p.instance)
	writeBanner(out, cfg, td, addrs)
	log.Info("serving", "xds", addrs.XDS, "admin", addrs.Admin, "instance", p.instance)
	if cfg.anonymous() && !identity.IsLoopback(cfg.XDSAddress) {
		log.Warn("serving xDS without authentication on an address that is not loopback: any process that reaches it can read every upstream and steer the fleet",
			"xds", addrs.XDS, "flag", "--xds-allow-anonymous-non-loopback")
	}
	if cfg.anonymous() && cfg.clientCA() {
		log.Warn("client certificates are verified and then not used: every xDS client is anonymous, and one certificate may claim any demand weight and report load as many clients",
			"flags", "--xds-auth=none --tls-client-ca")
	}
	if td.from == trustDomainAny {
		log.Warn("mTLS accepts a client certificate of any SPIFFE trust domain the client CA signs, and reads its namespace as this cluster's: set --xds-trust-domain, or serve a certificate with a SPIFFE ID of the trust domain",
			"flag", "--xds-trust-domain", "certificate", cfg.TLS.CertFile)
	}
	if !identity.IsLoopback(cfg.AdminAddress) {
		log.Warn("serving the admin port on an address that is not loopback: it has no authentication, and /debug shows every namespace's topology and every connected client",
			"admin", addrs.Admin, "flag", "--admin-address")
	}
	if cfg.authenticates(AuthToken) && cfg.TLS == nil {
		log.Warn("token authentication on a plaintext xDS port: Envoy's and grpc-go's clients send call credentials only over TLS, so their streams will be refused as no-credentials",
			"xds", addrs.XDS, "flags", "--tls-cert --tls-key")
	}
	if cfg.Started != nil {
		cfg.Started(addrs)
	}

	freeAfterFirstPublication(ctx, p.pub)
	g.Go(func() error {
		defer stopFollowing()
		return srv.xdsTask().in(stopping)()
	})
	for _, t := range slices.Concat(p.tasks(), srv.tasks(), md.tasks) {
		g.Go(t.in(ctx))
	}
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// task is one of the goroutines Run waits for, named in the error that
// ends it.
type task struct {
	name string
	run  func(context.Context) error
}

// in is t run on ctx for an errgroup: an HTTP server's closing is no
// failure.
func (t task) in(ctx context.Context) func() error {
	return func() error {
		if err := t.run(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		return nil
	}
}

// mode is what a source (files or Kubernetes) adds to the parts both modes
// share: the tasks it runs, the source first, and what the admin port
// shows of it (the fields of admin.Sources that depend on the mode).
type mode struct {
	tasks []task
	admin admin.Sources
	// rest is the Kubernetes client configuration of the mode (nil in
	// files mode), which token authentication reviews tokens with.
	rest *rest.Config
}

// parts are what both modes share: the Directory the source fills, the
// publisher and cache that carry it to clients, the clients' load
// reports, the metrics, and the active checks' configuration.
type parts struct {
	log      *slog.Logger
	m        *metrics.Metrics
	gauges   *upstreamgauges.Gauges // the per-upstream gauges, following the publications
	plane    *planelog.Log          // what each publication changed, in the log
	dir      *topology.Directory
	instance string
	cache    *xdscache.Cache
	pub      *publish.Publisher
	demand   *demand.Signal // the clients' classes and demand, into the Directory
	loads    *loadreport.Store
	clients  *server.Clients
	checks   healthcheck.Config
	gens     *generationClock // when each endpoint generation was first published
	// stopping ends when the plane begins to stop (Run's errgroup context:
	// its parent's cancellation, the signal's, reaches it synchronously);
	// /readyz answers 503 from that moment. nil before Run sets it.
	stopping context.Context
}

func newParts(cfg Config, export topology.Export, log *slog.Logger) *parts {
	m := metrics.New(metricsOptions(cfg))
	// controller-runtime's registry holds client-go's REST client metrics
	// (requests by code, latency, rate-limiter wait, retries), its work
	// queues' and the leader election's; /metrics serves it beside ours,
	// less its own Go and process collectors, which would repeat ours.
	ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency, ctrlmetrics.MetricRateLimiterLatency,
		ctrlmetrics.MetricRequestRetry)
	m.Include(metrics.Without(ctrlmetrics.Registry, "go_", "process_"))
	p := &parts{log: log, m: m, dir: topology.NewDirectory(), instance: publish.NewInstanceID(), gens: newGenerationClock(time.Now)}

	maxClasses := cfg.MaxClientClasses
	if maxClasses == 0 {
		maxClasses = xdscache.DefaultMaxZones
	}
	p.cache = xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) },
		xdscache.WithMaxZones(maxClasses))
	m.Backlog.Set(func() float64 { return float64(p.cache.Waiting()) })
	m.Classes.Set(func() map[string]float64 {
		out := make(map[string]float64, translate.NumRenderings)
		for v := range translate.NumRenderings {
			out[v.String()] = float64(len(p.cache.Zones(int(v))))
		}
		return out
	}, func() float64 { return float64(p.cache.ZoneFallback()) }, func() float64 { return float64(p.cache.ZoneOverflow()) })
	p.pub = publish.New(p.cache, p.instance, log)
	p.pub.SetSpatialOptions(cfg.Spatial)
	p.pub.SetDefaultExport(export)
	maxUpstreams := cfg.MetricsMaxUpstreams
	if maxUpstreams == 0 {
		maxUpstreams = upstreamgauges.DefaultMaxUpstreams
	}
	p.gauges = upstreamgauges.New(upstreamgauges.Options{Localities: !cfg.MetricsNoLocalityGauges, MaxUpstreams: maxUpstreams, Log: log})
	p.plane = planelog.New(planelog.Options{Log: log, Period: cfg.LogPeriod})
	// Clients of upstreams with spec.loadReporting report their load over
	// LRS into loads, which keeps only what its catalog publishes.
	p.loads = loadreport.NewStore(loadreport.Config{MaxCells: cfg.LoadReportMaxCells, Bucket: cfg.LoadReportBucket,
		MaxRequests: uint64(max(cfg.LoadReportMaxRequests, 0)), Log: log})
	m.Outliers.SetCappedRequests(func() uint64 { return p.loads.Drops().Capped })
	// The connected clients' classes and a Balanced upstream's demand (their
	// demand weights, or the requests their load reports show) enter the
	// Directory as a signal, like a check's verdicts.
	p.demand = demand.New(p.dir, demand.Config{Census: census{p.cache}, Views: int(translate.NumRenderings), Log: log,
		Loads: demand.LoadReports{Requests: p.loads.ClassRequests, Bucket: p.loads.Window() / loadreport.Buckets, Window: p.loads.Window()}})
	m.Registry.MustRegister(p.gauges, loadreport.NewSpatialMetrics(p.loads))
	p.observePublications()
	p.clients = server.NewClients(m.XDS, log)
	replicaName := cfg.ReplicaName
	if replicaName == "" {
		replicaName = checkerName()
	}
	p.checks = healthcheck.Config{Name: replicaName, Concurrency: cfg.HealthCheckConcurrency, MaxEndpoints: cfg.HealthCheckMaxEndpoints,
		Observe: m.Checks.Observe}
	return p
}

// metricsOptions are what the metrics are made with: the label values of
// the xDS types and of the object kinds, and the source configured, whose
// series exist at 0 (the Kubernetes source's status writer's with them).
func metricsOptions(cfg Config) metrics.Options {
	kube := cfg.Source == "kubernetes"
	source := "files"
	if kube {
		source = "kubernetes"
	}
	return metrics.Options{Version: cfg.Version, Types: xdstype.Shorts(), RefusalReasons: refusalReasons(), Source: source, WritesStatus: kube,
		Kinds: []string{topology.KindUpstream, topology.KindLocality, topology.KindEndpointSet, topology.KindSpatialDomain, topology.KindPartition}}
}

// observePublications keeps the load-report catalog and the publication
// metrics following what the publisher publishes or refuses.
func (p *parts) observePublications() {
	m, loads, gauges, plane, gens := p.m.Publication, p.loads, p.gauges, p.plane, p.gens
	p.pub.BeforeApply = func(st publish.Stats) {
		if len(st.Changed) > 0 || loads.Catalog().SpatialChanged(st.Snapshot) {
			// the catalog follows every upstream change before clients
			// can report on it (a client that is sent a cluster may open
			// LRS at once and name it); unchanged upstreams keep their
			// entries, and with them the store's cells
			loads.SetCatalog(loadreport.NewCatalog(loads.Catalog(), st.Snapshot, reportsLoad))
		}
	}
	p.pub.OnPublish = func(st publish.Stats) {
		// only queued here, under the publisher's lock; the gauges are set
		// on their own goroutine
		for _, c := range st.Changed {
			gauges.Queue(c.Old, c.Cur)
			gens.Published(c.Old, c.Cur)
		}
		plane.Queue(st.Revision, func(yield func(old, cur *topology.UpstreamState) bool) {
			for _, c := range st.Changed {
				if !yield(c.Old, c.Cur) {
					return
				}
			}
		})
		m.Builds.WithLabelValues("published").Inc()
		m.BuildDuration.Observe(st.Duration.Seconds())
		m.PublishedRevision.Set(float64(st.Revision))
		for t, n := range st.Changes {
			if n > 0 {
				m.ResourceChanges.WithLabelValues(xdstype.At(t).Short).Add(float64(n))
			}
		}
	}
	p.pub.OnReject = func(rev uint64, err error) {
		m.Builds.WithLabelValues("rejected").Inc()
		p.log.Error("translation refused; the last good snapshot keeps serving", "revision", rev, "error", err)
	}
}

// census is the xDS cache's census as the demand signal reads it: the
// demand for a cluster is the demand for its endpoints.
type census struct{ *xdscache.Cache }

func (c census) Demand(cluster string) map[string]uint64 {
	return c.Cache.Demand(resource.EndpointType, cluster)
}

// reportsLoad says which upstreams' clients report load: those with
// spec.loadReporting.
func reportsLoad(u *topology.UpstreamState) bool { return u.Upstream.LoadReportInterval > 0 }

// outlierPeriod is how often fleet outlier detection evaluates: once a
// bucket of the load-report window.
func (p *parts) outlierPeriod() time.Duration { return p.loads.Window() / loadreport.Buckets }

func (p *parts) tasks() []task {
	return []task{
		{"publisher", func(ctx context.Context) error { return p.pub.Run(ctx, p.dir) }},
		{"client demand", p.demand.Run},
		{"upstream gauges", p.gauges.Run},
		{"plane log", p.plane.Run},
	}
}

// freeAfterFirstPublication hands the memory of the start back to the
// system once the first snapshot is published: a start decodes and builds
// the whole topology at once, and what that took is garbage then, so the
// resident size stays near the live heap, not the start's peak.
func freeAfterFirstPublication(ctx context.Context, pub *publish.Publisher) {
	firstPublication := pub.Changed()
	go func() {
		select {
		case <-firstPublication:
			debug.FreeOSMemory()
		case <-ctx.Done():
		}
	}()
}

// servers are the xDS server and the HTTP ports, listening.
type servers struct {
	xds                          *server.Server
	xdsLis, adminLis, metricsLis net.Listener
	admin, metrics               *http.Server // metrics: nil without Config.MetricsAddress
}

// listen builds the xDS server and opens the xDS, admin and (when set)
// metrics listeners, closing those it opened if a later one fails.
func listen(cfg Config, td trustDomain, p *parts, md mode) (*servers, error) {
	if err := cfg.checkAnonymous(); err != nil {
		return nil, err
	}
	authn, err := newAuthenticator(cfg, td, md.rest, p)
	if err != nil {
		return nil, err
	}
	grpcServer, err := server.New(p.cache, p.clients, server.Config{TLS: cfg.TLS, Log: p.log, MaxStreams: cfg.MaxStreams, MaxStreamsPerConnection: cfg.MaxStreamsPerConnection, MaxStreamsPerInstance: cfg.MaxStreamsPerInstance, DrainPeriod: cfg.DrainPeriod,
		LoadReports: p.loads, Authenticator: authn, Audience: cfg.Audience, DemandGrant: cfg.demandGrant()})
	if err != nil {
		return nil, err
	}
	s := &servers{xds: grpcServer}
	if s.xdsLis, err = net.Listen("tcp", cfg.XDSAddress); err != nil {
		return nil, fmt.Errorf("xds listener: %w", err)
	}
	if s.adminLis, err = net.Listen("tcp", cfg.AdminAddress); err != nil {
		s.xdsLis.Close()
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	sources := p.adminSources(md)
	sources.Version, sources.Instance = cfg.Version, p.instance
	s.admin = &http.Server{Handler: admin.Handler(sources), ReadHeaderTimeout: 10 * time.Second}
	if cfg.MetricsAddress != "" {
		if s.metricsLis, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			s.xdsLis.Close()
			s.adminLis.Close()
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		s.metrics = &http.Server{Handler: admin.HealthHandler(sources), ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// adminSources is what the admin port shows: the shared parts', and the
// mode's.
func (p *parts) adminSources(md mode) admin.Sources {
	s := md.admin
	s.Ready = func() (bool, string) {
		if p.stopping != nil && p.stopping.Err() != nil {
			return false, "stopping: new xDS streams are refused and the open ones drain"
		}
		if !p.pub.Published() {
			return false, "no snapshot published yet"
		}
		return true, ""
	}
	s.Snapshot = p.dir.Current
	s.Clients = p.clients.List
	s.Metrics = p.m.Gatherer()
	s.Serving = p.clients.Serving
	s.Loads = p.loads
	s.GenerationSince = p.gens.Since
	return s
}

func (s *servers) addrs(instance string) Addrs {
	a := Addrs{XDS: s.xdsLis.Addr().String(), Admin: s.adminLis.Addr().String(), Instance: instance}
	if s.metricsLis != nil {
		a.Metrics = s.metricsLis.Addr().String()
	}
	return a
}

// xdsTask serves xDS until its context ends, then drains the streams.
func (s *servers) xdsTask() task {
	return task{"xds server", func(ctx context.Context) error { return server.Serve(ctx, s.xds, s.xdsLis) }}
}

// tasks are the HTTP servers, which answer until the xDS server has drained.
func (s *servers) tasks() []task {
	t := []task{
		{"admin server", func(ctx context.Context) error { return serveHTTP(ctx, s.admin, s.adminLis) }},
	}
	if s.metrics != nil {
		t = append(t, task{"metrics server", func(ctx context.Context) error { return serveHTTP(ctx, s.metrics, s.metricsLis) }})
	}
	return t
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
