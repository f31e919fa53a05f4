package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/testkit"
)

// A client's connect and disconnect are logged at INFO with who it is and
// where it is placed.
func TestClientConnectLogged(t *testing.T) {
	t.Parallel()
	var log testkit.Logs
	h := newHarnessWith(t, server.Config{}, slog.New(slog.NewJSONHandler(&log, nil)))
	publishV1(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := envoyNode("envoy-7")
	n.Locality = &core.Locality{Region: "eu-west", Zone: "eu-west-1a"}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: CDS, Node: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, "the stream closed", func() bool { return len(h.clients.List()) == 0 })
	up := log.Records(t, "xDS client connected")
	down := log.Records(t, "xDS client disconnected")
	if len(up) != 1 || len(down) != 1 {
		t.Fatalf("connects %v, disconnects %v", up, down)
	}
	for k, v := range map[string]any{"level": "INFO", "node": "envoy-7", "kind": "envoy", "protocol": "sotw", "stream": 1.0,
		"audience": "anonymous", "principal": "", "zone": "eu-west/eu-west-1a", "zoneFrom": "node"} {
		if up[0][k] != v {
			t.Errorf("connect %s = %v, want %v", k, up[0][k], v)
		}
	}
	if d := down[0]; d["node"] != "envoy-7" || d["kind"] != "envoy" || d["zone"] != "eu-west/eu-west-1a" || d["connectedFor"] == "" {
		t.Errorf("disconnect %v", d)
	}
}

// A burst of 1,000 clients connecting and leaving writes at most the
// budget's lines a period and, at the end of each period whose budget ran
// out, one line counting the rest: every connect and disconnect is
// accounted for, in a few dozen lines.
func TestClientConnectBurstBounded(t *testing.T) {
	t.Parallel()
	const clients, conns = 1000, 10
	const period = time.Second
	var log testkit.Logs
	h := newHarnessWith(t, server.Config{}, slog.New(slog.NewJSONHandler(&log, nil)))
	server.SetClientLogEvery(h.clients, period)
	publishV1(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range conns {
		conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for i := range clients / conns {
			wg.Go(func() {
				s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
				if err == nil {
					err = s.Send(&discovery.DiscoveryRequest{TypeUrl: CDS, Node: envoyNode(fmt.Sprintf("envoy-%d-%d", c, i))})
				}
				if err == nil {
					_, err = s.Recv()
				}
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(h.clients.List()); n != clients {
		t.Fatalf("%d clients connected, want %d", n, clients)
	}
	cancel()
	eventually(t, "every stream closed", func() bool { return len(h.clients.List()) == 0 })
	elapsed := time.Since(began)

	// The line counting the last period's rest comes at the period's end:
	// wait for the lines to account for every connect and disconnect (a
	// line too many or a count too high fails below).
	var up, down, rest []map[string]any
	connects, disconnects := 0, 0
	testkit.Eventually(t, period+recvTimeout, "the lines account for every connect and disconnect", func() (bool, string) {
		up = log.Records(t, "xDS client connected")
		down = log.Records(t, "xDS client disconnected")
		rest = log.Records(t, "xDS client connects and disconnects not logged one by one")
		connects, disconnects = len(up), len(down)
		for _, r := range rest {
			connects += int(r["connects"].(float64))
			disconnects += int(r["disconnects"].(float64))
		}
		return connects >= clients && disconnects >= clients, fmt.Sprintf("%d connects and %d disconnects", connects, disconnects)
	})
	periods := int(elapsed/period) + 2
	if lines, limit := len(up)+len(down)+len(rest), periods*(20+1); lines > limit {
		t.Fatalf("%d lines in %v, want at most %d", lines, elapsed, limit)
	}
	if connects != clients || disconnects != clients {
		t.Errorf("the lines account for %d connects and %d disconnects, want %d each", connects, disconnects, clients)
	}
	t.Logf("%d clients in %v: %d connect, %d disconnect and %d counting lines", clients, elapsed.Round(time.Millisecond), len(up), len(down), len(rest))
}
