package controlplane_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/testkit"
)

const drainManifest = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: pay, namespace: shop}
spec: {protocol: HTTP1}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: pay-a, namespace: shop}
spec: {upstream: pay, region: eu, zone: eu-a, weight: 1}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: pay-a, namespace: shop}
spec:
  upstream: pay
  locality: {region: eu, zone: eu-a}
  endpoints:
  - {address: 10.0.0.1, port: 8080, weight: WEIGHT}
  - {address: 10.0.0.2, port: 8080}
`

// TestDrainingPlaneFollowsChanges: once stopping begins, the xDS streams
// drain over the drain period, and a client still connected to the
// stopping plane receives a change made meanwhile, rather than keeping what
// it held when stopping began until its stream ends.
func TestDrainingPlaneFollowsChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "pay.yaml")
	write := func(weight string) {
		t.Helper()
		b := []byte(strings.ReplaceAll(drainManifest, "WEIGHT", weight))
		if err := os.WriteFile(file+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const drain = 4 * time.Second
	addrs, done := runPlane(t, ctx, controlplane.Config{Paths: []string{dir}, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Debounce: 50 * time.Millisecond, DrainPeriod: drain})

	conn, err := grpc.NewClient(addrs.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	// weightOf is the load-balancing weight of 10.0.0.1 in a response.
	weightOf := func(r *discovery.DiscoveryResponse) uint32 {
		for _, a := range r.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				return 0
			}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == "10.0.0.1" {
						return e.GetLoadBalancingWeight().GetValue()
					}
				}
			}
		}
		return 0
	}
	// The drain ends the streams one at a time over the period: of four,
	// the last ends three quarters of the way through.
	const streams = 4
	type held struct {
		s      discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
		before uint32
	}
	var all []held
	for i := range streams {
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		node := &core.Node{Id: fmt.Sprintf("drain-%d", i), UserAgentName: "envoy"}
		if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/pay"}}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/pay"},
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		all = append(all, held{s, weightOf(r)})
	}

	// Each stream is read on its own: it ends, or its first response that
	// moves 10.0.0.1's weight arrives.
	type event struct {
		i   int
		w   uint32 // the new weight, when err is nil
		err error
	}
	events := make(chan event, streams)
	stopping := time.Now()
	cancel()
	for i, h := range all {
		go func() {
			for {
				r, err := h.s.Recv()
				if err != nil {
					events <- event{i: i, err: err}
					return
				}
				if w := weightOf(r); w != h.before {
					events <- event{i: i, w: w}
					return
				}
			}
		}()
	}
	// stopping has begun once the drain has ended its first stream, at
	// once: the edit is made while the others are still open
	first := <-events
	if first.err == nil {
		t.Fatalf("stream %d: 10.0.0.1's weight moved to %d before the edit", first.i, first.w)
	}
	t.Logf("stream %d ended %s after stopping began: %v", first.i, time.Since(stopping).Round(time.Millisecond), first.err)
	write("5")
	got := 0
	for range streams - 1 {
		e := <-events
		if e.err != nil {
			t.Logf("stream %d ended %s after stopping began: %v", e.i, time.Since(stopping).Round(time.Millisecond), e.err)
			continue
		}
		t.Logf("stream %d: 10.0.0.1's weight %d → %d, %s after stopping began (drain period %s)", e.i, all[e.i].before, e.w, time.Since(stopping).Round(time.Millisecond), drain)
		got++
	}
	// the first stream ended as the drain began, before the edit; the
	// others are still open when the edit is published
	if got < streams-1 {
		t.Errorf("%d of the %d streams still open after the edit received it: want every one of them", got, streams-1)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(drain + 10*time.Second):
		t.Fatalf("the plane had not stopped %s after stopping began", drain+10*time.Second)
	}
}

// TestReadyzTurnsAsStoppingBegins: /readyz answers 503 from the moment
// stopping begins, not once the drain is over: the readiness reads the
// cancellation itself, so the first request after the cancel returns, with
// nothing waited for, is refused; and it stays refused while the streams
// drain.
func TestReadyzTurnsAsStoppingBegins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pay.yaml"), []byte(strings.ReplaceAll(drainManifest, "WEIGHT", "1")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, done := runPlane(t, ctx, controlplane.Config{Paths: []string{dir}, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Debounce: 50 * time.Millisecond, DrainPeriod: 4 * time.Second})
	readyz := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addrs.Admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testkit.Eventually(t, 10*time.Second, "ready", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, body
	})

	// Two streams, each answered: the drain ends the first at once and the
	// second half a period later, so the admin port answers meanwhile.
	conn, sctx := adstest.Conn(t, addrs.XDS)
	ended := make(chan struct{}, 2)
	for i := range 2 {
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: fmt.Sprintf("readyz-%d", i)}, TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/pay"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := s.Recv(); err != nil {
					ended <- struct{}{}
					return
				}
			}
		}()
	}

	cancel()
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Fatalf("/readyz just after stopping began: %d %q, want 503 saying it is stopping", code, body)
	}
	<-ended // the first stream, ended as the drain began; the second is still open
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while the streams drain: %d %q, want 503", code, body)
	}
	<-ended
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
