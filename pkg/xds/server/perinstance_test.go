package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/testkit"
)

// TestStreamsPerInstanceAreBounded: one pod (its bound token) holds at most
// MaxStreamsPerInstance streams on a server, xDS and LRS together;
// the next ends with ResourceExhausted naming the flag, while another pod
// and the clients of a token bound to no pod (not counted: all of a
// service account's pods would share it) are served. A stream that ends
// gives its place back.
func TestStreamsPerInstanceAreBounded(t *testing.T) {
	t.Parallel()
	const limit = 8
	h := newTokenHarnessWith(t, identity.TokenOptions{}, server.Config{MaxStreamsPerInstance: limit})
	publishV1(t, h.harness)
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(h.conn)
	// hold opens a SotW stream and waits for its first response; the
	// returned function ends it.
	hold := func(token, node string) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(bearing(token))
		t.Cleanup(cancel)
		s, err := ads.StreamAggregatedResources(ctx)
		if err == nil {
			err = s.Send(&discovery.DiscoveryRequest{Node: envoyNode(node), TypeUrl: CDS})
		}
		if err == nil || errors.Is(err, io.EOF) {
			// a stream the server refused while the request was sent
			// fails Send with io.EOF; Recv has the server's status
			_, err = s.Recv()
		}
		return cancel, err
	}
	h.kube.SetZone("node-z1", "r1", "z1")
	greedy := h.pod("greedy-0", "node-z1")
	var first context.CancelFunc
	for i := range limit {
		end, err := hold(greedy, "greedy-0."+itoa(i))
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, limit, err)
		}
		if i == 0 {
			first = end
		}
	}
	wantExhausted := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--xds-max-streams-per-instance") {
			t.Errorf("%s past the limit: %v, want ResourceExhausted naming --xds-max-streams-per-instance", what, err)
		}
	}
	_, err := hold(greedy, "greedy-0.over")
	wantExhausted("a SotW stream", err)
	wantExhausted("a Delta stream", callIn(bearing(greedy), h.conn, "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", true, envoyNode("greedy-0.delta")))
	wantExhausted("an LRS stream", callIn(bearing(greedy), h.conn, "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats", true, envoyNode("greedy-0.lrs")))

	if _, err := hold(h.pod("other-0", "node-z1"), "other-0"); err != nil {
		t.Errorf("another pod: %v", err)
	}
	unbound := identitytest.Token("unbound", time.Now().Add(time.Hour))
	h.kube.Accept(unbound, "a", "pay", "", "", "")
	for i := range limit + 5 {
		if _, err := hold(unbound, "unbound."+itoa(i)); err != nil {
			t.Fatalf("stream %d of a token bound to no pod: %v", i+1, err)
		}
	}

	first()
	testkit.Eventually(t, 5*time.Second, "after one of its streams ended, a new one served", func() (bool, string) {
		_, err := hold(greedy, "greedy-0.again")
		return err == nil, fmt.Sprint(err)
	})
}
