package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is every metric the control plane exports.
type Metrics struct {
	Registry *prometheus.Registry

	Revision          prometheus.Gauge
	PublishedRevision prometheus.Gauge
	SnapshotBuilds    *prometheus.CounterVec // result: published | rejected
	SnapshotDuration  prometheus.Histogram
	ResourceChanges   *prometheus.CounterVec // type: CDS | EDS | LDS | RDS
	Pushes            *prometheus.CounterVec // type
	NACKs             *prometheus.CounterVec // type
	ConnectedClients  *prometheus.GaugeVec   // kind: envoy | grpc | unknown
	SourceBatches     *prometheus.CounterVec // source, result: applied | rejected
	SourceRefusing    *prometheus.GaugeVec   // source: 1 while its latest change is refused or held back
	// kind: seconds the Kubernetes source's watch of it has been broken (see SetKubeStale)
	KubeStale *funcGaugeVec

	// The Kubernetes status writer (leader only).
	StatusWrites       *prometheus.CounterVec // kind
	StatusWriteErrors  *prometheus.CounterVec // kind, reason: conflict | timeout | throttled | invalid | error
	StatusUnchanged    *prometheus.CounterVec // kind
	StatusQueueDepth   prometheus.Gauge
	StatusQueueAdds    prometheus.Counter
	StatusQueueLatency prometheus.Histogram
	StatusWorkDuration prometheus.Histogram
	StatusRetries      prometheus.Counter
}

// New registers every metric on a new registry, with the Go and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
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
		SourceBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_source_batches_total", Help: "Topology batches from a source, by result (applied or rejected).",
		}, []string{"source", "result"}),
		SourceRefusing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_source_refusing", Help: "1 while a source's latest change is refused (a file that cannot be read, an invalid object) or held back (a file emptied or cut short, until --settle) and the last good topology serves.",
		}, []string{"source"}),
		KubeStale: &funcGaugeVec{desc: prometheus.NewDesc("poise_kube_source_stale_seconds",
			"Seconds the Kubernetes source's list and watch of a kind have not reached the apiserver (0 while they do); meanwhile the topology last seen keeps serving.",
			[]string{"kind"}, nil)},
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
	}
	r.MustRegister(m.Revision, m.PublishedRevision, m.SnapshotBuilds, m.SnapshotDuration, m.ResourceChanges,
		m.Pushes, m.NACKs, m.ConnectedClients, m.SourceBatches, m.SourceRefusing, m.KubeStale,
		m.StatusWrites, m.StatusWriteErrors, m.StatusUnchanged, m.StatusQueueDepth, m.StatusQueueAdds, m.StatusQueueLatency,
		m.StatusWorkDuration, m.StatusRetries,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetKubeStale makes poise_kube_source_stale_seconds report what f returns
// at each scrape: seconds by kind.
func (m *Metrics) SetKubeStale(f func() map[string]float64) { m.KubeStale.f.Store(&f) }

// funcGaugeVec is a gauge per label value, read from a function at each
// scrape: a staleness grows between events, which a set gauge would not.
type funcGaugeVec struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() map[string]float64]
}

func (g *funcGaugeVec) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *funcGaugeVec) Collect(ch chan<- prometheus.Metric) {
	f := g.f.Load()
	if f == nil {
		return
	}
	for label, v := range (*f)() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, label)
	}
}
