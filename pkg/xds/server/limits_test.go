package server_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/xds/server"
)

// Streams are bounded per connection and in all: one connection that
// opens many streams gets only its share at once (the rest wait in the
// client), and a stream beyond the server's limit ends with
// ResourceExhausted and a message that says which limit, while the
// streams already served keep working.
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, server.Config{MaxStreams: 5, MaxStreamsPerConnection: 3}, nil)
	publishV1(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	try := func(conn *grpc.ClientConn) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		return s, s.Send(&discovery.DiscoveryRequest{TypeUrl: CDS, Node: envoyNode("n")})
	}
	open := func(conn *grpc.ClientConn) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		s, err := try(conn)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return s // io.EOF: the server ended the stream already; Recv tells why
	}
	// 50 streams on one connection: three are served at once
	for range 50 {
		go func() { _, _ = try(h.conn) }() // the ones beyond 3 wait in the client until the test ends
	}
	eventually(t, "three streams served", func() bool { return len(h.clients.List()) == 3 })
	// sleep: a quiet period in which no fourth stream may be served
	time.Sleep(quiet)
	if n := len(h.clients.List()); n != 3 {
		t.Fatalf("one connection holds %d streams, limit 3", n)
	}

	// Other connections fill the server's limit of 5; the next is refused.
	var streams []discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	for i := range 3 {
		conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		s := open(conn)
		if i < 2 {
			r, err := s.Recv()
			if err != nil || r.GetTypeUrl() != CDS {
				t.Fatalf("stream %d within the limit: %v", 4+i, err)
			}
			if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: CDS, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
			continue
		}
		_, err = s.Recv()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "limit of 5 streams") {
			t.Fatalf("the sixth stream: %v, want ResourceExhausted naming the limit", err)
		}
	}
	if n := len(h.clients.List()); n != 5 {
		t.Fatalf("%d streams served, limit 5", n)
	}
	// the streams served still receive publications
	h.apply("v2", both(CDS, entry(t, "v2", cluster("c1", 3))))
	for _, s := range streams {
		if r, err := s.Recv(); err != nil || r.GetVersionInfo() != "v2" {
			t.Fatalf("a served stream after the refusal: %v %v", r.GetVersionInfo(), err)
		}
	}
}
