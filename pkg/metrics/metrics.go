package metrics

import (
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
	}
	r.MustRegister(m.Revision, m.PublishedRevision, m.SnapshotBuilds, m.SnapshotDuration, m.ResourceChanges,
		m.Pushes, m.NACKs, m.ConnectedClients, m.SourceBatches,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
