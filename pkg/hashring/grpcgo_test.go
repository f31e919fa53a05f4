package hashring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/ringhash"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental/balancer/weight"
	estats "google.golang.org/grpc/experimental/stats"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	rhattr "google.golang.org/grpc/resolver/ringhash"
	"google.golang.org/grpc/serviceconfig"
)

// The differential test drives grpc-go's own ring_hash balancer (the module
// go.mod pins) with endpoints and the weight attributes its xDS cluster
// resolver would give them, on a fake ClientConn whose subchannels turn
// READY when asked, and holds every pick of its picker to Table.Pick. The
// picker hashes a request header (A76's requestHashHeader) with xxHash64,
// as the xDS config selector does; the test hashes the same value.

type fakeCC struct {
	balancer.ClientConn
	mu      sync.Mutex
	picker  balancer.Picker
	updates chan struct{}
	addrs   map[balancer.SubConn]string
}

func (cc *fakeCC) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	sc := &fakeSC{listener: opts.StateListener}
	cc.mu.Lock()
	cc.addrs[sc] = addrs[0].Addr
	cc.mu.Unlock()
	return sc, nil
}

func (cc *fakeCC) UpdateState(s balancer.State) {
	cc.mu.Lock()
	cc.picker = s.Picker
	cc.mu.Unlock()
	select {
	case cc.updates <- struct{}{}:
	default:
	}
}

func (cc *fakeCC) RemoveSubConn(balancer.SubConn)                       {}
func (cc *fakeCC) UpdateAddresses(balancer.SubConn, []resolver.Address) {}
func (cc *fakeCC) ResolveNow(resolver.ResolveNowOptions)                {}
func (cc *fakeCC) Target() string                                       { return "hashring-test" }
func (cc *fakeCC) MetricsRecorder() estats.MetricsRecorder              { return noMetrics{} }

type noMetrics struct{ estats.MetricsRecorder }

func (noMetrics) RecordInt64Count(*estats.Int64CountHandle, int64, ...string)             {}
func (noMetrics) RecordFloat64Count(*estats.Float64CountHandle, float64, ...string)       {}
func (noMetrics) RecordInt64Histo(*estats.Int64HistoHandle, int64, ...string)             {}
func (noMetrics) RecordFloat64Histo(*estats.Float64HistoHandle, float64, ...string)       {}
func (noMetrics) RecordInt64Gauge(*estats.Int64GaugeHandle, int64, ...string)             {}
func (noMetrics) RecordInt64UpDownCount(*estats.Int64UpDownCountHandle, int64, ...string) {}
func (noMetrics) RegisterAsyncReporter(estats.AsyncMetricReporter, ...estats.AsyncMetric) func() {
	return func() {}
}

// fakeSC reports CONNECTING then READY when asked to connect, and READY to
// a health listener, each from its own goroutine as grpc's serializer would.
type fakeSC struct {
	balancer.SubConn
	listener func(balancer.SubConnState)
}

func (sc *fakeSC) Connect() {
	go func() {
		sc.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
		sc.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	}()
}
func (sc *fakeSC) RegisterHealthListener(l func(balancer.SubConnState)) {
	go l(balancer.SubConnState{ConnectivityState: connectivity.Ready})
}
func (sc *fakeSC) Shutdown()                          {}
func (sc *fakeSC) UpdateAddresses([]resolver.Address) {}

const keyHeader = "x-hashring-key"

// grpcGoPicks runs grpc-go's ring_hash balancer over the endpoints and
// returns the address it picks for each value of the request header.
func grpcGoPicks(t *testing.T, cfg Config, eps []Endpoint, values []string) []string {
	t.Helper()
	ws, _, err := grpcGoAttrWeights(cfg, eps)
	if err != nil {
		t.Fatal(err)
	}
	var rs []resolver.Endpoint
	for _, w := range ws {
		e := resolver.Endpoint{Addresses: []resolver.Address{{Addr: eps[w.ep].Address}}}
		e = weight.Set(e, weight.EndpointInfo{Weight: w.w})
		e = rhattr.SetHashKey(e, eps[w.ep].HashKey)
		rs = append(rs, e)
	}
	builder := balancer.Get(ringhash.Name)
	if builder == nil {
		t.Fatalf("grpc-go has no %s balancer", ringhash.Name)
	}
	lbCfg, err := builder.(balancer.ConfigParser).ParseConfig([]byte(fmt.Sprintf(`{"minRingSize": %d, "maxRingSize": %d, "requestHashHeader": %q}`, cfg.MinRingSize, cfg.MaxRingSize, keyHeader)))
	if err != nil {
		t.Fatal(err)
	}
	cc := &fakeCC{updates: make(chan struct{}, 1), addrs: map[balancer.SubConn]string{}}
	b := builder.Build(cc, balancer.BuildOptions{})
	defer b.Close()
	if err := b.UpdateClientConnState(balancer.ClientConnState{
		ResolverState:  resolver.State{Endpoints: rs},
		BalancerConfig: lbCfg.(serviceconfig.LoadBalancingConfig),
	}); err != nil {
		t.Fatal(err)
	}
	pick := func(v string) (string, error) {
		cc.mu.Lock()
		p := cc.picker
		cc.mu.Unlock()
		if p == nil {
			return "", balancer.ErrNoSubConnAvailable
		}
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(keyHeader, v))
		r, err := p.Pick(balancer.PickInfo{Ctx: ctx})
		if err != nil {
			return "", err
		}
		cc.mu.Lock()
		defer cc.mu.Unlock()
		return cc.addrs[r.SubConn], nil
	}
	// A pick landing on an IDLE endpoint connects it and queues; wait for
	// the balancer's next picker until every value is answered.
	out := make([]string, len(values))
	deadline := time.After(30 * time.Second)
	for i := 0; i < len(values); {
		a, err := pick(values[i])
		if err == nil {
			out[i] = a
			i++
			continue
		}
		if !errors.Is(err, balancer.ErrNoSubConnAvailable) {
			t.Fatalf("grpc-go pick of %q: %v", values[i], err)
		}
		select {
		case <-cc.updates:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("grpc-go's picker still queues %q", values[i])
		}
	}
	return out
}

func TestGRPCGoDifferential(t *testing.T) {
	t.Parallel()
	values := make([]string, 2000)
	for i := range values {
		values[i] = fmt.Sprintf("user-%d", i)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		eps  []Endpoint
	}{
		{"six equal", Config{MinRingSize: 12, MaxRingSize: 64}, ports(90, 91, 92, 93, 94, 95)},
		{"weights 1 to 5, default sizes", Config{}, weighted(ports(80, 81, 82, 83, 84), 1, 2, 3, 4, 5)},
		{"hash keys and an unhealthy one", Config{MinRingSize: 100, MaxRingSize: 1000}, func() []Endpoint {
			eps := weighted(named(true, 10, 11, 12, 13), 3, 3, 4, 7)
			eps[3].HashKey = "pod-3"
			eps[1].Healthy = false
			return eps
		}()},
		{"localities", Config{MinRingSize: 1024, MaxRingSize: 4096}, zoned(weighted(ports(1, 2, 3, 4, 5, 6, 7), 1, 2, 3, 1, 1, 9, 2), "AAABBCC", map[byte]uint32{'A': 3, 'B': 1, 'C': 5})},
		{"tiny ring", Config{MinRingSize: 3, MaxRingSize: 5}, weighted(ports(90, 91, 92, 93, 94, 95, 96), 1, 1, 2, 3, 5, 8, 13)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tab := mustBuild(t, GRPCGo, tc.cfg, tc.eps)
			got := grpcGoPicks(t, tc.cfg, tc.eps, values)
			for i, v := range values {
				h, _ := RequestHash(GRPCGo, v)
				if h != xxhash.Sum64String(v) {
					t.Fatalf("RequestHash(GRPCGo, %q) is not xxHash64", v)
				}
				e, _ := tab.Pick(h)
				if want := tc.eps[e].Address; got[i] != want {
					t.Errorf("%q: grpc-go picked %s, the table %s", v, got[i], want)
				}
			}
		})
	}
}

// TestGRPCGoRingProperties are grpc-go's own ring_test.go expectations
// (balancer/ringhash, v1.85.0): TestRingNew's size bounds and weights
// within 25 % for endpoints a:3, b:3, c:4 under min {3, 4, 6, 8} × max {20, 8}.
func TestGRPCGoRingProperties(t *testing.T) {
	t.Parallel()
	eps := weighted(ports(1, 2, 3), 3, 3, 4)
	for _, lo := range []uint64{3, 4, 6, 8} {
		for _, hi := range []uint64{20, 8} {
			tab := mustBuild(t, GRPCGo, Config{MinRingSize: lo, MaxRingSize: hi}, eps)
			n := tab.Len()
			if n < int(lo) || n > int(hi) {
				t.Errorf("min %d max %d: ring of %d", lo, hi, n)
			}
			for i, s := range tab.Shares() {
				got, want := float64(s.Entries)/float64(n), float64(eps[i].Weight)/10
				if d := (got - want) / ((got + want) / 2); d > 0.25 || d < -0.25 {
					t.Errorf("min %d max %d: endpoint %d has %.3f of the ring, want about %.3f", lo, hi, i, got, want)
				}
			}
		}
	}
}

func TestGRPCRequestHash(t *testing.T) {
	t.Parallel()
	for _, c := range []Client{GRPCGo, GRPCJS} {
		h, ok := RequestHash(c, "a", "b")
		if !ok || h != xxhash.Sum64String("a,b") {
			t.Errorf("%s: two values hash as %d, want xxHash64(\"a,b\")", c, h)
		}
		if h2, _ := RequestHash(c, "b", "a"); h2 == h {
			t.Errorf("%s: the gRPC clients keep the values' order", c)
		}
	}
	if got := Combine(1); got != 1 {
		t.Errorf("Combine(1) = %d", got)
	}
	if got := Combine(1, 1); got != 3 {
		t.Errorf("Combine(1, 1) = %d, want rotl(1)^1 = 3", got)
	}
	if got := Combine(1<<63, 0); got != 1 {
		t.Errorf("Combine(2^63, 0) = %d, want 1", got)
	}
}
