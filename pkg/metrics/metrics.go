package metrics

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"poise.dev/poise/pkg/topology"
)

// The label values known before anything happens. Every series of these is
// created at 0 when the metrics are, so a rate() or an absent() alert sees
// a series from the first scrape, not only after the first event.
var (
	// Types are the xDS types, as xdscache.ShortType names them.
	Types = []string{"CDS", "EDS", "LDS", "RDS"}
	// ClientKinds are the kinds of xDS client (server.ClientKind).
	ClientKinds = []string{"envoy", "grpc", "unknown"}
	// BuildResults are the results of a snapshot build.
	BuildResults = []string{"published", "rejected"}
	// SourceResults are the results of a source's batch.
	SourceResults = []string{"applied", "rejected"}
	// Kinds are the kinds of object a source reads.
	Kinds = []string{topology.KindUpstream, topology.KindLocality, topology.KindEndpointSet,
		topology.KindSpatialDomain, topology.KindPartition}
	// ActiveCheckStates are the states of poise_active_check_endpoints.
	ActiveCheckStates = []string{"healthy", "unhealthy", "unknown", "unchecked"}
	// StatusErrorReasons are the reasons of a failed status write.
	StatusErrorReasons = []string{"conflict", "timeout", "throttled", "invalid", "error"}
)

// Metrics is every metric the control plane exports.
type Metrics struct {
	Registry *prometheus.Registry
	// extra are other registries served on the same /metrics (Gatherer).
	extra []prometheus.Gatherer

	BuildInfo *prometheus.GaugeVec // version, goversion, revision: always 1

	Revision          prometheus.Gauge
	PublishedRevision prometheus.Gauge
	SnapshotBuilds    *prometheus.CounterVec // result: published | rejected
	SnapshotDuration  prometheus.Histogram
	ResourceChanges   *prometheus.CounterVec // type: CDS | EDS | LDS | RDS
	Pushes            *prometheus.CounterVec // type
	NACKs             *prometheus.CounterVec // type
	ConnectedClients  *prometheus.GaugeVec   // kind: envoy | grpc | unknown
	// type: from a version's publication (or the client's request, when
	// later) to a client's ACK of it or of a later version
	Convergence    *prometheus.HistogramVec
	PushDuration   *prometheus.HistogramVec // type: from a stream's wake-up to its response handed to gRPC
	SendDuration   *prometheus.HistogramVec // type: handing one response to gRPC
	SourceBatches  *prometheus.CounterVec   // source, result: applied | rejected
	SourceRefusing *prometheus.GaugeVec     // source: 1 while its latest change is refused or held back
	// kind: seconds the Kubernetes source's watch of it has been broken (see SetKubeStale)
	KubeStale *funcGaugeVec
	// cluster, state: 1 for each remote cluster's current state (see SetRemoteClusters)
	RemoteClusterState *funcGaugePairs
	// cluster: seconds since a remote cluster last answered synced
	RemoteClusterLastSync *funcGaugeVec
	// kind: objects the source sets aside as invalid (see SetInvalidObjects)
	InvalidObjects *funcGaugeVec
	// Client-locality classes, read from the cache at each scrape (see SetClientClasses).
	ClientClasses                  *funcGaugeVec // rendering: classes with open streams
	ClassFallbacks, ClassOverflows *funcGaugeVec // no labels: streams in a region class, in none

	// The Kubernetes status writer (leader only).
	StatusWrites       *prometheus.CounterVec // kind
	StatusWriteErrors  *prometheus.CounterVec // kind, reason: conflict | timeout | throttled | invalid | error
	StatusUnchanged    *prometheus.CounterVec // kind
	StatusQueueDepth   prometheus.Gauge
	StatusQueueAdds    prometheus.Counter
	StatusQueueLatency prometheus.Histogram
	StatusWorkDuration prometheus.Histogram
	StatusRetries      prometheus.Counter
	// Active health checks (spec.healthCheck), where this replica runs them.
	ActiveChecks         *prometheus.CounterVec // result: pass | fail
	ActiveCheckLag       prometheus.Histogram
	ActiveCheckEndpoints *funcGaugeVec // state: healthy | unhealthy | unknown | unchecked
	// Fleet outlier detection, per upstream with spec.outlierDetection
	// (upstream: NAMESPACE/NAME; the series go with the detection, see
	// ForgetOutlier).
	OutlierEjections   *prometheus.CounterVec // upstream: ejections decided
	OutlierEjected     *prometheus.GaugeVec   // upstream: endpoints ejected now
	UntrustedReporters *prometheus.GaugeVec   // upstream: reporters left out of the last window
	// Upstreams are the per-upstream gauges of the computed figures.
	Upstreams *Upstreams
	Leader    prometheus.Gauge // 1 while this replica holds the status-writer Lease
	// Spatial is the spatial cross-region metric, from the load reports (see SetSpatialLoads).
	Spatial *Spatial
}

// New registers every metric on a new registry, with the Go and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_build_info", Help: "Always 1; its labels say which build of the control plane runs.",
		}, []string{"version", "goversion", "revision"}),
		Revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_topology_revision", Help: "Revision of the current topology snapshot.",
		}),
		PublishedRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_xds_published_revision", Help: "Topology revision last published over xDS.",
		}),
		SnapshotBuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_snapshot_builds_total", Help: "xDS publications built from topology snapshots, by result.",
		}, []string{"result"}),
		SnapshotDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_xds_snapshot_build_duration_seconds", Help: "Time to translate and publish one topology snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		ResourceChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_resource_changes_total", Help: "Resources put or deleted by publications, by xDS type.",
		}, []string{"type"}),
		Pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_pushes_total", Help: "Discovery responses sent to clients, by xDS type.",
		}, []string{"type"}),
		NACKs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_nacks_total", Help: "Discovery requests that rejected a response (NACK), by xDS type.",
		}, []string{"type"}),
		ConnectedClients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_xds_connected_clients", Help: "Open xDS streams, by client kind.",
		}, []string{"kind"}),
		Convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "poise_xds_convergence_seconds", Help: "Time from the publication of a version of an xDS type (or the client's request for it, when later) to a client's ACK of that version or a later one; observed once per client and version, by xDS type.",
			Buckets: convergenceBuckets,
		}, []string{"type"}),
		PushDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "poise_xds_push_duration_seconds", Help: "Time from a stream being woken by a change to its response of a type handed to gRPC (building the stream's responses, and sending those of earlier types), by xDS type.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}, []string{"type"}),
		SendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "poise_xds_send_duration_seconds", Help: "Time to hand one response to gRPC (waiting for the large-response budget and the stream's flow control), by xDS type.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}, []string{"type"}),
		SourceBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_source_batches_total", Help: "Topology batches from a source, by result (applied or rejected).",
		}, []string{"source", "result"}),
		SourceRefusing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_source_refusing", Help: "1 while a source's latest change is refused (a file that cannot be read, an invalid object) or held back (a file emptied or cut short, until --settle) and the last good topology serves.",
		}, []string{"source"}),
		KubeStale: &funcGaugeVec{desc: prometheus.NewDesc("poise_kube_source_stale_seconds",
			"Seconds the Kubernetes source's list and watch of a kind have not reached the apiserver (0 while they do); meanwhile the topology last seen keeps serving.",
			[]string{"kind"}, nil)},
		RemoteClusterState: &funcGaugePairs{desc: prometheus.NewDesc("poise_remote_cluster_state",
			"1 for each remote cluster's current sync state (Pending, Synced, Unreachable, Stale, Error), 0 for the others.",
			[]string{"cluster", "state"}, nil)},
		RemoteClusterLastSync: &funcGaugeVec{desc: prometheus.NewDesc("poise_remote_cluster_last_sync_seconds",
			"Seconds since a remote cluster last answered with its cache synced (-1 while it never has).",
			[]string{"cluster"}, nil)},
		InvalidObjects: &funcGaugeVec{desc: prometheus.NewDesc("poise_source_invalid_objects",
			"Objects the source sets aside because they are invalid (each has a status condition saying why; the rest of the topology serves), by kind. The files source refuses a whole change instead (poise_source_refusing), so it reports 0.",
			[]string{"kind"}, nil), zero: Kinds},
		ClientClasses: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_classes",
			"Client-locality classes (region/zone, or region) with open streams, by rendering; bounded by --max-client-classes.",
			[]string{"rendering"}, nil)},
		ClassFallbacks: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_class_fallback_streams",
			"Open streams sent their region's class because their zone's class was over --max-client-classes.", nil, nil), zero: []string{""}, bare: true},
		ClassOverflows: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_class_overflow_streams",
			"Open streams sent the resources of clients with no locality because their zone's and their region's classes were both over --max-client-classes.", nil, nil), zero: []string{""}, bare: true},
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_writes_total", Help: "Status subresource patches the status writer issued and the apiserver accepted, by kind.",
		}, []string{"kind"}),
		StatusWriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_write_errors_total", Help: "Status writes that failed and are retried with backoff, by kind and reason (conflict, timeout, throttled, invalid, error).",
		}, []string{"kind", "reason"}),
		StatusUnchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_unchanged_total", Help: "Objects the status writer checked and left alone because their status was already right, by kind.",
		}, []string{"kind"}),
		StatusQueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_status_queue_depth", Help: "Objects waiting in the status writer's work queue.",
		}),
		StatusQueueAdds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poise_status_queue_adds_total", Help: "Objects queued for the status writer (an object queued twice before it is processed counts twice and is processed once).",
		}),
		StatusQueueLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_status_queue_wait_seconds", Help: "Time an object waits in the status writer's queue before it is processed.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11),
		}),
		StatusWorkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_status_work_duration_seconds", Help: "Time to process one object: compute, wait for the write budget, write.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		StatusRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poise_status_retries_total", Help: "Objects re-queued with backoff after a failed status write.",
		}),
		ActiveChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_active_checks_total", Help: "Active health checks (spec.healthCheck) this replica ran, by result (pass or fail).",
		}, []string{"result"}),
		ActiveCheckLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_active_check_lag_seconds", Help: "How late after its due time an active health check started; a growing lag says --health-check-concurrency is too small for the checks configured.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		ActiveCheckEndpoints: &funcGaugeVec{desc: prometheus.NewDesc("poise_active_check_endpoints",
			"Endpoints this replica actively checks, by verdict (healthy, unhealthy, unknown), and those past --health-check-max-endpoints or the 5,000 per upstream (unchecked). 0 on a replica that does not check (a Kubernetes follower).",
			[]string{"state"}, nil), zero: ActiveCheckStates},
		OutlierEjections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_outlier_ejections_total", Help: "Endpoints ejected by fleet outlier detection (spec.outlierDetection), by upstream.",
		}, []string{"upstream"}),
		OutlierEjected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_outlier_ejected_endpoints", Help: "Endpoints ejected now by fleet outlier detection, by upstream.",
		}, []string{"upstream"}),
		UntrustedReporters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_loadreport_untrusted_reporters", Help: "Load reporters left out of the last outlier evaluation of an upstream's window because they failed on more than half of the endpoints they reported on, by upstream.",
		}, []string{"upstream"}),
		Upstreams: newUpstreams(),
		Spatial:   newSpatial(),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_status_leader", Help: "1 while this replica holds the status-writer Lease and writes status; 0 otherwise (and always with the files source).",
		}),
	}
	r.MustRegister(m.BuildInfo, m.Convergence, m.PushDuration, m.SendDuration, m.Leader, m.Revision, m.PublishedRevision, m.SnapshotBuilds, m.SnapshotDuration, m.ResourceChanges,
		m.Pushes, m.NACKs, m.ConnectedClients, m.SourceBatches, m.SourceRefusing, m.KubeStale, m.InvalidObjects,
		m.RemoteClusterState, m.RemoteClusterLastSync,
		m.ClientClasses, m.ClassFallbacks, m.ClassOverflows,
		m.StatusWrites, m.StatusWriteErrors, m.StatusUnchanged, m.StatusQueueDepth, m.StatusQueueAdds, m.StatusQueueLatency,
		m.StatusWorkDuration, m.StatusRetries, m.ActiveChecks, m.ActiveCheckLag, m.ActiveCheckEndpoints, m.Spatial,
		m.OutlierEjections, m.OutlierEjected, m.UntrustedReporters,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.MustRegister(m.Upstreams.collectors()...)
	for _, t := range Types {
		m.ResourceChanges.WithLabelValues(t)
		m.Pushes.WithLabelValues(t)
		m.NACKs.WithLabelValues(t)
		m.Convergence.WithLabelValues(t)
		m.PushDuration.WithLabelValues(t)
		m.SendDuration.WithLabelValues(t)
	}
	for _, k := range ClientKinds {
		m.ConnectedClients.WithLabelValues(k)
	}
	for _, r := range BuildResults {
		m.SnapshotBuilds.WithLabelValues(r)
	}
	m.ActiveChecks.WithLabelValues("pass")
	m.ActiveChecks.WithLabelValues("fail")
	m.SetBuildInfo("")
	return m
}

// convergenceBuckets span a change reaching a client at once (a
// millisecond) to one that takes minutes: an alert on the slow end needs
// buckets there.
var convergenceBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// InitSource creates the series of one source (its name as the source
// label) at 0: only the configured source has them.
func (m *Metrics) InitSource(name string) {
	for _, r := range SourceResults {
		m.SourceBatches.WithLabelValues(name, r)
	}
	m.SourceRefusing.WithLabelValues(name)
}

// InitOutlier creates an upstream's outlier detection series at 0.
func (m *Metrics) InitOutlier(upstream string) {
	m.OutlierEjections.WithLabelValues(upstream)
	m.OutlierEjected.WithLabelValues(upstream)
	m.UntrustedReporters.WithLabelValues(upstream)
}

// ForgetOutlier deletes an upstream's outlier detection series, when its
// detection (or the upstream) goes: the series are bounded by the upstreams
// with spec.outlierDetection.
func (m *Metrics) ForgetOutlier(upstream string) {
	m.OutlierEjections.DeleteLabelValues(upstream)
	m.OutlierEjected.DeleteLabelValues(upstream)
	m.UntrustedReporters.DeleteLabelValues(upstream)
}

// InitStatus creates the status writer's series at 0, for the Kubernetes
// source (the files source writes no status).
func (m *Metrics) InitStatus() {
	for _, k := range Kinds {
		m.StatusWrites.WithLabelValues(k)
		m.StatusUnchanged.WithLabelValues(k)
		for _, r := range StatusErrorReasons {
			m.StatusWriteErrors.WithLabelValues(k, r)
		}
	}
}

// SetBuildInfo sets poise_build_info: version is the one the binary was
// given (empty: the main module's, from the build information), revision
// the VCS revision the build recorded ("-dirty" when modified), else "unknown".
func (m *Metrics) SetBuildInfo(version string) {
	revision, modified := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified && revision != "unknown" {
		revision += "-dirty"
	}
	if version == "" {
		version = "unknown"
	}
	m.BuildInfo.Reset()
	m.BuildInfo.WithLabelValues(version, runtime.Version(), revision).Set(1)
}

// Include serves g's metrics on /metrics beside the control plane's own
// (another library's registry, such as controller-runtime's). Call it
// before /metrics is served.
func (m *Metrics) Include(g prometheus.Gatherer) { m.extra = append(m.extra, g) }

// Gatherer is what /metrics serves: the registry and what Include added.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	if len(m.extra) == 0 {
		return m.Registry
	}
	return append(prometheus.Gatherers{m.Registry}, m.extra...)
}

// Without gathers g but for the metric families whose names begin with one
// of prefixes: a library registry that has its own Go and process
// collectors would otherwise repeat ours, and repeated series fail the
// whole scrape.
func Without(g prometheus.Gatherer, prefixes ...string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if !hasPrefix(mf.GetName(), prefixes) {
				out = append(out, mf)
			}
		}
		return out, err
	})
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// SetKubeStale makes poise_kube_source_stale_seconds report what f returns
// at each scrape: seconds by kind.
func (m *Metrics) SetKubeStale(f func() map[string]float64) { m.KubeStale.f.Store(&f) }

// SetRemoteClusters makes poise_remote_cluster_state and
// poise_remote_cluster_last_sync_seconds report what state and lastSync
// return at each scrape.
func (m *Metrics) SetRemoteClusters(state func() map[[2]string]float64, lastSync func() map[string]float64) {
	m.RemoteClusterState.f.Store(&state)
	m.RemoteClusterLastSync.f.Store(&lastSync)
}

// SetInvalidObjects makes poise_source_invalid_objects report what f
// returns at each scrape: objects set aside by kind (kinds it leaves out are 0).
func (m *Metrics) SetInvalidObjects(f func() map[string]float64) { m.InvalidObjects.f.Store(&f) }

// SetClientClasses makes the client-class gauges read the cache at each
// scrape: classes by rendering, and the streams in a region's class or in
// none because the classes were over their bound.
func (m *Metrics) SetClientClasses(classes func() map[string]float64, fallback, overflow func() float64) {
	m.ClientClasses.f.Store(&classes)
	fb := func() map[string]float64 { return map[string]float64{"": fallback()} }
	of := func() map[string]float64 { return map[string]float64{"": overflow()} }
	m.ClassFallbacks.f.Store(&fb)
	m.ClassOverflows.f.Store(&of)
}

// ObserveActiveCheck counts one active check and how late it started.
func (m *Metrics) ObserveActiveCheck(passed bool, late time.Duration) {
	r := "fail"
	if passed {
		r = "pass"
	}
	m.ActiveChecks.WithLabelValues(r).Inc()
	m.ActiveCheckLag.Observe(late.Seconds())
}

// SetActiveCheckEndpoints makes poise_active_check_endpoints read f at each
// scrape (nil: every state 0, as on a replica that does not check).
func (m *Metrics) SetActiveCheckEndpoints(f func() map[string]float64) {
	if f == nil {
		m.ActiveCheckEndpoints.f.Store(nil)
		return
	}
	m.ActiveCheckEndpoints.f.Store(&f)
}

// funcGaugeVec is a gauge per label value, read from a function at each
// scrape: a staleness grows between events, which a set gauge would not,
// and a count the owner already keeps needs no second copy kept in step.
type funcGaugeVec struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() map[string]float64]
	// zero are the label values reported as 0 when f does not name them
	// (or is not set), so their series exist from the start.
	zero []string
	// bare: the gauge has no label; f reports it under "".
	bare bool
}

func (g *funcGaugeVec) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *funcGaugeVec) Collect(ch chan<- prometheus.Metric) {
	var values map[string]float64
	if f := g.f.Load(); f != nil {
		values = (*f)()
	}
	for _, label := range g.zero {
		if _, ok := values[label]; !ok {
			ch <- g.metric(0, label)
		}
	}
	for label, v := range values {
		ch <- g.metric(v, label)
	}
}

func (g *funcGaugeVec) metric(v float64, label string) prometheus.Metric {
	if g.bare {
		return prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
	return prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, label)
}

// funcGaugePairs is a gauge of two labels whose values a function reports at each scrape.
type funcGaugePairs struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() map[[2]string]float64]
}

func (g *funcGaugePairs) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *funcGaugePairs) Collect(ch chan<- prometheus.Metric) {
	if f := g.f.Load(); f != nil {
		for l, v := range (*f)() {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, l[0], l[1])
		}
	}
}
