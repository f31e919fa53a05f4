package affinity

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"poise.dev/poise/pkg/weights"
)

// locality builds n endpoints of weight 1 in one (priority, region, zone);
// the first `healthy` are eligible, the rest probe-Unhealthy.
func locality(prio uint32, region, zone string, localityWeight uint64, n, healthy int) []weights.Endpoint {
	out := make([]weights.Endpoint, n)
	for i := range out {
		out[i] = weights.Endpoint{
			Address: fmt.Sprintf("10.%d.%s.%s.%d", prio, region, zone, i), Port: 8080,
			Priority: prio, Locality: weights.Locality{Region: region, Zone: zone},
			LocalityWeight: localityWeight, Weight: 1,
		}
		if i >= healthy {
			out[i].Probe = weights.ProbeUnhealthy
		}
	}
	return out
}

func compute(t *testing.T, eps []weights.Endpoint) *weights.Result {
	t.Helper()
	r, err := weights.Compute(weights.DefaultPolicy(), eps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// trafficOf is each locality's traffic by "region/zone" (one priority each here).
func trafficOf(r *weights.Result) map[string]uint64 {
	out := map[string]uint64{}
	for _, l := range r.Localities {
		out[l.Locality.Region+"/"+l.Locality.Zone] += l.Traffic
	}
	return out
}

// docs/weights.md, "Client-locality affinity", example 1: PreferSameZone
// spills from the client's zone to its region exactly as between priorities.
func TestWorkedExamplePreferSameZoneSpill(t *testing.T) {
	eps := slices.Concat(
		locality(0, "eu", "a", 1, 2, 1), // half of eu/a is unhealthy
		locality(0, "eu", "b", 1, 2, 2),
		locality(0, "us", "c", 1, 2, 2),
	)
	none := trafficOf(compute(t, eps))
	if want := map[string]uint64{"eu/a": 259_259, "eu/b": 370_371, "us/c": 370_370}; !reflect.DeepEqual(none, want) {
		t.Errorf("None: %v, want %v", none, want)
	}
	for _, c := range []struct {
		from Zone
		want map[string]uint64
	}{
		{Zone{"eu", "a"}, map[string]uint64{"eu/a": 700_000, "eu/b": 300_000, "us/c": 0}},
		{Zone{"eu", "b"}, map[string]uint64{"eu/a": 0, "eu/b": 1_000_000, "us/c": 0}},
		{Zone{"us", "c"}, map[string]uint64{"eu/a": 0, "eu/b": 0, "us/c": 1_000_000}},
	} {
		re, err := Reprioritize(PreferSameZone, nil, c.from, eps, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := trafficOf(compute(t, re)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("PreferSameZone from %s: %v, want %v", c.from, got, c.want)
		}
	}
}

// docs/weights.md, "Client-locality affinity", example 2: Balanced with
// capacity 50/50 in two zones and clients 75/25.
func TestWorkedExampleBalancedUnequalDemand(t *testing.T) {
	eps := slices.Concat(locality(0, "eu", "a", 1, 2, 2), locality(0, "eu", "b", 1, 2, 2))
	r := compute(t, eps)
	demand := []Demand{{Zone{"eu", "a"}, 3}, {Zone{"eu", "b"}, 1}}
	a, err := Balance(r, demand, Zone{"eu", "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Balance(r, demand, Zone{"eu", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{666_667, 333_333}; !slices.Equal(a.Traffic, want) || a.KeepsAll {
		t.Errorf("clients in eu/a: %v (keeps all %v), want %v", a.Traffic, a.KeepsAll, want)
	}
	if want := []uint64{0, 1_000_000}; !slices.Equal(b.Traffic, want) || !b.KeepsAll {
		t.Errorf("clients in eu/b: %v (keeps all %v), want %v", b.Traffic, b.KeepsAll, want)
	}
	if s := a.Zones[0].Surplus; s.Cmp(big.NewInt(-1_000_000)) != 0 {
		t.Errorf("s_a = %v, want -1000000", s)
	}
	// over all clients: (3 × 666,667 + 1 × 0) / 4 and (3 × 333,333 + 1 × 1,000,000) / 4
	if sa, sb := 3*a.Traffic[0]+1*b.Traffic[0], 3*a.Traffic[1]+1*b.Traffic[1]; sa != 2_000_001 || sb != 1_999_999 {
		t.Errorf("demand-weighted load: a %d, b %d (÷4); want 2,000,001 and 1,999,999", sa, sb)
	}
}

func TestNoneAndBalancedLeaveTheTopologyAlone(t *testing.T) {
	eps := slices.Concat(locality(0, "eu", "a", 1, 2, 1), locality(1, "us", "c", 2, 3, 3))
	for _, m := range []Mode{None, Balanced} {
		got, err := Reprioritize(m, []string{"us"}, Zone{"eu", "a"}, eps, nil)
		if err != nil || !reflect.DeepEqual(got, eps) {
			t.Errorf("%v: the endpoints changed: %v", m, err)
		}
	}
	got, err := Reprioritize(PreferSameZone, nil, Zone{}, eps, nil)
	if err != nil || !reflect.DeepEqual(got, eps) {
		t.Errorf("a client with no locality: the endpoints changed: %v", err)
	}
}

func TestRanks(t *testing.T) {
	from := Zone{"eu", "a"}
	failover := []string{"us", "ap"}
	for _, c := range []struct {
		mode Mode
		l    weights.Locality
		want uint32
	}{
		{PreferSameZone, weights.Locality{Region: "eu", Zone: "a", SubZone: "x"}, 0},
		{PreferSameZone, weights.Locality{Region: "eu", Zone: "b"}, 1},
		{PreferSameZone, weights.Locality{Region: "us", Zone: "a"}, 2},
		{PreferSameZone, weights.Locality{Region: "ap", Zone: "z"}, 3},
		{PreferSameZone, weights.Locality{Region: "sa", Zone: "z"}, 4},
		{PreferSameZone, weights.Locality{}, 4},
		{PreferSameRegion, weights.Locality{Region: "eu", Zone: "b"}, 0},
		{PreferSameRegion, weights.Locality{Region: "us"}, 1},
		{PreferSameRegion, weights.Locality{Region: "ap"}, 2},
		{PreferSameRegion, weights.Locality{Region: "sa"}, 3},
		{None, weights.Locality{Region: "sa"}, 0},
	} {
		if got := Rank(c.mode, failover, from, c.l); got != c.want {
			t.Errorf("%v %v: rank %d, want %d", c.mode, c.l, got, c.want)
		}
	}
}

func TestTooManyEffectivePriorities(t *testing.T) {
	var eps []weights.Endpoint
	for p := range uint32(100) {
		eps = append(eps, locality(p, "eu", "a", 1, 1, 1)...)
		eps = append(eps, locality(p, "us", "a", 1, 1, 1)...)
	}
	if _, err := Reprioritize(PreferSameZone, nil, Zone{"eu", "a"}, eps, nil); !errors.Is(err, ErrTooManyPriorities) {
		t.Errorf("200 effective priorities: %v, want ErrTooManyPriorities", err)
	}
}

// randomTopology: 1–3 regions of 1–3 zones, 1–3 priorities, random
// locality weights, endpoint weights and health.
func randomTopology(rng *rand.Rand) ([]weights.Endpoint, []Zone) {
	var eps []weights.Endpoint
	var zones []Zone
	for r := range 1 + rng.IntN(3) {
		for z := range 1 + rng.IntN(3) {
			zones = append(zones, Zone{fmt.Sprintf("r%d", r), fmt.Sprintf("z%d", z)})
		}
	}
	n := 0
	for _, z := range zones {
		for p := range uint32(1 + rng.IntN(3)) {
			if rng.IntN(3) == 0 {
				continue
			}
			lw := uint64(1 + rng.IntN(5))
			for range 1 + rng.IntN(4) {
				e := weights.Endpoint{Address: fmt.Sprintf("10.0.0.%d", n), Port: 80, Priority: p,
					Locality: weights.Locality{Region: z.Region, Zone: z.Zone}, LocalityWeight: lw, Weight: uint64(1 + rng.IntN(9))}
				if rng.IntN(3) == 0 {
					e.Probe = weights.ProbeUnhealthy
				}
				eps = append(eps, e)
				n++
			}
		}
	}
	return eps, zones
}

// independentRanks re-prioritises with string keys and a sort of its own,
// the way a reader of docs/weights.md ("Client-locality affinity") would.
func independentRanks(mode Mode, failover []string, from Zone, eps []weights.Endpoint) []weights.Endpoint {
	rank := func(l weights.Locality) int {
		same, first := l.Region == from.Region, 1 // the first rank after the client's own region
		if mode == PreferSameZone {
			if same && from.Zone != "" && l.Zone == from.Zone {
				return 0
			}
			if same {
				return 1
			}
			first = 2
		} else if same {
			return 0
		}
		for i, r := range failover {
			if r == l.Region {
				return first + i
			}
		}
		return first + len(failover)
	}
	type pair struct{ p, r int }
	set := map[pair]bool{}
	for _, e := range eps {
		set[pair{int(e.Priority), rank(e.Locality)}] = true
	}
	var all []pair
	for k := range set {
		all = append(all, k)
	}
	slices.SortFunc(all, func(a, b pair) int {
		if a.p != b.p {
			return a.p - b.p
		}
		return a.r - b.r
	})
	out := slices.Clone(eps)
	for i, e := range out {
		out[i].Priority = uint32(slices.Index(all, pair{int(e.Priority), rank(e.Locality)}))
	}
	return out
}

func TestPropertyPreferSameEqualsSeedMathOnReprioritisedTopology(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 1))
	for i := range 3000 {
		eps, zones := randomTopology(rng)
		if len(eps) == 0 {
			continue
		}
		mode := []Mode{PreferSameZone, PreferSameRegion}[i%2]
		var failover []string
		if rng.IntN(2) == 0 {
			failover = []string{"r2", "r0"}
		}
		from := zones[rng.IntN(len(zones))]
		if rng.IntN(5) == 0 {
			from.Zone = "" // a region-level class
		}
		got, err := Reprioritize(mode, failover, from, eps, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := independentRanks(mode, failover, from, eps)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d (%v from %s, failover %v): effective priorities differ from an independent re-prioritisation", i, mode, from, failover)
		}
		// permutation invariance: the same topology in another order gives the same result
		perm := slices.Clone(eps)
		rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		gotPerm, err := Reprioritize(mode, failover, from, perm, nil)
		if err != nil {
			t.Fatal(err)
		}
		r1, err1 := weights.Compute(weights.DefaultPolicy(), got)
		r2, err2 := weights.Compute(weights.DefaultPolicy(), gotPerm)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("case %d: %v vs %v", i, err1, err2)
		}
		if err1 == nil && !reflect.DeepEqual(stripIndex(r1), stripIndex(r2)) {
			t.Fatalf("case %d: a permuted input gives another result", i)
		}
	}
}

func stripIndex(r *weights.Result) *weights.Result {
	c := r.Clone()
	for i := range c.Endpoints {
		c.Endpoints[i].Index = 0
	}
	return c
}

// Balanced's invariant: summed over all client zones weighted by demand,
// every locality's traffic is its None traffic, to at most 2 millionths per
// locality per class; every class routes exactly U.
func TestPropertyBalancedKeepsTheGlobalSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	checked := 0
	for i := range 3000 {
		eps, zones := randomTopology(rng)
		if len(eps) == 0 {
			continue
		}
		r, err := weights.Compute(weights.Policy{OverprovisioningFactor: 140, PanicThreshold: uint32(rng.IntN(60)), PanicMode: weights.PanicMode(rng.IntN(2))}, eps)
		if err != nil {
			t.Fatal(err)
		}
		// demand in some zones, perhaps one with no capacity at all
		var demand []Demand
		for _, z := range append(zones, Zone{"elsewhere", "z"}) {
			if rng.IntN(4) != 0 {
				demand = append(demand, Demand{z, uint64(1 + rng.IntN(1000))})
			}
		}
		var D uint64
		for _, d := range demand {
			D += d.Weight
		}
		sum := make([]uint64, len(r.Localities)) // Σ_z d_z × traffic_z(L)
		for _, d := range demand {
			b, err := Balance(r, demand, d.Zone)
			if err != nil {
				t.Fatal(err)
			}
			var total uint64
			for j, x := range b.Traffic {
				sum[j] += d.Weight * x
				total += x
			}
			want := weights.Million - r.DroppedMillionths
			if r.Outcome != weights.Routable {
				want = 0
			}
			if b.Fallback == "" && total != want {
				t.Fatalf("case %d, class %s: routes %d, want U = %d", i, d.Zone, total, want)
			}
			// permutation invariance of the demand's order
			shuffled := slices.Clone(demand)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			b2, err := Balance(r, shuffled, d.Zone)
			if err != nil || !slices.Equal(b.Traffic, b2.Traffic) {
				t.Fatalf("case %d, class %s: the demand's order changes the split", i, d.Zone)
			}
		}
		if D == 0 || r.Outcome != weights.Routable {
			continue
		}
		for j, l := range r.Localities {
			exact := l.Traffic * D
			diff := max(sum[j], exact) - min(sum[j], exact)
			if diff > 2*D {
				t.Fatalf("case %d: locality %v gets %d/%d over all clients, None gives %d (off by %d/%d, more than 2 millionths)",
					i, l.Locality, sum[j], D, l.Traffic, diff, D)
			}
		}
		checked++
	}
	if checked < 1000 {
		t.Fatalf("only %d random topologies had demand and routable traffic", checked)
	}
}

func TestBalancedFallbacks(t *testing.T) {
	r := compute(t, slices.Concat(locality(0, "eu", "a", 1, 2, 2), locality(0, "eu", "b", 1, 2, 2)))
	for _, c := range []struct {
		name   string
		demand []Demand
		from   Zone
	}{
		{"no locality", []Demand{{Zone{"eu", "a"}, 1}}, Zone{}},
		{"no demand", nil, Zone{"eu", "a"}},
		{"none counted for the zone yet", []Demand{{Zone{"eu", "b"}, 1}}, Zone{"eu", "a"}},
	} {
		b, err := Balance(r, c.demand, c.from)
		if err != nil {
			t.Fatal(err)
		}
		if b.Fallback == "" || !slices.Equal(b.Traffic, []uint64{500_000, 500_000}) {
			t.Errorf("%s: %v (fallback %q), want the None split with a reason", c.name, b.Traffic, b.Fallback)
		}
	}
}
