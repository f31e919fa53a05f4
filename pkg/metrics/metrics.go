package metrics

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// The label values known before anything happens, which no other package
// lists. Every series of these (and of Options.Types and Options.Kinds) is
// created at 0 when the metrics are, so a rate() or an absent() alert sees
// a series from the first scrape, not only after the first event.
var (
	// ClientKinds are the kinds of xDS client (server.ClientKind).
	ClientKinds = []string{"envoy", "grpc", "unknown"}
	// BuildResults are the results of a snapshot build.
	BuildResults = []string{"published", "rejected"}
	// SourceResults are the results of a source's batch.
	SourceResults = []string{"applied", "rejected"}
	// ActiveCheckStates are the states of poise_active_check_endpoints.
	ActiveCheckStates = []string{"healthy", "unhealthy", "unknown", "unchecked"}
	// StatusErrorReasons are the reasons of a failed status write.
	StatusErrorReasons = []string{"conflict", "timeout", "throttled", "invalid", "error"}
)

// Options are what the metrics are made with: the label values the domain
// defines, and the configuration that decides which series exist at 0.
type Options struct {
	// Version is poise_build_info's version label (empty: the main
	// module's, from the build information).
	Version string
	// Types are the short names of the xDS types served (CDS, EDS, ...).
	Types []string
	// RefusalReasons are the reasons an xDS client is refused for its
	// identity (identity.Reasons).
	RefusalReasons []string
	// Kinds are the kinds of object a source reads.
	Kinds []string
	// Source names the configured source: its batch and refusal series
	// exist at 0 (empty: no source's do).
	Source string
	// WritesStatus: the source writes status, so the status writer's
	// series by kind exist at 0.
	WritesStatus bool
}

// Metrics is every metric the control plane exports, on a registry of its
// own, in one group per component.
type Metrics struct {
	Registry *prometheus.Registry
	// extra are other registries served on the same /metrics (Gatherer).
	extra []prometheus.Gatherer

	BuildInfo *prometheus.GaugeVec // version, goversion, revision: always 1

	XDS         *XDS
	Publication *Publication
	Source      *Source
	Classes     *Classes
	Backlog     *Backlog
	Status      *Status
	Checks      *Checks
	Outliers    *Outliers
}

// New registers every metric on a new registry, with the Go and process
// collectors.
func New(o Options) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_build_info", Help: "Always 1; its labels say which build of the control plane runs.",
		}, []string{"version", "goversion", "revision"}),
		XDS:         newXDS(o.Types, o.RefusalReasons),
		Publication: newPublication(o.Types),
		Source:      newSource(o.Source, o.Kinds),
		Classes:     newClasses(),
		Backlog:     newBacklog(),
		Status:      newStatus(o.Kinds, o.WritesStatus),
		Checks:      newChecks(),
		Outliers:    newOutliers(),
	}
	r.MustRegister(m.BuildInfo, m.XDS, m.Publication, m.Source, m.Classes, m.Backlog, m.Status, m.Checks, m.Outliers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.setBuildInfo(o.Version)
	return m
}

// setBuildInfo sets poise_build_info: version is the one the binary was
// given (empty: the main module's, from the build information), revision
// the VCS revision the build recorded ("-dirty" when modified), else "unknown".
func (m *Metrics) setBuildInfo(version string) {
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

// group is a component's collectors registered as one: it describes and
// collects each of them.
type group []prometheus.Collector

func (g group) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g {
		c.Describe(ch)
	}
}

func (g group) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g {
		c.Collect(ch)
	}
}
