package server_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// Stopping drains: no new connection is taken, and the open streams end
// one at a time over the drain period with Unavailable (so their clients
// reconnect elsewhere, not all at once); Serve returns when they have.
func TestDrain(t *testing.T) {
	const streams, period = 4, 1200 * time.Millisecond
	cache := xdscache.New(2, func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	e, err := xdscache.NewEntry("c1", "v1", cluster("c1", 1))
	if err != nil {
		t.Fatal(err)
	}
	cache.Apply(xdscache.Update{Version: "v1", Changes: both(resource.ClusterType, e)})
	s, err := server.New(cache, server.NewClients(nil, nil), server.Config{DrainPeriod: period})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, s, lis) }()

	type end struct {
		at  time.Time
		err error
	}
	ends := make(chan end, streams)
	for i := range streams {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: envoyNode("n")}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		go func() {
			_, err := st.Recv()
			ends <- end{time.Now(), err}
		}()
	}
	stop()
	var got []end
	for range streams {
		select {
		case e := <-ends:
			got = append(got, e)
		case <-time.After(period + 3*time.Second):
			t.Fatal("a stream did not end")
		}
	}
	slices.SortFunc(got, func(a, b end) int { return a.at.Compare(b.at) })
	for _, e := range got {
		if status.Code(e.err) != codes.Unavailable || !strings.Contains(status.Convert(e.err).Message(), "shutting down") {
			t.Fatalf("a stream ended with %v, want Unavailable saying the server is shutting down", e.err)
		}
	}
	// spread: the last ends about (streams-1)/streams of the period after the first
	if spread, want := got[len(got)-1].at.Sub(got[0].at), period*(streams-1)/streams; spread < want*3/4 || spread > period+time.Second {
		t.Fatalf("streams ended over %v, want about %v", spread, want)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	// and no new connection is taken
	conn, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second)
	if err == nil {
		conn.Close()
		t.Fatal("a connection was accepted after the drain")
	}
}
