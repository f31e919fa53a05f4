package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/cpbinary"
)

// readyzWithin is how soon after SIGTERM /readyz must answer 503.
const readyzWithin = 10 * time.Millisecond

// readyzSample is one answer of /readyz: when its request was sent and its
// answer received, and its status (0: no answer, the port closed).
type readyzSample struct {
	sent, got time.Time
	code      int
}

// pollReadyz asks url/readyz in a tight loop, one request at a time over a
// kept-alive connection, until stop is closed, and returns every answer; it
// closes ready after the first 200.
func pollReadyz(url string, ready chan<- struct{}, stop <-chan struct{}) []readyzSample {
	client := &http.Client{Timeout: time.Second}
	var out []readyzSample
	for {
		select {
		case <-stop:
			return out
		default:
		}
		s := readyzSample{sent: time.Now()}
		if resp, err := client.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			s.code = resp.StatusCode
		}
		s.got = time.Now()
		if s.code == http.StatusOK && ready != nil {
			close(ready)
			ready = nil
		}
		out = append(out, s)
	}
}

// TestReadyzTurnsAtSIGTERM: the controlplane binary, sent SIGTERM with two
// xDS streams open, answers /readyz 503 within 10 ms of the signal, never
// 200 again, and 503 throughout the drain, while the second stream is still
// open; a stream opened during the drain is refused. It measures
// milliseconds, so it is not parallel: it runs before the package's
// parallel tests, on a machine its own.
func TestReadyzTurnsAtSIGTERM(t *testing.T) {
	manifests := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	// one Upstream is enough: the streams ask for its Cluster
	writeAtomically(t, filepath.Join(manifests, "pay.yaml"), "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: pay, namespace: shop}\n")
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	// two streams over a 2 s drain: the first ends as the drain begins,
	// the second 1 s later
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr, "--drain-period", "2s")
	streamEnded := make(chan time.Time, 2)
	for _, id := range []string{"drain-1", "drain-2"} {
		conn, ctx := adstest.Conn(t, xdsAddr)
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: id, UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil { // answered: held, and ended by the drain
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := s.Recv(); err != nil {
					streamEnded <- time.Now()
					return
				}
			}
		}()
	}

	ready, stop := make(chan struct{}), make(chan struct{})
	polled := make(chan []readyzSample, 1)
	go func() { polled <- pollReadyz(cp.adminURL, ready, stop) }()
	<-ready
	signalled := time.Now()
	if err := cp.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	first := <-streamEnded
	// the drain has begun: a new stream is refused
	conn, ctx := adstest.Conn(t, xdsAddr)
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(nctx); err == nil {
		_ = s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "late"}, TypeUrl: resource.ClusterType})
		if _, err := s.Recv(); err == nil {
			t.Error("a stream opened during the drain was answered")
		}
	}
	second := <-streamEnded
	close(stop)
	samples := <-polled
	<-cp.Done()

	i := slices.IndexFunc(samples, func(s readyzSample) bool { return s.code == http.StatusServiceUnavailable })
	if i < 0 {
		t.Fatalf("no 503 in %d answers of /readyz", len(samples))
	}
	latency := samples[i].got.Sub(signalled)
	last200 := time.Duration(0)
	for _, s := range samples[:i] {
		if s.code == http.StatusOK && s.got.After(signalled) {
			last200 = s.got.Sub(signalled)
		}
	}
	t.Logf("/readyz: first 503 received %v after SIGTERM (the last 200 %v after it); streams ended %v and %v after it; %d answers in all",
		latency.Round(10*time.Microsecond), last200.Round(10*time.Microsecond), first.Sub(signalled).Round(time.Millisecond), second.Sub(signalled).Round(time.Millisecond), len(samples))
	if latency > readyzWithin {
		t.Errorf("/readyz first answered 503 %v after SIGTERM, want within %v", latency, readyzWithin)
	}
	during := 0
	for _, s := range samples[i:] {
		switch {
		case s.code == http.StatusOK:
			t.Fatalf("/readyz answered 200 %v after SIGTERM, after its first 503", s.got.Sub(signalled))
		case s.got.Before(second) && s.code != http.StatusServiceUnavailable:
			t.Fatalf("/readyz answered %d %v after SIGTERM, while a stream was still open: want 503", s.code, s.got.Sub(signalled))
		case s.got.After(first) && s.got.Before(second):
			during++
		}
	}
	if during == 0 {
		t.Errorf("no /readyz answer between the first stream's end (%v) and the second's (%v): the drain was not observed", first.Sub(signalled), second.Sub(signalled))
	}
}
