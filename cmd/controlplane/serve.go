package main

import (
	"context"
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

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/healthcheck"
	"poise.dev/poise/pkg/kubereplica"
	"poise.dev/poise/pkg/loadreport"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/source/files"
	"poise.dev/poise/pkg/source/kube"
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
	fs := c.Flags()
	var manifestPaths paths
	fileFlag(fs, &manifestPaths, "manifest file or directory to serve and watch (repeatable, or comma-separated)")
	xdsAddr := fs.String("xds-address", "127.0.0.1:18000", "gRPC address for xDS (ADS SotW and Delta)")
	adminAddr := fs.String("admin-address", "127.0.0.1:19000", "HTTP address for /healthz, /readyz, /metrics, /debug (explain, clients, pprof): keep it on loopback")
	metricsAddr := fs.String("metrics-address", "", "HTTP address serving only /healthz, /readyz and /metrics, for probes and scrapers (empty: none)")
	tlsCert := fs.String("tls-cert", "", "serve xDS over TLS with this certificate (PEM)")
	tlsKey := fs.String("tls-key", "", "private key of --tls-cert (PEM)")
	tlsCA := fs.String("tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	maxStreams := fs.Int("xds-max-streams", server.DefaultMaxStreams, "xDS streams served at once; beyond, a new stream ends with RESOURCE_EXHAUSTED")
	drain := fs.Duration("drain-period", 5*time.Second, "on SIGTERM, stop accepting xDS connections and end the open streams spread over this long, so clients move to other replicas gradually (keep it below the pod's terminationGracePeriodSeconds)")
	maxPerConn := fs.Int("xds-max-streams-per-connection", server.DefaultMaxStreamsPerConnection, "xDS streams one client connection may open at once")
	debounce := fs.Duration("debounce", files.DefaultDebounce,
		"apply a manifest change once the files have been quiet this long (with --source=kubernetes: once changes pause for a tenth of this, at the latest this long after the first)")
	debounceMax := fs.Duration("debounce-max", 0, "apply manifest changes that never fall quiet at the latest this long after the first (0: twice --debounce)")
	settle := fs.Duration("settle", files.DefaultSettle,
		"a manifest change that empties or removes a file, or takes at least half of its objects (and at least one) out of the topology, is held back, the previous content serving, until the files have stayed so this long: a file truncated and then written again is never served half-written (0: apply such changes at once)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	source := fs.String("source", "files", "where the topology comes from: files (-f) or kubernetes")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for --source=kubernetes (default: $KUBECONFIG, else the pod's service account, else ~/.kube/config)")
	namespace := fs.String("namespace", "", "with --source=kubernetes, watch only this namespace (empty: all)")
	spatialListen := fs.String("spatial-listener", "0.0.0.0:10080", "address Envoy's spatial routing listener (LDS \"spatial\") binds, when a SpatialDomain exists")
	leNamespace := fs.String("leader-election-namespace", "", "namespace of the Lease that elects the status writer (default: --namespace, else the pod's own, else the kubeconfig context's)")
	remoteClusters := fs.Bool("remote-clusters", true,
		"with --source=kubernetes, import Services from the remote clusters registered by Secrets labelled poise.dev/remote-cluster in Poise's namespace (docs/multicluster.md); false reads no Secret and imports from the home cluster only")
	clusterName := fs.String("cluster-name", kube.DefaultClusterName, "with --source=kubernetes, the home cluster's name: the name spec.endpointsFrom.clusters and explain give it (docs/multicluster.md)")
	remoteStale := fs.Duration("remote-stale-after", kube.DefaultRemoteStaleAfter,
		"with --source=kubernetes, how long an unreachable remote cluster's last-known endpoints keep serving before they are Unavailable (5s to 1h)")
	leID := fs.String("leader-election-id", kubereplica.DefaultLeaderElectionID, "name of the Lease that elects the status writer: installs sharing a namespace need different names")
	kubeQPS := fs.Float64("kube-api-qps", kubereplica.DefaultClientQPS, "with --source=kubernetes, requests per second to the apiserver, all clients of the process together")
	kubeBurst := fs.Int("kube-api-burst", kubereplica.DefaultClientBurst, "with --source=kubernetes, requests the apiserver client may send at once above --kube-api-qps")
	statusShare := fs.Float64("status-write-share", kubereplica.DefaultStatusShare,
		"the part (0 to 1] of --kube-api-qps and --kube-api-burst that status writes may take; the rest is kept for the Lease and the informers")
	statusWriters := fs.Int("status-writers", kubereplica.DefaultStatusWorkers, "status writes in flight at once, at most (the status writer's share of the apiserver's concurrency)")
	maxClasses := fs.Int("max-client-classes", xdscache.DefaultMaxZones,
		"client-locality classes (region/zone) rendered at once for upstreams with localityAffinity; a client of another zone beyond it receives its region's class, and beyond as many region classes the split of clients with no locality (/debug/clients says which)")
	localityGauges := fs.Bool("metrics-locality-gauges", true,
		"export poise_upstream_locality_traffic, a series per (upstream, priority, locality): the most numerous of the per-upstream gauges")
	maxUpstreamGauges := fs.Int("metrics-max-upstreams", metrics.DefaultMaxUpstreams,
		"upstreams with per-upstream gauges, at most (the first seen; 0: none); the others are logged once and have their figures in status and /debug/explain")
	loadCells := fs.Int("load-report-max-cells", loadreport.DefaultMaxCells,
		fmt.Sprintf("hard cap of the load-report store, in cells (one client's counts for one endpoint, %d bytes each); past it the clients that reported least recently are dropped, counted and logged", loadreport.CellBytes))
	checkConcurrency := fs.Int("health-check-concurrency", healthcheck.DefaultConcurrency,
		"active health checks (spec.healthCheck) in flight at once, 1 to 1024; a check due while all are taken waits")
	checkMax := fs.Int("health-check-max-endpoints", healthcheck.DefaultMaxEndpoints,
		"endpoints actively checked at most, all upstreams together, 1 to 100000; the others keep an Unknown check signal and are counted in status.activeChecks.unchecked")
	loadBucket := fs.Duration("load-report-bucket", loadreport.DefaultBucket,
		"for tests and tuning: the load-report store's time bucket, 100ms to 10s; the window of load reports and fleet outlier detection is six buckets, and outlier detection is evaluated once a bucket")
	_ = fs.MarkHidden("load-report-bucket")
	return command(c, func(*cobra.Command, []string) int {
		log, err := newLogger(stderr, *logLevel, *logFormat)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitUsage
		}
		switch {
		case *debounce < 0 || *debounceMax < 0:
			fmt.Fprintln(stderr, "error: --debounce and --debounce-max must not be negative")
			return exitUsage
		case *debounceMax != 0 && *debounceMax < *debounce:
			fmt.Fprintf(stderr, "error: --debounce-max %v is shorter than --debounce %v: a burst could never be applied on quiet\n", *debounceMax, *debounce)
			return exitUsage
		case *settle < 0:
			fmt.Fprintln(stderr, "error: --settle must not be negative")
			return exitUsage
		case *drain < 0:
			fmt.Fprintln(stderr, "error: --drain-period must not be negative")
			return exitUsage
		case *maxStreams < 1 || *maxPerConn < 1:
			fmt.Fprintln(stderr, "error: --xds-max-streams and --xds-max-streams-per-connection must be at least 1")
			return exitUsage
		case *kubeQPS <= 0 || *kubeBurst <= 0:
			fmt.Fprintln(stderr, "error: --kube-api-qps and --kube-api-burst must be positive")
			return exitUsage
		case *remoteStale < kube.MinRemoteStaleAfter || *remoteStale > kube.MaxRemoteStaleAfter:
			fmt.Fprintf(stderr, "error: --remote-stale-after %v: want %v to %v\n", *remoteStale, kube.MinRemoteStaleAfter, kube.MaxRemoteStaleAfter)
			return exitUsage
		case kube.ValidClusterName(*clusterName) != "":
			fmt.Fprintf(stderr, "error: --cluster-name: %s\n", kube.ValidClusterName(*clusterName))
			return exitUsage
		case *maxClasses < 1 || *maxClasses > 4096:
			fmt.Fprintf(stderr, "error: --max-client-classes %d: want 1 to 4096\n", *maxClasses)
			return exitUsage
		case *loadCells < 1 || *loadCells > maxLoadReportCells:
			fmt.Fprintf(stderr, "error: --load-report-max-cells %d: want 1 to %d\n", *loadCells, maxLoadReportCells)
			return exitUsage
		case *checkConcurrency < 1 || *checkConcurrency > 1024:
			fmt.Fprintf(stderr, "error: --health-check-concurrency %d: want 1 to 1024\n", *checkConcurrency)
			return exitUsage
		case *checkMax < 1 || *checkMax > 100000:
			fmt.Fprintf(stderr, "error: --health-check-max-endpoints %d: want 1 to 100000\n", *checkMax)
		case *loadBucket < minLoadReportBucket || *loadBucket > maxLoadReportBucket:
			fmt.Fprintf(stderr, "error: --load-report-bucket %v: want %v to %v\n", *loadBucket, minLoadReportBucket, maxLoadReportBucket)
			return exitUsage
		case *maxUpstreamGauges < 0:
			fmt.Fprintln(stderr, "error: --metrics-max-upstreams must not be negative")
			return exitUsage
		case *statusWriters <= 0:
			fmt.Fprintln(stderr, "error: --status-writers must be positive")
			return exitUsage
		case *statusShare <= 0 || *statusShare > 1:
			fmt.Fprintf(stderr, "error: --status-write-share %v: want a part of the client's budget, above 0 and at most 1\n", *statusShare)
			return exitUsage
		case *source != "files" && *source != "kubernetes":
			fmt.Fprintf(stderr, "error: --source %q: want files or kubernetes\n", *source)
			return exitUsage
		case *source == "files" && len(manifestPaths) == 0:
			fmt.Fprintln(stderr, "error: -f PATH is required (a manifest file or directory)")
			return exitUsage
		case *source == "kubernetes" && len(manifestPaths) > 0:
			fmt.Fprintln(stderr, "error: -f is for --source=files; with --source=kubernetes the topology comes from the cluster")
			return exitUsage
		}
		var tlsCfg *server.TLS
		if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
			tlsCfg = &server.TLS{CertFile: *tlsCert, KeyFile: *tlsKey, ClientCAFile: *tlsCA}
		}
		spatial, err := parseSpatialListener(*spatialListen)
		if err != nil {
			fmt.Fprintf(stderr, "error: --spatial-listener %q: %v\n", *spatialListen, err)
			return exitUsage
		}
		if *maxUpstreamGauges == 0 {
			*maxUpstreamGauges = -1 // Config's zero is the default
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = controlplane.Run(ctx, controlplane.Config{
			Source: *source, Paths: manifestPaths, Kubeconfig: *kubeconfig, Namespace: *namespace, LeaderElectionNamespace: *leNamespace, LeaderElectionID: *leID,
			XDSAddress: *xdsAddr, AdminAddress: *adminAddr, MetricsAddress: *metricsAddr, TLS: tlsCfg, MaxStreams: *maxStreams, MaxStreamsPerConnection: *maxPerConn,
			MaxClientClasses: *maxClasses, LoadReportMaxCells: *loadCells, LoadReportBucket: *loadBucket,
			HealthCheckConcurrency: *checkConcurrency, HealthCheckMaxEndpoints: *checkMax, MetricsNoLocalityGauges: !*localityGauges, MetricsMaxUpstreams: *maxUpstreamGauges,
			DrainPeriod: *drain, Debounce: *debounce, DebounceMax: *debounceMax, Settle: settleOf(*settle), Spatial: spatial,
			KubeQPS: *kubeQPS, KubeBurst: *kubeBurst, StatusShare: *statusShare, StatusWriters: *statusWriters,
			ClusterName: *clusterName, RemoteStaleAfter: *remoteStale, NoRemoteClusters: !*remoteClusters,
			Log: log, Out: stdout, BannerFormat: *logFormat, Version: buildVersion().Version,
		})
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		return exitOK
	})
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

// The bounds of --load-report-bucket: a window of 600 ms to 60 s.
const (
	minLoadReportBucket = 100 * time.Millisecond
	maxLoadReportBucket = 10 * time.Second
)

// maxLoadReportCells bounds --load-report-max-cells: 100,000,000 cells are
// a few GB, beyond any replica's memory limit, so a larger figure is a typo.
const maxLoadReportCells = 100_000_000
