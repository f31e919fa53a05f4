package explain

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
)

// lbPolicyUpstream has localities 3:1, endpoint
// weights 1 and 3 in the first (18.75 / 56.25 / 25 %).
func lbPolicyUpstream(t *testing.T, policy string, mode topology.HealthAdjustment, oneEach bool) *topology.UpstreamState {
	t.Helper()
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "lb", Name: "up"}, Policy: weights.DefaultPolicy(),
		HealthAdjustment: mode, LoadBalancing: policy})
	for _, l := range []struct {
		zone   string
		weight uint64
		eps    []topology.Endpoint
	}{
		{"a", 3, []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1}, {Address: "10.0.0.2", Port: 80, Weight: 3}}},
		{"b", 1, []topology.Endpoint{{Address: "10.0.1.1", Port: 80, Weight: 1}}},
	} {
		if oneEach {
			l.eps = l.eps[:1]
		}
		loc := weights.Locality{Region: "r", Zone: l.zone}
		b.PutLocality(topology.Locality{Key: topology.Key{Namespace: "lb", Name: l.zone}, Upstream: "up", Locality: loc, Weight: l.weight})
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "lb", Name: l.zone}, Upstream: "up", Locality: loc, Endpoints: l.eps})
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Upstreams()[0]
}

// TestLoadBalancingPerClientKind is the table of docs/weights.md: what each
// policy is published as, per client kind, and whether the split is exact.
func TestLoadBalancingPerClientKind(t *testing.T) {
	type want struct {
		lbPolicy, rendering, split string
		bound                      uint64
	}
	for _, tc := range []struct {
		policy      string
		mode        topology.HealthAdjustment
		oneEach     bool
		envoy, grpc want
	}{
		{"RoundRobin", topology.ControlPlane, false, want{"ROUND_ROBIN", "weighted", SplitExact, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		{"", topology.ControlPlane, false, want{"ROUND_ROBIN", "weighted", SplitExact, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		{"LeastRequest", topology.ControlPlane, false, want{"LEAST_REQUEST", "weighted", SplitLoadDependent, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		{"LeastRequest", topology.ControlPlane, true, want{"LEAST_REQUEST", "weighted", SplitExact, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		{"Random", topology.ControlPlane, false, want{"RANDOM", "per-endpoint", SplitExact, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		// 4·√(0.5625·0.4375/2¹⁸) + 2⁻¹⁸ = 0.0038796… → 3,880 millionths
		{"RingHash", topology.ControlPlane, false, want{"RING_HASH", "weighted", SplitApproximate, 3_880}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		// (2 + 0.5625·3) / 65,537 = 0.0000561… → 57 millionths
		{"Maglev", topology.ControlPlane, false, want{"MAGLEV", "weighted", SplitApproximate, 57}, want{"ROUND_ROBIN", "per-endpoint", SplitExact, 0}},
		{"Maglev", topology.Proxy, false, want{"MAGLEV", "weighted", SplitProxy, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitProxy, 0}},
		{"Random", topology.Proxy, false, want{"RANDOM", "weighted", SplitProxy, 0}, want{"ROUND_ROBIN", "per-endpoint", SplitProxy, 0}},
	} {
		u := lbPolicyUpstream(t, tc.policy, tc.mode, tc.oneEach)
		lb := BuildUpstream(u).LoadBalancing
		if len(lb.Clients) != 2 || lb.Clients[0].Client != "Envoy" || lb.Clients[1].Client != "gRPC" {
			t.Fatalf("%s: clients %+v", tc.policy, lb.Clients)
		}
		for i, w := range []want{tc.envoy, tc.grpc} {
			c := lb.Clients[i]
			got := want{c.LbPolicy, c.Rendering, c.Split, c.BoundMillionths}
			if got != w || c.Note == "" {
				t.Errorf("%s %s one-each %v, %s: got %+v (%q), want %+v", tc.policy, tc.mode, tc.oneEach, c.Client, got, c.Note, w)
			}
			// what explain says is what is published
			p := translate.LbPolicyOf(u.Upstream, []translate.Rendering{translate.Weighted, translate.PerEndpoint}[i])
			if c.LbPolicy != p.Policy.String() || c.Rendering != p.Layout.String() || c.RingSize != p.RingSize || c.TableSize != p.TableSize {
				t.Errorf("%s %s: explain %+v, published %+v", tc.policy, c.Client, c, p)
			}
		}
	}
}

func TestHashBoundsOfOneEndpointAreExact(t *testing.T) {
	if b := ringHashBound([]float64{1}, translate.RingSize); b != 0 {
		t.Errorf("ring hash over one endpoint: bound %d", b)
	}
	if b := maglevBound([]float64{0.7}, translate.MaglevTableSize); b != 0 {
		t.Errorf("Maglev over one endpoint: bound %d", b)
	}
	// the worst case, two halves: 4·0.5/√N + 1/N
	if b, w := ringHashBound([]float64{0.5, 0.5}, 1<<18), uint64(math.Ceil((2/512.0+1.0/(1<<18))*1e6)); b != w {
		t.Errorf("ring hash over two halves: bound %d, want %d", b, w)
	}
}

// TestRingHashBoundHolds places ring points at random, as a hash does, and
// checks how often an endpoint's covered fraction leaves the stated bound:
// at 4 standard deviations, almost never. A small ring keeps it quick; the
// bound scales as 1/√N.
func TestRingHashBoundHolds(t *testing.T) {
	const n, trials = 4096, 400
	shares := []float64{0.1875, 0.5625, 0.25}
	bound := float64(ringHashBound(shares, n)) / 1e6
	rng := rand.New(rand.NewPCG(1, 2))
	outside, worst := 0, 0.0
	type point struct {
		at   uint64
		host int
	}
	ring := make([]point, 0, n)
	for range trials {
		ring = ring[:0]
		for h, s := range shares {
			for range int(math.Round(s * n)) {
				ring = append(ring, point{rng.Uint64(), h})
			}
		}
		slices.SortFunc(ring, func(a, b point) int {
			switch {
			case a.at < b.at:
				return -1
			case a.at > b.at:
				return 1
			}
			return 0
		})
		// a hash h goes to the first point at or after it, wrapping
		covered := make([]float64, len(shares))
		prev := ring[len(ring)-1].at
		for _, p := range ring {
			covered[p.host] += float64(p.at-prev) / math.Exp2(64) // wraps mod 2^64
			prev = p.at
		}
		for h, s := range shares {
			d := math.Abs(covered[h] - s)
			worst = max(worst, d)
			if d > bound {
				outside++
			}
		}
	}
	t.Logf("ring of %d: bound ±%.4f%%, worst of %d endpoint placements %.4f%%, %d outside", n, 100*bound, trials*len(shares), 100*worst, outside)
	if outside > 1 {
		t.Errorf("%d of %d placements outside the bound", outside, trials*len(shares))
	}
}

// TestMaglevBoundHolds fills Maglev tables the way the Maglev paper
// describes with weights (each endpoint walks its own permutation of the
// table and takes a free entry in a round when its accumulated weight
// allows) and checks every endpoint's count against the stated bound.
func TestMaglevBoundHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const m = 65_537
	worst := 0.0 // the largest |count − p·M| seen, in entries
	for trial := range 30 {
		h := 1 + rng.IntN(40)
		w := make([]float64, h)
		total := 0.0
		for i := range w {
			w[i] = float64(1 + rng.IntN(1000))
			total += w[i]
		}
		shares := make([]float64, h)
		maxW := 0.0
		for i := range w {
			shares[i] = w[i] / total
			maxW = max(maxW, shares[i])
		}
		counts := fillMaglev(rng, shares, maxW, m)
		bound := float64(maglevBound(shares, m)) / 1e6
		for i, c := range counts {
			worst = max(worst, math.Abs(float64(c)-shares[i]*m))
			if d := math.Abs(float64(c)/m - shares[i]); d > bound && h > 1 {
				t.Errorf("trial %d, %d endpoints: endpoint %d has %d entries, share %.6f, off by %.6f > bound %.6f", trial, h, i, c, shares[i], d, bound)
			}
		}
	}
	t.Logf("Maglev table of %d, 1–40 endpoints: the largest |entries − p·M| seen is %.2f entries", m, worst)
}

func fillMaglev(rng *rand.Rand, shares []float64, maxShare float64, m uint64) []uint64 {
	type entry struct{ offset, skip, next uint64 }
	es := make([]entry, len(shares))
	for i := range es {
		es[i] = entry{offset: rng.Uint64N(m), skip: 1 + rng.Uint64N(m-1)}
	}
	taken := make([]bool, m)
	counts := make([]uint64, len(shares))
	target := make([]float64, len(shares))
	filled := uint64(0)
	for round := 1.0; filled < m; round++ {
		for i := range es {
			if filled == m {
				break
			}
			if round*shares[i] < target[i] {
				continue
			}
			target[i] += maxShare
			for {
				c := (es[i].offset + es[i].skip*es[i].next) % m
				es[i].next++
				if !taken[c] {
					taken[c] = true
					counts[i]++
					filled++
					break
				}
			}
		}
	}
	return counts
}

// refusedUpstream is lbPolicyUpstream (RingHash, keyed by header x-user)
// under panicMode mode and panicThreshold threshold, with the endpoints
// at the given addresses failing their probes.
func refusedUpstream(t *testing.T, mode weights.PanicMode, threshold uint32, unhealthy ...string) *topology.UpstreamState {
	t.Helper()
	var b topology.Batch
	policy := weights.DefaultPolicy()
	policy.PanicMode, policy.PanicThreshold = mode, threshold
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "lb", Name: "up"}, Policy: policy, HealthAdjustment: topology.ControlPlane,
		LoadBalancing: "RingHash", RequestAffinity: &topology.RequestAffinity{Keys: []topology.RequestKey{{Source: topology.KeyHeader, Name: "x-user"}}}})
	var eps []topology.Endpoint
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		e := topology.Endpoint{Address: addr, Port: 80, Weight: 1}
		if slices.Contains(unhealthy, addr) {
			e.Health.Probe = weights.ProbeUnhealthy
		}
		eps = append(eps, e)
	}
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "lb", Name: "a"}, Upstream: "up", Locality: weights.Locality{Region: "r", Zone: "a"}, Endpoints: eps})
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Upstreams()[0]
}

// TestRefusalPerClientKind: explain says what every request fails with
// when an upstream routes nothing, per client kind: PanicRejected is a drop
// by policy (Envoy's 503 "drop overload", the gRPC clients' drop of category
// panic), NoCapacity the failure of an empty cluster; a routable upstream
// has no refusal. Key questions about a rejected upstream answer that every
// request is dropped, not an endpoint.
func TestRefusalPerClientKind(t *testing.T) {
	for _, tc := range []struct {
		name        string
		u           *topology.UpstreamState
		outcome     weights.Outcome
		envoy, grpc string
	}{
		{"routable", refusedUpstream(t, weights.FailClosed, 50), weights.Routable, "", ""},
		{"PanicRejected", refusedUpstream(t, weights.FailClosed, 50, "10.0.0.1", "10.0.0.2"), weights.PanicRejected,
			`503 "drop overload"`, `grpc-go "RPC is dropped" once connected to one of the 1 endpoints still eligible`},
		{"PanicRejected, nothing eligible", refusedUpstream(t, weights.FailClosed, 50, "10.0.0.1", "10.0.0.2", "10.0.0.3"), weights.PanicRejected,
			`503 "drop overload"`, `grpc-go and grpc-js, with no endpoint still eligible to be sent, fail as for a cluster with no endpoints`},
		{"NoCapacity", refusedUpstream(t, weights.FailClosed, 0, "10.0.0.1", "10.0.0.2", "10.0.0.3"), weights.NoCapacity,
			`503 "no healthy upstream" (response flag UH), not a drop`, `UNAVAILABLE with the client's error for a cluster with no endpoints (grpc-go: "weighted-target: no targets to pick from"), not a drop`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.u.Result.Outcome != tc.outcome {
				t.Fatalf("outcome %v, want %v", tc.u.Result.Outcome, tc.outcome)
			}
			lb := loadBalancing(tc.u)
			for i, want := range []string{tc.envoy, tc.grpc} {
				got := lb.Clients[i].Refusal
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("%s refusal %q, want one saying %q", lb.Clients[i].Client, got, want)
				}
			}
			var text bytes.Buffer
			tw := &textWriter{w: &text}
			writeLoadBalancing(tw, lb)
			if got := strings.Count(text.String(), "every request: "); tc.envoy != "" && got != 2 {
				t.Errorf("text has %d refusal lines, want 2:\n%s", got, text.String())
			}
			if tc.outcome != weights.PanicRejected {
				return
			}
			clients, err := KeyTables(tc.u, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range clients {
				p := c.Pick(KeyRequest{Headers: map[string]string{"x-user": "alice"}})
				if p.Endpoint != "" || !strings.Contains(p.Random, "every request is dropped") {
					t.Errorf("%s: a keyed request of a rejected upstream picks %+v, want every request dropped", c.Client, p)
				}
			}
		})
	}
}
