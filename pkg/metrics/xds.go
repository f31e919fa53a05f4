package metrics

import "github.com/prometheus/client_golang/prometheus"

// XDS are the xDS server's metrics: what it sends to and hears from its
// clients, by xDS type, and its open streams, by client kind.
type XDS struct {
	group
	Pushes           *prometheus.CounterVec // type
	NACKs            *prometheus.CounterVec // type
	ConnectedClients *prometheus.GaugeVec   // kind: envoy | grpc | unknown
	// type: from a version's publication (or the client's request, when
	// later) to a client's ACK of it or of a later version
	Convergence  *prometheus.HistogramVec
	PushDuration *prometheus.HistogramVec // type: from a stream's wake-up to its response handed to gRPC
	SendDuration *prometheus.HistogramVec // type: handing one response to gRPC
	// Refused counts the streams and calls refused or ended for who their
	// client is (or is not), by reason: a bounded set, every one at 0.
	Refused *prometheus.CounterVec // reason
	// IdentityStreams are the open streams by the principal (namespace/
	// service account) their client proved: at most MaxPrincipals of
	// them, the others under OtherPrincipal, anonymous streams under
	// AnonymousPrincipal.
	IdentityStreams *prometheus.GaugeVec // principal
}

// The principal labels of poise_xds_identity_streams that name no
// principal, and how many principals have a series of their own.
const (
	OtherPrincipal     = "~other"
	AnonymousPrincipal = "~anonymous"
	MaxPrincipals      = 100
)

// convergenceBuckets span a change reaching a client at once (a
// millisecond) to one that takes minutes: an alert on the slow end needs
// buckets there, and 1 and 2 s are the objectives docs/performance.md
// measures a replica against.
var convergenceBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10, 30, 60, 120, 300, 600}

func newXDS(types, refusals []string) *XDS {
	x := &XDS{
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
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_refused_total", Help: "xDS and LRS streams and calls refused, or ended, for their client's identity: no or bad credentials, expired credentials, or node claims the identity does not back; by reason.",
		}, []string{"reason"}),
		IdentityStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_xds_identity_streams", Help: "Open xDS and LRS streams by the principal (namespace/service-account) their client proved; at most 100 principals, the others under ~other, anonymous clients under ~anonymous.",
		}, []string{"principal"}),
	}
	x.group = group{x.Pushes, x.NACKs, x.ConnectedClients, x.Convergence, x.PushDuration, x.SendDuration, x.Refused, x.IdentityStreams}
	for _, r := range refusals {
		x.Refused.WithLabelValues(r)
	}
	x.IdentityStreams.WithLabelValues(OtherPrincipal)
	x.IdentityStreams.WithLabelValues(AnonymousPrincipal)
	for _, t := range types {
		x.Pushes.WithLabelValues(t)
		x.NACKs.WithLabelValues(t)
		x.Convergence.WithLabelValues(t)
		x.PushDuration.WithLabelValues(t)
		x.SendDuration.WithLabelValues(t)
	}
	for _, k := range ClientKinds {
		x.ConnectedClients.WithLabelValues(k)
	}
	return x
}

// Publication are the publisher's metrics: the snapshots it builds and
// publishes, and the resources they change.
type Publication struct {
	group
	PublishedRevision prometheus.Gauge
	Builds            *prometheus.CounterVec // result: published | rejected
	BuildDuration     prometheus.Histogram
	ResourceChanges   *prometheus.CounterVec // type
}

func newPublication(types []string) *Publication {
	p := &Publication{
		PublishedRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_xds_published_revision", Help: "Topology revision last published over xDS.",
		}),
		Builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_snapshot_builds_total", Help: "xDS publications built from topology snapshots, by result.",
		}, []string{"result"}),
		BuildDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_xds_snapshot_build_duration_seconds", Help: "Time to translate and publish one topology snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		ResourceChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_xds_resource_changes_total", Help: "Resources put or deleted by publications, by xDS type.",
		}, []string{"type"}),
	}
	p.group = group{p.PublishedRevision, p.Builds, p.BuildDuration, p.ResourceChanges}
	for _, t := range types {
		p.ResourceChanges.WithLabelValues(t)
	}
	for _, r := range BuildResults {
		p.Builds.WithLabelValues(r)
	}
	return p
}

// Classes are the client-locality classes, read from the cache at each
// scrape (see Set).
type Classes struct {
	group
	classes              *funcGaugeVec // rendering: classes with open streams
	fallbacks, overflows *funcGaugeVec // no labels: streams in a region class, in none
}

func newClasses() *Classes {
	c := &Classes{
		classes: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_classes",
			"Client-locality classes (region/zone, or region) with open streams, by rendering; bounded by --max-client-classes.",
			[]string{"rendering"}, nil)},
		fallbacks: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_class_fallback_streams",
			"Open streams sent their region's class because their zone's class was over --max-client-classes.", nil, nil), zero: []string{""}, bare: true},
		overflows: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_client_class_overflow_streams",
			"Open streams sent the resources of clients with no locality because their zone's and their region's classes were both over --max-client-classes.", nil, nil), zero: []string{""}, bare: true},
	}
	c.group = group{c.classes, c.fallbacks, c.overflows}
	return c
}

// Set makes the client-class gauges read the cache at each scrape: classes
// by rendering, and the streams in a region's class or in none because the
// classes were over their bound.
func (c *Classes) Set(classes func() map[string]float64, fallback, overflow func() float64) {
	c.classes.f.Store(&classes)
	fb := func() map[string]float64 { return map[string]float64{"": fallback()} }
	of := func() map[string]float64 { return map[string]float64{"": overflow()} }
	c.fallbacks.f.Store(&fb)
	c.overflows.f.Store(&of)
}

// Backlog is how far the replica is behind its clients, read from the
// cache at each scrape (see Set).
type Backlog struct {
	group
	waiting *funcGaugeVec // no labels: streams woken and not yet served
}

func newBacklog() *Backlog {
	b := &Backlog{
		waiting: &funcGaugeVec{desc: prometheus.NewDesc("poise_xds_streams_waiting",
			"xDS streams woken by a change or a request and not yet served: the replica's backlog.", nil, nil), zero: []string{""}, bare: true},
	}
	b.group = group{b.waiting}
	return b
}

// Set makes the backlog series read the cache at each scrape.
func (b *Backlog) Set(waiting func() float64) {
	w := func() map[string]float64 { return map[string]float64{"": waiting()} }
	b.waiting.f.Store(&w)
}
