package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/files"
	"poise.dev/poise/pkg/identity"
	kubereplica "poise.dev/poise/pkg/kube/replica"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/metrics/upstreamgauges"
	"poise.dev/poise/pkg/signals/healthcheck"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

func newServeCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "serve (-f PATH... | --source=kubernetes)",
		Short: "Serve the topology over xDS (ADS) and watch it for changes",
		Long: `serve publishes every upstream over ADS (SotW and Delta) to Envoy and gRPC:
from manifest files (-f, watched for changes) or, with --source=kubernetes,
from the cluster's Upstream, Locality and EndpointSet objects and imported
Services. The admin address serves /healthz, /readyz, /metrics and /debug.`,
		Example: `  controlplane serve -f examples
  controlplane serve --source=kubernetes --namespace shop --log-format json`,
		Args: noArgs,
	}
	f := bindServeFlags(c.Flags())
	return command(c, func(*cobra.Command, []string) int {
		cfg, err := f.config(stdout, stderr)
		if err != nil {
			for _, p := range problems(err) {
				fmt.Fprintf(stderr, "error: %v\n", p)
			}
			return exitUsage
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := controlplane.Run(ctx, cfg); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		return exitOK
	})
}

// serveFlags are serve's flags: most bound straight to the Config field
// they set, the others parsed into Config by config.
type serveFlags struct {
	cfg                            controlplane.Config
	tls                            server.TLS
	logLevel, logFormat            string
	spatialListener                string
	remoteClusters, localityGauges bool
}

func bindServeFlags(fs *pflag.FlagSet) *serveFlags {
	f := &serveFlags{}
	cfg := &f.cfg
	fileFlag(fs, (*paths)(&cfg.Paths), "manifest file or directory to serve and watch (repeatable, or comma-separated)")
	fs.StringVar(&cfg.XDSAddress, "xds-address", "127.0.0.1:18000", "gRPC address for xDS (ADS SotW and Delta)")
	fs.StringVar(&cfg.AdminAddress, "admin-address", "127.0.0.1:19000", "HTTP address for /healthz, /readyz, /metrics, /debug (explain, clients, pprof): keep it on loopback")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", "", "HTTP address serving only /healthz, /readyz and /metrics, for probes and scrapers (empty: none)")
	fs.StringVar(&f.tls.CertFile, "tls-cert", "", "serve xDS over TLS with this certificate (PEM)")
	fs.StringVar(&f.tls.KeyFile, "tls-key", "", "private key of --tls-cert (PEM)")
	fs.StringVar(&f.tls.ClientCAFile, "tls-client-ca", "", "require client certificates signed by this CA (mTLS); without --xds-auth, they identify their clients (--xds-auth=mtls)")
	// No default value: left out, the default depends on --tls-client-ca
	// (controlplane.Config.XDSAuth), and an explicit none is told apart.
	fs.StringSliceVar(&cfg.XDSAuth, "xds-auth", nil,
		"how xDS and LRS clients prove who they are: none, mtls (the SPIFFE ID spiffe://TRUST-DOMAIN/ns/NS/sa/SA of a client certificate; needs --tls-cert, --tls-key, --tls-client-ca), token (a Kubernetes service-account token as \"authorization: Bearer TOKEN\", checked with TokenReview), or mtls,token; a node claiming another namespace or service account than proven is refused (default: mtls with --tls-client-ca, else none)")
	fs.StringVar(&cfg.XDSTokenAudience, "xds-token-audience", identity.DefaultAudience, "with --xds-auth=token, the audience a client's token must be minted for")
	fs.DurationVar(&cfg.XDSTokenReviewInterval, "xds-token-review-interval", identity.DefaultReviewInterval,
		"with --xds-auth=token, how long a token TokenReview accepted is trusted before it is reviewed again (1s to 24h): a stream whose token is then refused (its pod deleted) ends, so a revoked token keeps a stream open at most this long plus the apiserver's token cache (10s); one TokenReview per token per interval, however many streams present it")
	fs.StringVar(&cfg.XDSTrustDomain, "xds-trust-domain", "",
		"with --xds-auth=mtls, the only SPIFFE trust domain accepted (empty: the trust domain of --tls-cert's SPIFFE ID, read at start; without one, any the CA signs, logged as a warning)")
	fs.BoolVar(&cfg.XDSAllowAnonymousNonLoopback, "xds-allow-anonymous-non-loopback", false,
		"with --xds-auth=none, serve xDS on an --xds-address that is not loopback anyway (logged as a warning): any process that reaches it reads every upstream and steers the fleet")
	fs.StringArrayVar(&cfg.XDSDemandGrant, "xds-demand-grant", nil,
		"NS/SA=N (repeatable): a client proven to be service account SA of namespace NS may claim a demand weight (node metadata poise.dev/demand-weight) of up to N, 1 to 1000000, in a Balanced upstream; any other proven client counts at most 1 (anonymous clients are not capped)")
	fs.IntVar(&cfg.MaxStreams, "xds-max-streams", server.DefaultMaxStreams, "xDS streams served at once; beyond, a new stream ends with RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.DrainPeriod, "drain-period", 5*time.Second, "on SIGTERM, stop accepting xDS connections and end the open streams spread over this long, so clients move to other replicas gradually (keep it below the pod's terminationGracePeriodSeconds)")
	fs.IntVar(&cfg.MaxStreamsPerConnection, "xds-max-streams-per-connection", server.DefaultMaxStreamsPerConnection, "xDS streams one client connection may open at once")
	fs.IntVar(&cfg.MaxStreamsPerInstance, "xds-max-streams-per-instance", 0,
		"xDS and LRS streams one workload instance (a pod, by its bound token, or a client certificate) may hold at once on a replica, 0 (no bound but --xds-max-streams) to 10000")
	fs.DurationVar(&cfg.Debounce, "debounce", files.DefaultDebounce,
		"apply a manifest change once the files have been quiet this long (with --source=kubernetes: once changes pause for a tenth of this, at the latest this long after the first)")
	fs.DurationVar(&cfg.DebounceMax, "debounce-max", 0, "apply manifest changes that never fall quiet at the latest this long after the first (0: twice --debounce)")
	fs.DurationVar(&cfg.Settle, "settle", files.DefaultSettle,
		"a manifest change that empties or removes a file, or takes at least half of its objects (and at least one) out of the topology, is held back, the previous content serving, until the files have stayed so this long: a file truncated and then written again is never served half-written (0: apply such changes at once)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&cfg.Source, "source", "files", "where the topology comes from: files (-f) or kubernetes")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig for --source=kubernetes (default: $KUBECONFIG, else the pod's service account, else ~/.kube/config)")
	fs.StringVar(&cfg.Namespace, "namespace", "", "with --source=kubernetes, watch only this namespace (empty: all)")
	fs.StringSliceVar(&cfg.DefaultExportTo, "default-export-to", []string{"*"},
		`who may read an Upstream or SpatialDomain that sets no spec.exportTo: "*" (every namespace, and clients of no proven namespace), "." (its own namespace) or namespace names, comma-separated`)
	fs.StringVar(&f.spatialListener, "spatial-listener", "0.0.0.0:10080", "address Envoy's spatial routing listener (LDS \"spatial\") binds, when a SpatialDomain exists")
	fs.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease that elects the status writer (default: --namespace, else the pod's own, else the kubeconfig context's)")
	fs.BoolVar(&f.remoteClusters, "remote-clusters", true,
		"with --source=kubernetes, import Services from the remote clusters registered by Secrets labelled poise.dev/remote-cluster in Poise's namespace (docs/multicluster.md); false reads no Secret and imports from the home cluster only")
	fs.StringVar(&cfg.ClusterName, "cluster-name", source.DefaultClusterName, "with --source=kubernetes, the home cluster's name: the name spec.endpointsFrom.clusters and explain give it (docs/multicluster.md)")
	fs.DurationVar(&cfg.RemoteStaleAfter, "remote-stale-after", source.DefaultRemoteStaleAfter,
		"with --source=kubernetes, how long an unreachable remote cluster's last-known endpoints keep serving before they are Unavailable (5s to 1h)")
	fs.StringVar(&cfg.LeaderElectionID, "leader-election-id", kubereplica.DefaultLeaderElectionID, "name of the Lease that elects the status writer: installs sharing a namespace need different names")
	fs.Float64Var(&cfg.KubeQPS, "kube-api-qps", kubereplica.DefaultClientQPS, "with --source=kubernetes, requests per second to the apiserver, all clients of the process together")
	fs.IntVar(&cfg.KubeBurst, "kube-api-burst", kubereplica.DefaultClientBurst, "with --source=kubernetes, requests the apiserver client may send at once above --kube-api-qps")
	fs.Float64Var(&cfg.StatusShare, "status-write-share", kubereplica.DefaultStatusShare,
		"the part (0 to 1] of --kube-api-qps and --kube-api-burst that status writes may take; the rest is kept for the Lease and the informers")
	fs.IntVar(&cfg.StatusWriters, "status-writers", kubereplica.DefaultStatusWorkers, "status writes in flight at once, at most (the status writer's share of the apiserver's concurrency)")
	fs.IntVar(&cfg.MaxClientClasses, "max-client-classes", xdscache.DefaultMaxZones,
		"client-locality classes (region/zone) rendered at once for upstreams with localityAffinity; a client of another zone beyond it receives its region's class, and beyond as many region classes the split of clients with no locality (/debug/clients says which)")
	fs.BoolVar(&f.localityGauges, "metrics-locality-gauges", true,
		"export poise_upstream_locality_traffic, a series per (upstream, priority, locality): the most numerous of the per-upstream gauges")
	fs.IntVar(&cfg.MetricsMaxUpstreams, "metrics-max-upstreams", upstreamgauges.DefaultMaxUpstreams,
		"upstreams with per-upstream gauges, at most (the first seen; 0: none); the others are logged once and have their figures in status and /debug/explain")
	fs.IntVar(&cfg.LoadReportMaxCells, "load-report-max-cells", loadreport.DefaultMaxCells,
		fmt.Sprintf("hard cap of the load-report store, in cells (one client's counts for one endpoint, %d bytes each); past it the clients that reported least recently are dropped and counted (/debug/loads drops.evicted)", loadreport.CellBytes))
	fs.IntVar(&cfg.LoadReportMaxRequests, "load-report-max-requests-per-instance", loadreport.DefaultMaxRequests,
		"the most requests one workload instance (one node ID of an anonymous client) may weigh in the load reports of one cluster over the window (30 s), 1000 to 4294967295; past it its reports are kept scaled down to it, their error ratio unchanged, and the excess counted (poise_loadreport_capped_requests_total) and logged")
	fs.IntVar(&cfg.HealthCheckConcurrency, "health-check-concurrency", healthcheck.DefaultConcurrency,
		"active health checks (spec.healthCheck) in flight at once, 1 to 1024; a check due while all are taken waits")
	fs.IntVar(&cfg.HealthCheckMaxEndpoints, "health-check-max-endpoints", healthcheck.DefaultMaxEndpoints,
		"endpoints actively checked at most, all upstreams together, 1 to 100000; the others keep an Unknown check signal and are counted in status.activeChecks.unchecked")
	fs.DurationVar(&cfg.LoadReportBucket, "load-report-bucket", loadreport.DefaultBucket,
		"for tests and tuning: the load-report store's time bucket, 100ms to 10s; the window of load reports and fleet outlier detection is six buckets, and outlier detection is evaluated once a bucket")
	_ = fs.MarkHidden("load-report-bucket")
	return f
}

// config is the Config the flags say, or every problem with them: those
// of the flags parsed here and those Config.Validate finds. Once valid,
// the flags' zeros that mean "none" become what Config says for none,
// where its zero is the default.
func (f *serveFlags) config(stdout, stderr io.Writer) (controlplane.Config, error) {
	log, logErr := newLogger(stderr, f.logLevel, f.logFormat)
	spatial, spatialErr := parseSpatialListener(f.spatialListener)
	if spatialErr != nil {
		spatialErr = fmt.Errorf("--spatial-listener %q: %w", f.spatialListener, spatialErr)
	}
	cfg := f.cfg
	if f.tls != (server.TLS{}) {
		tls := f.tls
		cfg.TLS = &tls
	}
	if err := errors.Join(logErr, cfg.Validate(), spatialErr); err != nil {
		return controlplane.Config{}, err
	}
	cfg.Spatial = spatial
	cfg.NoRemoteClusters = !f.remoteClusters
	cfg.MetricsNoLocalityGauges = !f.localityGauges
	if cfg.MetricsMaxUpstreams == 0 {
		cfg.MetricsMaxUpstreams = -1 // Config's zero is the default
	}
	cfg.Settle = settleOf(cfg.Settle)
	cfg.Log, cfg.Out, cfg.BannerFormat, cfg.Version = log, stdout, f.logFormat, buildVersion().Version
	return cfg, nil
}

// problems are the problems err joins, one by one.
func problems(err error) []error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, problems(e)...)
	}
	return out
}

// settleOf is the files source's Settle for --settle, where 0 turns the
// hold off.
func settleOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// parseSpatialListener reads HOST:PORT for the spatial listener Envoy binds.
func parseSpatialListener(s string) (translate.SpatialOptions, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return translate.SpatialOptions{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return translate.SpatialOptions{}, fmt.Errorf("port %q: want 1..65535", port)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return translate.SpatialOptions{}, fmt.Errorf("host %q: want an IP address", host)
	}
	return translate.SpatialOptions{Address: host, Port: uint32(p)}, nil
}
