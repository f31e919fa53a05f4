package server

import (
	"context"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/xds/xdscache"
)

// TLS configures serving xDS over TLS; with ClientCAFile, clients must
// present a certificate signed by it (mTLS). The files are read again when
// they change (see tlsFiles).
type TLS struct {
	CertFile, KeyFile, ClientCAFile string
}

// Config is how the xDS server listens.
type Config struct {
	TLS *TLS
	// Keepalive: how often the server pings an idle client and how long it
	// waits for the answer. Zero means 30s and 10s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxStreams bounds the xDS streams this server holds at once, over
	// every connection; a stream beyond it ends at once with
	// ResourceExhausted, so the client retries (elsewhere, behind a
	// Service). Zero means DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerConnection bounds the streams one HTTP/2 connection may
	// open at once (Envoy and gRPC clients use one ADS stream, or one per
	// type); zero means DefaultMaxStreamsPerConnection.
	MaxStreamsPerConnection int
	// MaxStreamsPerInstance bounds the streams (xDS and LRS) one workload
	// instance holds at once on this server: one pod, proven by its bound
	// token, or one client certificate. Anonymous clients and tokens bound
	// to no pod are not counted. Zero bounds them by MaxStreams alone.
	MaxStreamsPerInstance int
	// Log receives what the server has to say on its own (TLS files that
	// changed); nil means nowhere.
	Log *slog.Logger
	// DrainPeriod is how long a stopping server takes to end its streams:
	// it stops accepting connections, tells clients to go (HTTP/2 GOAWAY),
	// and ends the open streams one at a time spread over the period, so
	// their clients reconnect elsewhere gradually. Zero ends them at once.
	DrainPeriod time.Duration
	// LoadReports, when set, is where the load reports of clients go:
	// the server then also serves LRS (envoy.service.load_stats.v3) on the
	// same port, within the same stream bounds. nil serves no LRS.
	LoadReports LoadReports
	// LoadReportInterval is the load_reporting_interval LRS asks clients
	// for, within MinLoadReportInterval..MaxLoadReportInterval; zero
	// means DefaultLoadReportInterval.
	LoadReportInterval time.Duration
	// Authenticator, when set, resolves who the client of every RPC (ADS,
	// the per-type services, SotW, Delta, Fetch and LRS) is before its
	// handler runs, refuses those it cannot prove, and binds the node's
	// namespace and service-account claims to the identity. When a
	// stream's proof expires it proves itself again with the credentials it
	// was opened with (a token whose review interval ended is reviewed
	// again), and ends with the refusal when they no longer hold. The
	// identity is on the RPC's context (IdentityFrom). nil: every client is
	// anonymous.
	Authenticator *identity.Authenticator
	// Audience resolves who the client of a stream or unary Fetch is, from
	// its call (the transport's identity, never the node message), before
	// anything is sent to it: it is sent only what that audience may read.
	// An error refuses the call, with the error's gRPC status when it has
	// one, else PermissionDenied. nil makes every client anonymous: it reads
	// only what is visible to every namespace.
	Audience func(ctx context.Context) (Audience, error)
	// DemandGrant is the most a proven (not anonymous) identity may claim
	// as its demand weight in a Balanced upstream: a claim above it counts
	// as it. Zero, or a nil DemandGrant, grants 1; an anonymous client's
	// claim is not capped.
	DemandGrant func(identity.Identity) uint64
}

// Audience is who a client is for what it may read: the namespace its
// identity proves, or anonymous (the zero value).
type Audience = xdscache.Audience

// Server is an xDS gRPC server; Serve runs it.
type Server struct {
	g     *grpc.Server
	x     *xdsServer
	tls   *tlsFiles // nil without TLS
	drain time.Duration
}

// The defaults: 25,000 streams is the fleet one replica was measured to
// carry on two cores (make bench-fleet: 25,000 clients on 5,000 upstreams,
// about 85 KiB of RSS each, docs/performance.md); 100 streams per
// connection leaves room for per-type streams and clients that multiplex.
const (
	DefaultMaxStreams              = 25000
	DefaultMaxStreamsPerConnection = 100
)

// New builds a gRPC server that serves ADS (SotW and Delta) and the
// per-type discovery services from cache, recording clients in clients.
func New(cache *xdscache.Cache, clients *Clients, cfg Config) (*Server, error) {
	kt, kto := cfg.KeepaliveTime, cfg.KeepaliveTimeout
	if kt == 0 {
		kt = 30 * time.Second
	}
	if kto == 0 {
		kto = 10 * time.Second
	}
	maxStreams, perConn := cfg.MaxStreams, cfg.MaxStreamsPerConnection
	if maxStreams <= 0 {
		maxStreams = DefaultMaxStreams
	}
	if perConn <= 0 {
		perConn = DefaultMaxStreamsPerConnection
	}
	perInstance := max(cfg.MaxStreamsPerInstance, 0)
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(min(perConn, 1<<20))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: kt, Timeout: kto}),
		// Envoy pings every few seconds when configured to; do not punish it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(newCodec()),
		// A SotW client repeats its whole subscription in every ACK (80 KB
		// for 5,000 names): read it in one system call rather than three
		// (gRPC takes read buffers from a pool only when data is ready, so
		// idle connections hold none), and let it arrive without waiting
		// for flow-control updates. Write buffers go back to the pool after
		// each flush, so a thousand idle clients do not each keep one.
		grpc.ReadBufferSize(128 << 10),
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.SharedWriteBuffer(true),
	}
	var files *tlsFiles
	if cfg.TLS != nil {
		var err error
		if files, err = newTLSFiles(*cfg.TLS, cfg.Log); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(files.serverConfig())))
	}
	x := &xdsServer{authn: cfg.Authenticator, cache: cache, clients: clients, names: newNameBlocks(maxNameBlockBytes), maxStreams: int64(maxStreams),
		perInstance: map[string]int{}, maxPerInstance: perInstance, leaving: map[*leaver]struct{}{}, draining: make(chan struct{}), large: semaphore.NewWeighted(maxLargeInFlight), bodies: newBodyCache(),
		loads: cfg.LoadReports, loadInterval: loadReportInterval(cfg.LoadReportInterval), audience: cfg.Audience, demandGrant: cfg.DemandGrant}
	// every RPC passes the identity check first (see authStream)
	opts = append(opts, grpc.ChainStreamInterceptor(x.authStream), grpc.ChainUnaryInterceptor(x.authUnary))
	g := grpc.NewServer(opts...)
	x.register(g)
	return &Server{g: g, x: x, tls: files, drain: cfg.DrainPeriod}, nil
}

// Serve serves s on lis until ctx is done, then drains it (see
// Config.DrainPeriod) and returns once every stream has ended.
func Serve(ctx context.Context, s *Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// GracefulStop closes the listener, sends GOAWAY on every connection
	// and waits for the streams, which drain ends one by one.
	stopped := make(chan struct{})
	go func() { s.g.GracefulStop(); close(stopped) }()
	deadline, cancel := context.WithTimeout(context.Background(), s.drain+time.Second)
	defer cancel()
	s.x.drain(deadline, s.drain)
	select {
	case <-stopped:
	case <-deadline.Done():
		s.g.Stop() // a handler that would not end
	}
	return nil
}
