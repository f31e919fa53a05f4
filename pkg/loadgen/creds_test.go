package loadgen

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestTokenSent: a client with a token presents it as a bearer token on its
// stream, as a projected service-account token is presented; a plane that
// refuses the stream fails the fleet, naming the client.
func TestTokenSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		select {
		case got <- md.Get("authorization"):
		default:
		}
		return status.Error(codes.Unauthenticated, "refused for the test")
	}))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	specs := []Spec{{Node: NodeShape{Kind: GRPC, ID: "grpc-tok"}, Subscribe: []int32{0}, Token: "s3cret"}}
	f, err := NewFleet(lis.Addr().String(), []string{"shop/web"}, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	select {
	case v := <-got:
		if len(v) != 1 || v[0] != "Bearer s3cret" {
			t.Errorf("authorization %q, want [Bearer s3cret]", v)
		}
	case <-ctx.Done():
		t.Fatal("no stream arrived")
	}
	select {
	case <-f.Failed():
	case <-ctx.Done():
		t.Fatal("the refused stream did not fail the fleet")
	}
	if err := f.Err(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("fleet error %v, want the plane's Unauthenticated", err)
	}
}
