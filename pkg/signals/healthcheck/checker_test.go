package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

var up = topology.Key{Namespace: "shop", Name: "checkout"}

// fast is a check quick enough for tests: 50 ms apart, 3 failures to eject.
func fast(typ string) *topology.HealthCheck {
	return &topology.HealthCheck{Type: typ, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond,
		HealthyThreshold: 2, UnhealthyThreshold: 3, JitterPercent: 10}
}

// bound is how long a check may take to judge an endpoint Unhealthy:
// unhealthyThreshold × the longest interval, a first check up to one interval
// late, the timeouts, and slack for a loaded machine.
func bound(hc *topology.HealthCheck) time.Duration {
	iv := hc.Interval + hc.Interval*time.Duration(hc.JitterPercent)/100 + hc.Timeout
	return time.Duration(hc.UnhealthyThreshold+1)*iv + time.Second
}

// run starts c and returns a channel of every verdict it publishes.
func run(t *testing.T, c *Checker) <-chan Verdict {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := make(chan Verdict, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, func(vs []Verdict) {
			for _, v := range vs {
				out <- v
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

func await(t *testing.T, ch <-chan Verdict, want weights.ProbeHealth, within time.Duration) Verdict {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case v := <-ch:
			if v.Probe == want {
				return v
			}
			t.Logf("verdict %v (%s), waiting for %v", v.Probe, v.Origin, want)
		case <-deadline:
			t.Fatalf("no %v verdict within %v", want, within)
		}
	}
}

func target(t *testing.T, addr string) Target {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	return Target{Address: host, Port: uint32(p)}
}

func TestGRPCNotServingEjectsWithinThresholdTimesInterval(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("shop.Checkout", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	hc := fast("GRPC")
	hc.GRPCService = "shop.Checkout"
	c := New(Config{Name: "poise-0"})
	out := run(t, c)
	tg := target(t, lis.Addr().String())
	c.Set(up, hc, []Target{tg})

	v := await(t, out, weights.ProbeHealthy, bound(hc))
	if v.Upstream != up || v.Target != tg || v.Origin != "active check by poise-0: 1 pass" {
		t.Fatalf("first verdict %+v", v)
	}
	flipped := time.Now()
	hs.SetServingStatus("shop.Checkout", healthpb.HealthCheckResponse_NOT_SERVING)
	v = await(t, out, weights.ProbeUnhealthy, bound(hc))
	t.Logf("Unhealthy %v after NOT_SERVING (bound %v): %s", time.Since(flipped), bound(hc), v.Origin)
	if want := "active check by poise-0: 3 failures, last: grpc health NOT_SERVING"; v.Origin != want {
		t.Errorf("origin %q, want %q", v.Origin, want)
	}
	hs.SetServingStatus("shop.Checkout", healthpb.HealthCheckResponse_SERVING)
	v = await(t, out, weights.ProbeHealthy, bound(hc))
	if want := "active check by poise-0: 2 passes"; v.Origin != want {
		t.Errorf("origin %q, want %q", v.Origin, want)
	}

	// the server gone: refused connections
	srv.Stop()
	v = await(t, out, weights.ProbeUnhealthy, bound(hc))
	if !strings.HasSuffix(v.Origin, "last: connection refused") {
		t.Errorf("origin %q, want the refused connection", v.Origin)
	}
}

func TestHTTPExpectedStatuses(t *testing.T) {
	t.Parallel()
	var code atomic.Int32
	code.Store(204)
	var host atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		host.Store(r.Host)
		w.WriteHeader(int(code.Load()))
	}))
	t.Cleanup(srv.Close)
	hc := fast("HTTP")
	hc.HTTPPath, hc.HTTPHost = "/healthz", "checkout.shop"
	hc.ExpectedStatuses = []topology.StatusRange{{Start: 200, End: 299}}
	c := New(Config{Name: "poise-0"})
	out := run(t, c)
	c.Set(up, hc, []Target{target(t, srv.Listener.Addr().String())})
	await(t, out, weights.ProbeHealthy, bound(hc))
	if h, _ := host.Load().(string); h != "checkout.shop" {
		t.Errorf("Host %q, want checkout.shop", h)
	}
	code.Store(503)
	v := await(t, out, weights.ProbeUnhealthy, bound(hc))
	if !strings.HasSuffix(v.Origin, "last: HTTP status 503") {
		t.Errorf("origin %q", v.Origin)
	}
	// a redirect is not followed: it fails unless expected
	code.Store(302)
	hc2 := *hc
	hc2.ExpectedStatuses = []topology.StatusRange{{Start: 200, End: 200}, {Start: 302, End: 302}}
	c.Set(up, &hc2, []Target{target(t, srv.Listener.Addr().String())})
	await(t, out, weights.ProbeHealthy, bound(hc))
}

func TestTCPAndRemoval(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hc := fast("TCP")
	c := New(Config{Name: "poise-0"})
	out := run(t, c)
	tg := target(t, lis.Addr().String())
	c.Set(up, hc, []Target{tg})
	await(t, out, weights.ProbeHealthy, bound(hc))
	lis.Close()
	v := await(t, out, weights.ProbeUnhealthy, bound(hc))
	if !strings.HasSuffix(v.Origin, "last: connection refused") {
		t.Errorf("origin %q", v.Origin)
	}
	// the endpoint leaves the set: its signal is withdrawn
	c.Set(up, hc, nil)
	v = await(t, out, weights.ProbeUnknown, time.Second)
	if v.Target != tg || v.Origin != "" {
		t.Errorf("withdrawal %+v", v)
	}
}

func TestBoundedConcurrencyAndEndpoints(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, most, checked := 0, 0, map[Target]bool{}
	probe := func(ctx context.Context, hc *topology.HealthCheck, tg Target) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		checked[tg] = true
		mu.Unlock()
		// sleep: a check that lasts, so checks overlap and the concurrency
		// bound, not their speed, is what keeps them few
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	c := New(Config{Name: "poise-0", Concurrency: 3, MaxEndpoints: 25, MaxEndpointsPerUpstream: 20, Probe: probe})
	out := run(t, c)
	var ts []Target
	for i := range 30 {
		ts = append(ts, Target{Address: "10.0.0." + strconv.Itoa(i), Port: 80})
	}
	hc := fast("TCP")
	c.Set(up, hc, ts)
	other := topology.Key{Namespace: "shop", Name: "cart"}
	c.Set(other, hc, ts[:10])
	healthy := 0
	for healthy < 25 {
		await(t, out, weights.ProbeHealthy, bound(hc))
		healthy++
	}
	mu.Lock()
	defer mu.Unlock()
	if most > 3 {
		t.Errorf("%d checks in flight at once, want at most 3", most)
	}
	if got := c.Unchecked(); got[up] != 10 || got[other] != 5 {
		t.Errorf("unchecked %v, want 10 of %s (per-upstream bound) and 5 of %s (total bound)", got, up, other)
	}
}

// TestSeedStartsUnhealthy: an endpoint a previous leader found Unhealthy
// starts Unhealthy under the next one (no verdict published while it keeps
// failing) and needs healthyThreshold passes, not one, to be Healthy again;
// an endpoint that was not seeded becomes Healthy at its first pass.
func TestSeedStartsUnhealthy(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	seeded, fresh := Target{Address: "10.0.0.1", Port: 80}, Target{Address: "10.0.0.2", Port: 80}
	var passes sync.Map     // target -> *atomic.Int32, passes seen
	var failed atomic.Int32 // checks of the seeded endpoint failed
	c := New(Config{Name: "poise-1", Probe: func(ctx context.Context, hc *topology.HealthCheck, tg Target) error {
		if tg == seeded && failing.Load() {
			failed.Add(1)
			return errors.New("connection refused")
		}
		n, _ := passes.LoadOrStore(tg, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return nil
	}})
	c.Seed(up, []Target{seeded})
	out := run(t, c)
	hc := fast("TCP")
	c.Set(up, hc, []Target{seeded, fresh})
	v := await(t, out, weights.ProbeHealthy, bound(hc))
	if v.Target != fresh {
		t.Fatalf("first Healthy verdict %+v, want the fresh endpoint", v)
	}
	// several failed checks of the seeded endpoint later, still nothing
	// about it: the checker publishes the verdict of a check before it
	// starts the check after next, so by the fifth check the verdicts of
	// the first three (the unhealthy threshold) are out
	testkit.Eventually(t, 5*bound(hc), "5 failed checks of the seeded endpoint", func() (bool, string) {
		n := failed.Load()
		return n >= 5, fmt.Sprintf("%d failed", n)
	})
	select {
	case v := <-out:
		t.Fatalf("a seeded endpoint that keeps failing published %+v", v)
	default:
	}
	failing.Store(false)
	v = await(t, out, weights.ProbeHealthy, bound(hc))
	n, _ := passes.Load(seeded)
	if v.Target != seeded || n == nil || n.(*atomic.Int32).Load() < int32(hc.HealthyThreshold) {
		t.Fatalf("verdict %+v after %v passes, want Healthy after %d", v, n, hc.HealthyThreshold)
	}
	if !strings.Contains(v.Origin, "2 passes") {
		t.Errorf("origin %q", v.Origin)
	}
}
