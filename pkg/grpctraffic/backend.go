package grpctraffic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Header is the response header in which a backend names itself
// (host:port): how a client tells who served a call.
const Header = "x-backend"

// Backend is a gRPC health server that answers every Check SERVING, with
// its address in Header.
type Backend struct {
	healthpb.UnimplementedHealthServer
	Addr   string // host:port
	served atomic.Int64
	srv    *grpc.Server
}

// Listen starts a Backend on addr (host:port; port 0 picks one).
func Listen(addr string) (*Backend, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", addr, err)
	}
	b := &Backend{Addr: lis.Addr().String()}
	b.srv = Serve(lis, b)
	return b, nil
}

// Check answers SERVING and names the backend.
func (b *Backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	b.served.Add(1)
	return Answer(ctx, b.Addr, true)
}

// Served is how many calls the backend answered.
func (b *Backend) Served() int64 { return b.served.Load() }

// Stop closes the listener and the connections at once.
func (b *Backend) Stop() { b.srv.Stop() }

// Serve serves h as the gRPC health service on lis, in the background,
// until the returned server is stopped.
func Serve(lis net.Listener, h healthpb.HealthServer) *grpc.Server {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	return srv
}

// Answer is a health answer from the backend at addr: Header set to addr,
// SERVING or NOT_SERVING.
func Answer(ctx context.Context, addr string, serving bool) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(Header, addr)); err != nil {
		return nil, err
	}
	if !serving {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// ErrDropped is a call the client dropped itself, as the published drop
// overload tells it to: it reached no backend.
var ErrDropped = errors.New("dropped by the client")

// Call makes one health Check and says which backend answered it;
// ErrDropped when the client dropped it, another error when it failed or
// the answer named no backend.
func Call(ctx context.Context, client healthpb.HealthClient) (string, error) {
	var md metadata.MD
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	switch {
	case err == nil && len(md.Get(Header)) == 1:
		return md.Get(Header)[0], nil
	case err == nil:
		return "", fmt.Errorf("the answer names no backend (%s: %q)", Header, md.Get(Header))
	case status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "dropped"):
		return "", ErrDropped
	}
	return "", err
}
