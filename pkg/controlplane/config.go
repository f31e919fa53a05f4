package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
)

// Config is one control-plane process.
//
// Run reads a zero field as that field's default, so a literal names only
// what it changes. Validate reads every field as set, the way the serve
// command fills them from its flags (whose defaults are the same values):
// there a zero is a value like any other, refused where its range
// excludes it.
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
	// pkg/kube/source.
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
	// XDSAuth is how xDS and LRS clients prove who they are: "none", or
	// "mtls" (the SPIFFE ID of a verified client certificate), "token" (a
	// Kubernetes service-account token checked with TokenReview), or both.
	// nil is the default, for Run and Validate alike: mtls when TLS has a
	// ClientCAFile, else none; and with a ClientCAFile, token is served as
	// mtls,token (a verified certificate always identifies its client). XDSTokenAudience is the audience a token
	// must be minted for ("" reads as identity.DefaultAudience);
	// XDSTrustDomain the only SPIFFE trust domain accepted ("": that of
	// the SPIFFE ID of TLS.CertFile, read at start; without one, any).
	XDSAuth          []string
	XDSTokenAudience string
	XDSTrustDomain   string
	// XDSTokenReviewInterval is how long a token TokenReview accepted is
	// trusted before it is reviewed again: a stream whose token is refused
	// then (its pod deleted) ends, so it bounds how long a revoked token
	// keeps a stream open (plus the apiserver's own token cache). 0 reads
	// as identity.DefaultReviewInterval.
	XDSTokenReviewInterval time.Duration
	// XDSAllowAnonymousNonLoopback lets XDSAuth none serve on an address
	// that is not loopback; without it Validate and Run refuse to.
	XDSAllowAnonymousNonLoopback bool
	// XDSDemandGrant raises the demand weight an identity may claim in a
	// Balanced upstream: "NS/SA=N", N 1..affinity.MaxDemandWeight, one per
	// principal. A proven identity not listed may claim 1; an anonymous
	// client's claim is not capped.
	XDSDemandGrant []string
	// Audience resolves who an xDS client is, for what it may read (see
	// server.Config.Audience); nil: every client is anonymous and reads only
	// what is exported to every namespace.
	Audience func(ctx context.Context) (server.Audience, error)
	// MaxStreams, MaxStreamsPerConnection and MaxStreamsPerInstance bound
	// the xDS streams (zero: the server's defaults).
	MaxStreams, MaxStreamsPerConnection, MaxStreamsPerInstance int
	// DrainPeriod: how long stopping takes to end the xDS streams (see
	// server.Config.DrainPeriod).
	DrainPeriod time.Duration
	// LoadReportMaxCells is the hard cap of the load-report store (cells:
	// one reporter's counts for one endpoint); 0 is
	// loadreport.DefaultMaxCells.
	LoadReportMaxCells int
	// LoadReportMaxRequests is the most requests one load reporter (a
	// workload instance; an anonymous client's node) may weigh in one
	// cluster over the window (loadreport.Config.MaxRequests); 0 is
	// loadreport.DefaultMaxRequests.
	LoadReportMaxRequests int
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
	// an unreachable remote cluster's endpoints serve (replica.Options).
	ClusterName      string
	RemoteStaleAfter time.Duration
	// NoRemoteClusters: read no Secret, import from the home cluster only
	// (serve --remote-clusters=false).
	NoRemoteClusters bool
	// MetricsNoLocalityGauges leaves out poise_upstream_locality_traffic
	// (the zero value exports it); MetricsMaxUpstreams bounds the upstreams
	// with per-upstream gauges (0: upstreamgauges.DefaultMaxUpstreams;
	// negative: none). See upstreamgauges.Gauges.
	MetricsNoLocalityGauges bool
	MetricsMaxUpstreams     int
	// DefaultExportTo is who may read an Upstream or SpatialDomain that sets
	// no spec.exportTo: "*" (every namespace, and anonymous clients), "."
	// (the object's own namespace) or namespace names, as spec.exportTo
	// reads them. nil is "*".
	DefaultExportTo []string
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
	// LogPeriod bounds the log of what publications changed: each
	// upstream's and endpoint's lines, past a burst of two, one per period
	// (planelog.Options.Period). 0 is planelog.DefaultPeriod; shorter is
	// for tests.
	LogPeriod time.Duration
	Out       io.Writer // where the start-up banner goes; nil for none
	// BannerFormat is "json" for a banner that is one JSON object (a log
	// record beside the others under --log-format json); else text.
	BannerFormat string
	Version      string
	// Started, when set, is called once both ports listen.
	Started func(Addrs)
}

// The bounds Validate holds the fields to. A load-report bucket is a
// window of 600 ms to 60 s; 100,000,000 load-report cells are a few GB,
// beyond any replica's memory limit, so a larger figure is a typo. A
// reporter's cap of fewer than 1,000 requests a window would cut ordinary
// clients; above loadreport.MaxMaxRequests a kept count could saturate.
const (
	minLoadReportBucket     = 100 * time.Millisecond
	maxLoadReportBucket     = 10 * time.Second
	maxLoadReportCells      = 100_000_000
	minLoadReportRequests   = 1_000
	maxLoadReportRequests   = loadreport.MaxMaxRequests
	maxClientClasses        = 4096
	maxHealthCheckWorkers   = 1024
	maxHealthCheckEndpoints = 100_000
	minTokenReviewInterval  = time.Second
	maxTokenReviewInterval  = 24 * time.Hour
	// A debounce over a minute, a hold or a drain over ten minutes is a
	// typo of a unit: each delays every change, or a replica's end, by as
	// long. A replica serves at most a million streams, a connection ten
	// thousand (Envoy opens one, a gRPC client a few).
	maxDebounce          = time.Minute
	maxDebounceMax       = 10 * time.Minute
	maxSettle            = 10 * time.Minute
	maxDrainPeriod       = 10 * time.Minute
	maxXDSStreams        = 1_000_000
	maxXDSStreamsPerConn = 10_000
	maxXDSStreamsPerInst = 10_000
	maxKubeQPS           = 100_000
	maxKubeBurst         = 100_000
	maxStatusWriters     = 1024
	maxMetricsUpstreams  = 100_000
)

// Validate reports every field out of its range at once (errors.Join),
// each problem naming the serve flag that sets the field. The ranges:
//
//   - Source: "files" or "kubernetes"; Paths: at least one with "files",
//     none with "kubernetes".
//   - Debounce: 0 to 1m; DebounceMax: 0 (twice Debounce) or Debounce to
//     10m; Settle, DrainPeriod: 0 to 10m.
//   - MaxStreams: 1 to 1,000,000; MaxStreamsPerConnection: 1 to 10,000;
//     MaxStreamsPerInstance: 0 (off) to 10,000.
//   - KubeQPS: above 0 and at most 100,000; KubeBurst: 1 to 100,000;
//     StatusWriters: 1 to 1024; StatusShare: above 0 and at most 1.
//   - RemoteStaleAfter: source.MinRemoteStaleAfter to source.MaxRemoteStaleAfter;
//     ClusterName: a name source.ValidClusterName accepts.
//   - MaxClientClasses: 1 to 4096; LoadReportMaxCells: 1 to 100,000,000;
//     LoadReportBucket: 100ms to 10s; LoadReportMaxRequests: 1,000 to
//     loadreport.MaxMaxRequests (2^32 − 1).
//   - HealthCheckConcurrency: 1 to 1024; HealthCheckMaxEndpoints: 1 to
//     100,000.
//   - MetricsMaxUpstreams: 0 (none, as serve's flag says) to 100,000.
//   - XDSAuth: nil (the default), none alone, or mtls and token once
//     each; mtls needs TLS with a client CA; token a non-empty
//     XDSTokenAudience; none on an XDSAddress that is not loopback needs
//     XDSAllowAnonymousNonLoopback. XDSTrustDomain: empty or a trust
//     domain identity.CheckTrustDomain accepts.
//   - XDSTokenReviewInterval: 1s to 24h.
//   - XDSDemandGrant: each NS/SA=N with N 1 to affinity.MaxDemandWeight,
//     each principal once.
//   - DefaultExportTo: a list spec.exportTo accepts (convert.ExportTo);
//     nil is "*".
//
// A zero is checked as given, not read as Run's default: Validate is for
// a Config whose every field is set, as serve sets them.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	durations := func(flag string, v, lo, hi time.Duration) {
		if v < lo || v > hi {
			add("%s %v: want %v to %v", flag, v, lo, hi)
		}
	}
	ints := func(flag string, v, lo, hi int) {
		if v < lo || v > hi {
			add("%s %d: want %d to %d", flag, v, lo, hi)
		}
	}
	durations("--debounce", c.Debounce, 0, maxDebounce)
	durations("--debounce-max", c.DebounceMax, 0, maxDebounceMax)
	if c.DebounceMax > 0 && c.DebounceMax < c.Debounce {
		add("--debounce-max %v is shorter than --debounce %v: a burst could never be applied on quiet", c.DebounceMax, c.Debounce)
	}
	durations("--settle", c.Settle, 0, maxSettle)
	durations("--drain-period", c.DrainPeriod, 0, maxDrainPeriod)
	ints("--xds-max-streams", c.MaxStreams, 1, maxXDSStreams)
	ints("--xds-max-streams-per-connection", c.MaxStreamsPerConnection, 1, maxXDSStreamsPerConn)
	ints("--xds-max-streams-per-instance", c.MaxStreamsPerInstance, 0, maxXDSStreamsPerInst)
	if !(c.KubeQPS > 0 && c.KubeQPS <= maxKubeQPS) { // refuses NaN too
		add("--kube-api-qps %v: want above 0 and at most %d", c.KubeQPS, maxKubeQPS)
	}
	ints("--kube-api-burst", c.KubeBurst, 1, maxKubeBurst)
	durations("--remote-stale-after", c.RemoteStaleAfter, source.MinRemoteStaleAfter, source.MaxRemoteStaleAfter)
	if why := source.ValidClusterName(c.ClusterName); why != "" {
		add("--cluster-name: %s", why)
	}
	ints("--max-client-classes", c.MaxClientClasses, 1, maxClientClasses)
	ints("--load-report-max-cells", c.LoadReportMaxCells, 1, maxLoadReportCells)
	ints("--load-report-max-requests-per-instance", c.LoadReportMaxRequests, minLoadReportRequests, maxLoadReportRequests)
	ints("--health-check-concurrency", c.HealthCheckConcurrency, 1, maxHealthCheckWorkers)
	ints("--health-check-max-endpoints", c.HealthCheckMaxEndpoints, 1, maxHealthCheckEndpoints)
	durations("--load-report-bucket", c.LoadReportBucket, minLoadReportBucket, maxLoadReportBucket)
	ints("--metrics-max-upstreams", c.MetricsMaxUpstreams, 0, maxMetricsUpstreams)
	_, problems := DefaultExport(c.DefaultExportTo)
	errs = append(errs, problems...)
	ints("--status-writers", c.StatusWriters, 1, maxStatusWriters)
	if !(c.StatusShare > 0 && c.StatusShare <= 1) { // refuses NaN too
		add("--status-write-share %v: want a part of the client's budget, above 0 and at most 1", c.StatusShare)
	}
	errs = append(errs, c.validateAuth()...)
	errs = append(errs, c.validateDemandGrants()...)
	switch {
	case c.Source != "files" && c.Source != "kubernetes":
		add("--source %q: want files or kubernetes", c.Source)
	case c.Source == "files" && len(c.Paths) == 0:
		add("-f PATH is required (a manifest file or directory)")
	case c.Source == "kubernetes" && len(c.Paths) > 0:
		add("-f is for --source=files; with --source=kubernetes the topology comes from the cluster")
	}
	return errors.Join(errs...)
}
