package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"poise.dev/poise/pkg/loadgen"
)

// Bounds of load's flags (flagBounds and docs/cli.md repeat them).
const (
	maxLoadClients      = 100000
	maxLoadProcs        = 64
	maxLoadLocalities   = 1000
	maxLoadStreams      = 100
	maxLoadSkew         = 10
	maxLoadRate         = 100000
	maxLoadDuration     = 24 * time.Hour
	maxLoadDrain        = time.Hour
	minLoadSyncTimeout  = time.Second
	maxLoadSyncTimeout  = time.Hour
	maxLoadIdle         = time.Minute
	maxLoadSettle       = 10 * time.Minute
	maxLoadPid          = 1 << 22 // Linux's pid_max limit
	maxLoadCredentials  = 1 << 20 // bytes read of a token, certificate, key or CA file
	defaultLoadUpstream = 50
)

type loadOptions struct {
	xdsAddress, adminAddress string
	pid                      int
	envoy, grpc              int
	deltaPercent             int
	envoyClusters            string
	grpcClusters             string
	hot                      int
	skew                     float64
	localities               int
	streamsPerConn           int
	metadata                 map[string]string
	sample                   string
	seed                     uint64
	tokenFile                string
	tlsCert, tlsKey, tlsCA   string
	tlsServerName            string
	churn                    string
	tree                     string
	upstreams                int
	generateOnly             bool
	reconnect                bool
	kubeconfig, context      string
	namespace                string
	rate                     float64
	duration, drain, idle    time.Duration
	settle                   time.Duration
	phases                   []string
	profileDir               string
	syncTimeout              time.Duration
	procs                    int
	output, plot             string
	logFormat                string
	worker                   string // hidden: "I/N", this process is worker I of N
	clustersFile             string // hidden: a worker's cluster names, from its parent
}

func newLoadCmd(stdout, stderr io.Writer) *cobra.Command {
	var o loadOptions
	c := &cobra.Command{
		Use:   "load --xds-address HOST:PORT [--churn files --tree DIR | --churn kube]",
		Short: "Simulate an xDS fleet against a plane: convergence, CPU, RSS",
		Long: `load connects simulated xDS clients to a running control plane, as a fleet of
Envoys and proxyless gRPC clients would: Envoy-like clients subscribe to CDS as
a wildcard and EDS by name, gRPC-like clients send grpc-go's node (its user
agent, client features and locality) and subscribe by name to their targets'
listeners, routes, clusters and endpoints, so the plane renders them per
endpoint. Each client ACKs everything, and records when each resource it
subscribed to changed and a hash of its content.

Subscriptions follow the flags (a few hot clusters every client uses, a long
tail drawn by popularity) or copy a live fleet's shapes (--sample: the admin
port's /debug/clients, or a file holding its answer). With --churn files, load
writes a manifest tree of --upstreams upstreams under --tree (serve it with
controlplane serve -f DIR/manifests) and flips one endpoint of an upstream at
a time by renaming its file; with --churn kube it updates the EndpointSlices
of the Services that Upstreams import, through the apiserver. Each change is
written --rate times a second for --duration.

The report gives the time from each change to each subscriber's receipt
(p50, p90, p99, max), and with --pid (a plane on this machine) or
--admin-address (its /metrics) the plane's CPU and RSS, and its CPU per
change and per client per change. --procs spreads the clients over worker
processes (this command again), so the generator never runs out of file
descriptors first. docs/performance.md says how to size a fleet with it.`,
		Example: `  # a tree of 500 upstreams, served by a staging replica on this machine
  controlplane load --tree /tmp/fleet --upstreams 500 --generate-only
  controlplane serve -f /tmp/fleet/manifests &
  controlplane load --xds-address 127.0.0.1:18000 --admin-address 127.0.0.1:19000 \
    --churn files --tree /tmp/fleet --upstreams 500 --envoy 1000 --grpc 4000 \
    --rate 50 --duration 60s --procs 4 --plot convergence.svg`,
		Args: cobra.NoArgs,
	}
	fs := c.Flags()
	fs.StringVar(&o.xdsAddress, "xds-address", "", "the plane's xDS address, HOST:PORT (required unless --generate-only)")
	fs.StringVar(&o.adminAddress, "admin-address", "", "the plane's admin address, HOST:PORT: its /metrics give its CPU and RSS when --pid does not")
	fs.IntVar(&o.pid, "pid", 0, "the plane's process ID on this machine: its CPU and RSS are read from /proc (0: none)")
	fs.IntVar(&o.envoy, "envoy", 100, "Envoy-like clients (0 to 100000)")
	fs.IntVar(&o.grpc, "grpc", 100, "gRPC-like clients (0 to 100000)")
	fs.IntVar(&o.deltaPercent, "delta-percent", 50, "percent of each kind's clients that speak Delta xDS, the others SotW")
	fs.StringVar(&o.envoyClusters, "envoy-clusters", "50-500", "clusters each Envoy-like client subscribes to: N or MIN-MAX (at most the clusters there are)")
	fs.StringVar(&o.grpcClusters, "grpc-clusters", "1-5", "clusters each gRPC-like client subscribes to: N or MIN-MAX")
	fs.IntVar(&o.hot, "hot", 3, "the first clusters, which every client subscribes to")
	fs.Float64Var(&o.skew, "skew", 1, "popularity of the other clusters: the cluster of rank r weighs 1/(r+1)^skew (0 uniform, 1 Zipf)")
	fs.IntVar(&o.localities, "localities", 3, "the clients' zones are spread over this many localities")
	fs.IntVar(&o.streamsPerConn, "streams-per-connection", 1, "streams gRPC-like clients share a connection with (a pod with two channels: 2)")
	fs.StringToStringVar(&o.metadata, "metadata", nil, "KEY=VALUE pairs in every client's node metadata")
	fs.StringVar(&o.sample, "sample", "", "copy the clients' shapes from a live fleet: an admin URL (http://HOST:PORT, its /debug/clients) or a file of that answer")
	fs.Uint64Var(&o.seed, "seed", 1, "the seed the subscriptions are drawn with")
	fs.StringVar(&o.tokenFile, "token-file", "", "send this file's token as a bearer token on every stream")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "client certificate (PEM) for mTLS, with --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the client certificate's key (PEM)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "connect over TLS, trusting this CA (PEM) for the plane's certificate")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "the name the plane's certificate must carry (default: the host of --xds-address)")
	fs.StringVar(&o.churn, "churn", "none", "what changes endpoints: none, files (the tree under --tree) or kube (EndpointSlices through the apiserver)")
	fs.StringVar(&o.tree, "tree", "", "with --churn files: the directory of the generated tree (DIR/manifests is what the plane serves)")
	fs.IntVar(&o.upstreams, "upstreams", defaultLoadUpstream, "upstreams of the generated tree, 20 endpoints each (1 to 62500)")
	fs.BoolVar(&o.generateOnly, "generate-only", false, "write the tree under --tree and exit")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "with --churn kube: the kubeconfig (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "with --churn kube: the kubeconfig context")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "with --churn kube: the namespace of the Upstreams whose Services are changed (default every namespace)")
	fs.Float64Var(&o.rate, "rate", 10, "changes written per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long changes are written (0: none, only the start is measured)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "after the last change, how long its deliveries are awaited")
	fs.BoolVar(&o.reconnect, "reconnect", true, "a client whose stream ends opens another after 50-150 ms, a Delta one telling the plane what it holds "+
		"(initial_resource_versions), as Envoy and gRPC do (false: a stream's end fails the run)")
	fs.StringArrayVar(&o.phases, "phase", nil, "a phase of changes, NAME:SELECT:RATE:DURATION, repeated for several in order on the same fleet: SELECT all "+
		"(every cluster in turn), hot (the hot clusters every client uses) or share=PERCENT (the 8 clusters whose subscribers are nearest that percent of the clients); "+
		"each phase waits up to --drain for its deliveries and is reported on its own (instead of --rate and --duration)")
	fs.DurationVar(&o.settle, "settle", 0, "after every client synced, a quiet wait before the plane's live heap and idle CPU are read")
	fs.StringVar(&o.profileDir, "profile-dir", "", "write the plane's heap profile after the start and a CPU profile of each phase here (needs --admin-address)")
	fs.DurationVar(&o.idle, "idle", 2*time.Second, "before the changes, the quiet interval over which the plane's idle CPU is measured")
	fs.DurationVar(&o.syncTimeout, "sync-timeout", 5*time.Minute, "how long every client may take to hold its subscription")
	fs.IntVar(&o.procs, "procs", 1, "processes the clients are spread over (this command, re-executed)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.StringVar(&o.plot, "plot", "", "also write the convergence CDF as an SVG image to this file")
	fs.StringVar(&o.logFormat, "log-format", "text", "progress on stderr: text or json")
	fs.StringVar(&o.worker, "worker", "", "run as worker I/N of a load with --procs N (set by load itself)")
	_ = fs.MarkHidden("worker")
	fs.StringVar(&o.clustersFile, "clusters-file", "", "the clusters' names, one a line (set by load for its workers, so that they do not ask the apiserver again)")
	_ = fs.MarkHidden("clusters-file")
	return command(c, func(cmd *cobra.Command, _ []string) int {
		return runLoad(cmd.Context(), o, stdout, stderr)
	})
}

// span is a MIN-MAX flag's value.
type span struct{ lo, hi int }

// parseSpan reads N or MIN-MAX, each 1 to limit.
func parseSpan(flag, v string, limit int) (span, error) {
	a, b, isRange := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi := lo
	var err2 error
	if isRange {
		hi, err2 = strconv.Atoi(strings.TrimSpace(b))
	}
	if err1 != nil || err2 != nil || lo < 1 || hi < lo || hi > limit {
		return span{}, fmt.Errorf("--%s %q: want N or MIN-MAX, 1 <= MIN <= MAX <= %d", flag, v, limit)
	}
	return span{lo, hi}, nil
}

// check refuses flags out of their bounds, naming the flag.
func (o *loadOptions) check() error {
	type bound struct {
		flag     string
		ok       bool
		want     string
		hasValue any
	}
	for _, b := range []bound{
		{"envoy", o.envoy >= 0 && o.envoy <= maxLoadClients, fmt.Sprintf("0 to %d", maxLoadClients), o.envoy},
		{"grpc", o.grpc >= 0 && o.grpc <= maxLoadClients, fmt.Sprintf("0 to %d", maxLoadClients), o.grpc},
		{"delta-percent", o.deltaPercent >= 0 && o.deltaPercent <= 100, "0 to 100", o.deltaPercent},
		{"hot", o.hot >= 0 && o.hot <= loadgen.MaxUpstreams, fmt.Sprintf("0 to %d", loadgen.MaxUpstreams), o.hot},
		{"skew", o.skew >= 0 && o.skew <= maxLoadSkew, fmt.Sprintf("0 to %d", maxLoadSkew), o.skew},
		{"localities", o.localities >= 1 && o.localities <= maxLoadLocalities, fmt.Sprintf("1 to %d", maxLoadLocalities), o.localities},
		{"streams-per-connection", o.streamsPerConn >= 1 && o.streamsPerConn <= maxLoadStreams, fmt.Sprintf("1 to %d", maxLoadStreams), o.streamsPerConn},
		{"upstreams", o.upstreams >= 1 && o.upstreams <= loadgen.MaxUpstreams, fmt.Sprintf("1 to %d", loadgen.MaxUpstreams), o.upstreams},
		{"pid", o.pid >= 0 && o.pid <= maxLoadPid, fmt.Sprintf("0 to %d", maxLoadPid), o.pid},
		{"rate", o.rate > 0 && o.rate <= maxLoadRate, fmt.Sprintf("above 0, at most %d", maxLoadRate), o.rate},
		{"duration", o.duration >= 0 && o.duration <= maxLoadDuration, "0s to " + maxLoadDuration.String(), o.duration},
		{"drain", o.drain >= 0 && o.drain <= maxLoadDrain, "0s to " + maxLoadDrain.String(), o.drain},
		{"idle", o.idle >= 0 && o.idle <= maxLoadIdle, "0s to " + maxLoadIdle.String(), o.idle},
		{"settle", o.settle >= 0 && o.settle <= maxLoadSettle, "0s to " + maxLoadSettle.String(), o.settle},
		{"phase", len(o.phases) <= loadgen.MaxPhases, fmt.Sprintf("at most %d phases", loadgen.MaxPhases), len(o.phases)},
		{"sync-timeout", o.syncTimeout >= minLoadSyncTimeout && o.syncTimeout <= maxLoadSyncTimeout,
			minLoadSyncTimeout.String() + " to " + maxLoadSyncTimeout.String(), o.syncTimeout},
		{"procs", o.procs >= 1 && o.procs <= maxLoadProcs, fmt.Sprintf("1 to %d", maxLoadProcs), o.procs},
	} {
		if !b.ok {
			return fmt.Errorf("--%s %v: want %s", b.flag, b.hasValue, b.want)
		}
	}
	if o.envoy+o.grpc == 0 && !o.generateOnly {
		return errors.New("--envoy 0 --grpc 0: want at least one client")
	}
	switch o.churn {
	case "none", "kube":
	case "files":
		if o.tree == "" {
			return errors.New("--churn files needs --tree DIR: where the tree the plane serves is written")
		}
	default:
		return fmt.Errorf("--churn %q: want none, files or kube", o.churn)
	}
	for _, v := range o.phases {
		if _, err := loadgen.ParsePhase(v); err != nil {
			return fmt.Errorf("--%w", err)
		}
	}
	if len(o.phases) > 0 && o.churn == "none" {
		return errors.New("--phase changes clusters: give --churn files or --churn kube")
	}
	if o.profileDir != "" && o.adminAddress == "" {
		return errors.New("--profile-dir needs --admin-address: the profiles are read from the plane's admin port")
	}
	if o.generateOnly && o.tree == "" {
		return errors.New("--generate-only needs --tree DIR")
	}
	if !o.generateOnly && o.xdsAddress == "" {
		return errors.New("--xds-address HOST:PORT is required: the plane's xDS address")
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("-o %q: want text or json", o.output)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	if _, _, err := o.workerIndex(); err != nil {
		return err
	}
	return nil
}

// workerIndex is --worker's I and N (0 and 0 without it).
func (o *loadOptions) workerIndex() (i, n int, err error) {
	if o.worker == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(o.worker, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || n > maxLoadProcs || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("--worker %q: want I/N, 0 <= I < N <= %d", o.worker, maxLoadProcs)
	}
	return i, n, nil
}

func runLoad(ctx context.Context, o loadOptions, stdout, stderr io.Writer) int {
	if err := o.check(); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// Interrupted, the run ends its clients and its workers (whose
	// commands end with ctx) before it returns.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h).With("command", "load")
	if wi, _, _ := o.workerIndex(); o.worker != "" {
		log = log.With("worker", wi)
	}
	cfg, code := o.config(ctx, log, stderr)
	if code != exitOK {
		return code
	}
	if o.generateOnly {
		fmt.Fprintf(stdout, "wrote %d upstreams to %s: serve them with controlplane serve -f %s\n",
			o.upstreams, filepath.Join(o.tree, "manifests"), filepath.Join(o.tree, "manifests"))
		return exitOK
	}
	if o.worker != "" {
		i, n, _ := o.workerIndex()
		specs, err := cfg.Share(i, n)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		f, err := loadgen.NewFleet(cfg.Addr, cfg.Clusters, specs, log)
		if err == nil {
			f.Reconnect = cfg.Reconnect
			err = loadgen.RunWorker(ctx, f, os.Stdin, stdout)
		}
		if err != nil {
			log.Error("worker failed", "err", err)
			return exitInvalid
		}
		return exitOK
	}
	if o.procs > 1 {
		sampleFile, err := o.saveSample(cfg.Pattern.Sample)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		if sampleFile != "" {
			defer os.Remove(sampleFile)
		}
		var extra []string
		if sampleFile != "" {
			extra = append(extra, "--sample", sampleFile)
		}
		if o.churn == "kube" {
			// The workers name the clusters the parent found; each
			// listing them again would cost the apiserver a List per
			// Upstream per worker.
			clustersFile, err := saveClusters(cfg.Clusters)
			if err != nil {
				fmt.Fprintf(stderr, "error: %v\n", err)
				return exitInvalid
			}
			defer os.Remove(clustersFile)
			extra = append(extra, "--clusters-file", clustersFile)
		}
		cfg.StartWorker = func(ctx context.Context, i, n int) (loadgen.Worker, error) {
			return startLoadWorker(ctx, i, n, extra, stderr)
		}
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	if o.plot != "" {
		f, err := os.Create(o.plot)
		if err == nil {
			err = errors.Join(rep.WriteSVG(f), f.Close())
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: --plot %s: %v\n", o.plot, err)
			return exitInvalid
		}
	}
	return writeReport(o.output, stdout, stderr, rep, func() error { return rep.WriteText(stdout) })
}

// config is the run the flags describe: the clusters, the churn, the
// pattern, the credentials and the probe of the plane.
func (o *loadOptions) config(ctx context.Context, log *slog.Logger, stderr io.Writer) (loadgen.Config, int) {
	cfg := loadgen.Config{Addr: o.xdsAddress, Rate: o.rate, Duration: o.duration, Drain: o.drain, Idle: o.idle, Settle: o.settle,
		SyncTimeout: o.syncTimeout, Procs: o.procs, Log: log, Reconnect: o.reconnect, ProfileDir: o.profileDir}
	for _, v := range o.phases {
		ph, _ := loadgen.ParsePhase(v) // check() read each
		cfg.Phases = append(cfg.Phases, ph)
	}
	fail := func(code int, err error) (loadgen.Config, int) {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return cfg, code
	}
	worker := o.worker != ""
	switch {
	case o.churn == "files" || o.generateOnly:
		var t *loadgen.Tree
		var err error
		if worker {
			t = &loadgen.Tree{N: o.upstreams} // the parent writes; the worker only names
		} else if t, err = loadgen.Generate(o.tree, o.upstreams); err != nil {
			return fail(exitInvalid, fmt.Errorf("--tree %s: %w", o.tree, err))
		}
		if o.churn == "files" {
			cfg.Churn = loadgen.FileChurn{Tree: t}
		}
		cfg.Clusters = loadgen.FileChurn{Tree: t}.Clusters()
	case o.churn == "kube" && worker && o.clustersFile != "":
		names, err := readClusters(o.clustersFile)
		if err != nil {
			return fail(exitInvalid, err)
		}
		cfg.Clusters = names // the parent changes them; the worker only names
	case o.churn == "kube":
		rc, err := kubeContext(o.kubeconfig, o.context)
		if err != nil {
			return fail(exitUsage, err)
		}
		// The churn's pace is --rate's (or the fastest phase's), not
		// client-go's default of 5 requests a second.
		fastest := o.rate
		for _, ph := range cfg.Phases {
			fastest = max(fastest, ph.Rate)
		}
		rc.QPS, rc.Burst = float32(2*fastest+20), int(4*fastest+40)
		kc, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fail(exitUsage, err)
		}
		dc, err := dynamic.NewForConfig(rc)
		if err != nil {
			return fail(exitUsage, err)
		}
		ch, err := loadgen.NewKubeChurn(ctx, kc, dc, o.namespace)
		if err != nil {
			return fail(exitInvalid, err)
		}
		cfg.Churn, cfg.Clusters = ch, ch.Clusters()
	default:
		cfg.Clusters = loadgen.FileChurn{Tree: &loadgen.Tree{N: o.upstreams}}.Clusters()
	}
	if o.generateOnly {
		return cfg, exitOK
	}
	// A span past the clusters there are is cut to them.
	limit := len(cfg.Clusters)
	envoySpan, err := parseSpan("envoy-clusters", o.envoyClusters, loadgen.MaxUpstreams)
	if err != nil {
		return fail(exitUsage, err)
	}
	grpcSpan, err := parseSpan("grpc-clusters", o.grpcClusters, loadgen.MaxUpstreams)
	if err != nil {
		return fail(exitUsage, err)
	}
	cfg.Pattern = loadgen.Pattern{Envoy: o.envoy, GRPC: o.grpc, DeltaPercent: o.deltaPercent,
		EnvoyMin: min(envoySpan.lo, limit), EnvoyMax: min(envoySpan.hi, limit), GRPCMin: min(grpcSpan.lo, limit), GRPCMax: min(grpcSpan.hi, limit),
		Hot: min(o.hot, limit), Skew: o.skew, Localities: o.localities, StreamsPerConn: o.streamsPerConn, Metadata: o.metadata, Seed: o.seed}
	if o.sample != "" {
		if cfg.Pattern.Sample, err = readSample(ctx, o.sample); err != nil {
			return fail(exitInvalid, fmt.Errorf("--sample %s: %w", o.sample, err))
		}
	}
	if cfg.TLS, cfg.Token, err = o.credentials(); err != nil {
		return fail(exitInvalid, err)
	}
	if !worker {
		cfg.Plane = loadgen.PlaneProbe{Pid: o.pid}
		if o.adminAddress != "" {
			cfg.Plane.AdminURL = "http://" + o.adminAddress
		}
	}
	return cfg, exitOK
}

// readSample reads a /debug/clients answer from an admin URL or a file.
func readSample(ctx context.Context, from string) ([]loadgen.SampleClient, error) {
	if strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://") {
		return loadgen.FetchSample(ctx, strings.TrimSuffix(strings.TrimSuffix(from, "/"), "/debug/clients"), nil)
	}
	f, err := os.Open(from)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return loadgen.ParseSample(f)
}

// saveSample writes the sample the workers copy to a file of their own, so
// that all of them copy the same fleet; "" without one.
func (o *loadOptions) saveSample(sample []loadgen.SampleClient) (string, error) {
	if len(sample) == 0 {
		return "", nil
	}
	f, err := os.CreateTemp("", "poise-load-sample-*.json")
	if err != nil {
		return "", err
	}
	err = json.NewEncoder(f).Encode(map[string]any{"clients": sample})
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// saveClusters writes the cluster names, one a line, to a file for the
// workers.
func saveClusters(names []string) (string, error) {
	f, err := os.CreateTemp("", "poise-load-clusters-*.txt")
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(f, strings.Join(names, "\n")+"\n")
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// maxClusterName bounds one line of --clusters-file: NAMESPACE/NAME.
const maxClusterName = 63 + 1 + 253

// readClusters reads --clusters-file: at most loadgen.MaxUpstreams names.
func readClusters(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--clusters-file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxClusterName+1)
	var names []string
	for sc.Scan() {
		if len(names) == loadgen.MaxUpstreams {
			return nil, fmt.Errorf("--clusters-file %s: more than %d names", path, loadgen.MaxUpstreams)
		}
		if sc.Text() != "" {
			names = append(names, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--clusters-file %s: %w", path, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--clusters-file %s: no names", path)
	}
	return names, nil
}

// readBounded reads a credentials file of at most maxLoadCredentials bytes.
func readBounded(flag, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLoadCredentials+1))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	if len(b) > maxLoadCredentials {
		return nil, fmt.Errorf("--%s %s: longer than %d bytes", flag, path, maxLoadCredentials)
	}
	return b, nil
}

// credentials are the TLS configuration and token the flags give.
func (o *loadOptions) credentials() (*tls.Config, string, error) {
	var token string
	if o.tokenFile != "" {
		b, err := readBounded("token-file", o.tokenFile)
		if err != nil {
			return nil, "", err
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, "", fmt.Errorf("--token-file %s: empty", o.tokenFile)
		}
	}
	if o.tlsCA == "" && o.tlsCert == "" {
		return nil, token, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.tlsServerName}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(o.xdsAddress)
		if err != nil {
			return nil, "", fmt.Errorf("--xds-address %q: %w", o.xdsAddress, err)
		}
		cfg.ServerName = host
	}
	if o.tlsCA != "" {
		b, err := readBounded("tls-ca", o.tlsCA)
		if err != nil {
			return nil, "", err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(b) {
			return nil, "", fmt.Errorf("--tls-ca %s: no PEM certificate", o.tlsCA)
		}
	}
	if o.tlsCert != "" {
		certPEM, err := readBounded("tls-cert", o.tlsCert)
		if err != nil {
			return nil, "", err
		}
		keyPEM, err := readBounded("tls-key", o.tlsKey)
		if err != nil {
			return nil, "", err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, "", fmt.Errorf("--tls-cert %s, --tls-key %s: %w", o.tlsCert, o.tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, token, nil
}

// startLoadWorker runs this command again as worker i of n: the same
// command line, with --worker (and --sample of the parent's copy).
// workerEnv is a worker's environment: the parent's, and unless the user
// set GOMAXPROCS, the machine's cores shared among the n workers (at least
// one each). n processes each running as many threads as there are cores
// spin for work they do not have, and take the cores from the plane under
// test beside them.
func workerEnv(env []string, cpus, n int) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			return env
		}
	}
	return append(slices.Clone(env), "GOMAXPROCS="+strconv.Itoa(max(cpus/n, 1)))
}

func startLoadWorker(ctx context.Context, i, n int, extra []string, stderr io.Writer) (loadgen.Worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return loadgen.Worker{}, err
	}
	args := append(append([]string(nil), os.Args[1:]...), "--worker", fmt.Sprintf("%d/%d", i, n))
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = stderr
	cmd.Env = workerEnv(os.Environ(), runtime.NumCPU(), n)
	in, err := cmd.StdinPipe()
	if err != nil {
		return loadgen.Worker{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return loadgen.Worker{}, err
	}
	if err := cmd.Start(); err != nil {
		return loadgen.Worker{}, err
	}
	return loadgen.Worker{In: in, Out: out, Wait: cmd.Wait}, nil
}
