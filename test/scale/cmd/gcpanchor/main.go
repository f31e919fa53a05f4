package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The type URLs the anchor mirrors and serves.
const (
	typeCDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gcpanchor:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	mirror, xdsAddress, adminAddress string
	maxMsgBytes                      int
	maxStreams                       uint
	syncTimeout                      time.Duration
	nodeID                           string
	logFormat                        string
}

// Bounds of the flags.
const (
	maxMsgBytesLimit = 1 << 30
	maxStreamsLimit  = 1 << 20
)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gcpanchor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mirror, "mirror", "", "the Poise replica's xDS address, HOST:PORT (plaintext): its clusters and endpoints are mirrored (required)")
	fs.StringVar(&o.xdsAddress, "xds-address", "127.0.0.1:18800", "where the anchor serves ADS (SotW and Delta), HOST:PORT")
	fs.StringVar(&o.adminAddress, "admin-address", "", "optional HOST:PORT serving /metrics (process CPU and RSS) and /readyz (200 once the first mirror sync is in the caches)")
	fs.IntVar(&o.maxMsgBytes, "max-msg-bytes", 256<<20, "largest message received from the replica or sent to a client, in bytes")
	fs.UintVar(&o.maxStreams, "max-streams", 100_000, "concurrent streams a client connection may open")
	fs.DurationVar(&o.syncTimeout, "sync-timeout", 2*time.Minute, "how long the first mirror sync may take before the anchor gives up")
	fs.StringVar(&o.nodeID, "node-id", "gcpanchor-mirror", "the node ID the mirror sends the replica")
	fs.StringVar(&o.logFormat, "log-format", "text", "logs on stderr: text or json")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.mirror == "":
		return nil, errors.New("--mirror is required")
	case o.maxMsgBytes < 1<<10 || o.maxMsgBytes > maxMsgBytesLimit:
		return nil, fmt.Errorf("--max-msg-bytes %d: want 1024 to %d", o.maxMsgBytes, maxMsgBytesLimit)
	case o.maxStreams < 1 || o.maxStreams > maxStreamsLimit:
		return nil, fmt.Errorf("--max-streams %d: want 1 to %d", o.maxStreams, maxStreamsLimit)
	case o.syncTimeout <= 0:
		return nil, fmt.Errorf("--sync-timeout %v: want a positive duration", o.syncTimeout)
	case o.nodeID == "" || len(o.nodeID) > 256:
		return nil, errors.New("--node-id: want 1 to 256 bytes")
	case o.logFormat != "text" && o.logFormat != "json":
		return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	return o, nil
}

func run(args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, o, log)
}

// anchor is go-control-plane's cache of the mirrored resources.
type anchor struct {
	clusters, endpoints *cache.LinearCache
	mux                 *cache.MuxCache
}

func newAnchor() *anchor {
	a := &anchor{clusters: cache.NewLinearCache(typeCDS), endpoints: cache.NewLinearCache(typeEDS)}
	a.mux = &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cache.Cache{typeCDS: a.clusters, typeEDS: a.endpoints},
	}
	return a
}

// serve mirrors the replica and, once the first sync is in the caches,
// serves them until ctx is done.
func serve(ctx context.Context, o *options, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := newAnchor()
	var ready atomic.Bool
	errc := make(chan error, 3)
	if o.adminAddress != "" {
		srv, err := adminServer(o.adminAddress, &ready)
		if err != nil {
			return err
		}
		go func() { errc <- srv.serve(ctx) }()
	}
	m := &mirror{addr: o.mirror, nodeID: o.nodeID, maxMsg: o.maxMsgBytes, a: a, log: log.With("mirror", o.mirror),
		synced: make(chan struct{})}
	go func() { errc <- m.run(ctx) }()
	select {
	case <-m.synced:
	case err := <-errc:
		return err
	case <-time.After(o.syncTimeout):
		return fmt.Errorf("the mirror of %s did not sync in %v", o.mirror, o.syncTimeout)
	case <-ctx.Done():
		return nil
	}
	lis, err := net.Listen("tcp", o.xdsAddress)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(o.maxMsgBytes), grpc.MaxSendMsgSize(o.maxMsgBytes),
		grpc.MaxConcurrentStreams(uint32(o.maxStreams)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, a.mux, serverv3.CallbackFuncs{}))
	go func() { errc <- gs.Serve(lis) }()
	ready.Store(true)
	log.Info("serving", "xds", lis.Addr().String(), "clusters", a.clusters.NumResources(), "endpoints", a.endpoints.NumResources())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	gs.Stop()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// admin serves /metrics (the process collector) and /readyz.
type admin struct {
	lis net.Listener
	srv *http.Server
}

func adminServer(addr string, ready *atomic.Bool) (*admin, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "the first mirror sync is not in the caches yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &admin{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

func (s *admin) serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		_ = s.srv.Close()
	}()
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-ctx.Done()
	return nil
}
