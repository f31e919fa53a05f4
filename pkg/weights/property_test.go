package weights

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// Locality key parts; "us"/"us-east" and ""/"a"/"a1" exercise bytewise
// prefix ordering.
var (
	genRegions  = []string{"eu", "us", "us-east"}
	genZones    = []string{"", "a", "a1", "b"}
	genSubZones = []string{"", "x", "y"}
)

var genLocality = rapid.Custom(func(t *rapid.T) Locality {
	return Locality{
		Region:  rapid.SampledFrom(genRegions).Draw(t, "region"),
		Zone:    rapid.SampledFrom(genZones).Draw(t, "zone"),
		SubZone: rapid.SampledFrom(genSubZones).Draw(t, "subZone"),
	}
})

var genPolicy = rapid.Custom(func(t *rapid.T) Policy {
	return Policy{
		OverprovisioningFactor: rapid.OneOf(rapid.Uint32Range(1, 1000), rapid.SampledFrom([]uint32{1, 100, 140, 1000})).Draw(t, "opf"),
		PanicThreshold:         rapid.OneOf(rapid.Uint32Range(0, 100), rapid.SampledFrom([]uint32{0, 50, 100})).Draw(t, "panicThreshold"),
		PanicMode:              rapid.SampledFrom([]PanicMode{UseAll, FailClosed}).Draw(t, "panicMode"),
		DrainingCapacity:       rapid.SampledFrom([]DrainingCapacity{ExcludeDraining, IncludeDraining}).Draw(t, "drainingCapacity"),
	}
})

// genEndpoints draws a valid topology: 1..4 distinct priorities, 1..5
// distinct localities each, 0..30 endpoints each (so a priority or locality
// may be absent), weights mostly 1..1000 and sometimes up to MaxWeight/count
// (the endpoint sum of a locality and the locality sum of a priority stay ≤
// MaxWeight), and a per-locality failure rate.
var genEndpoints = rapid.Custom(func(t *rapid.T) []Endpoint {
	var out []Endpoint
	prios := rapid.SliceOfNDistinct(rapid.Uint32Range(0, MaxPriority), 1, 4, rapid.ID[uint32]).Draw(t, "priorities")
	for pi, prio := range prios {
		locs := rapid.SliceOfNDistinct(genLocality, 1, 5, rapid.ID[Locality]).Draw(t, "localities")
		for li, loc := range locs {
			lw := rapid.Uint64Range(1, 1000).Draw(t, "localityWeight")
			if rapid.IntRange(0, 9).Draw(t, "bigLocalityWeight") == 0 {
				// the locality weights of one priority sum to at most MaxWeight
				top := uint64(MaxWeight) / uint64(len(locs))
				lw = rapid.OneOf(rapid.Uint64Range(1, top), rapid.Just(top)).Draw(t, "localityWeight")
			}
			n := rapid.IntRange(0, 30).Draw(t, "endpoints")
			maxW := uint64(1000)
			if n > 0 && rapid.IntRange(0, 4).Draw(t, "heavy") == 0 {
				maxW = MaxWeight / uint64(n)
			}
			failPct := rapid.SampledFrom([]int{0, 0, 10, 30, 50, 80, 100}).Draw(t, "failPct")
			for i := range n {
				e := Endpoint{
					Address:        fmt.Sprintf("10.%d.%d.%d", pi, li, i/2),
					Port:           uint32(8080 + i%2),
					Priority:       prio,
					Locality:       loc,
					LocalityWeight: lw,
					Weight:         rapid.Uint64Range(1, maxW).Draw(t, "weight"),
					Probe:          rapid.SampledFrom([]ProbeHealth{ProbeHealthy, ProbeUnknown}).Draw(t, "probe"),
				}
				if rapid.IntRange(0, 99).Draw(t, "roll") < failPct {
					switch rapid.IntRange(0, 6).Draw(t, "failure") {
					case 0:
						e.Admin = Draining
					case 1:
						e.Admin = Unavailable
					case 2:
						e.Probe = ProbeUnhealthy
					case 3:
						e.Circuit = CircuitOpen
					case 4:
						e.Ejected = true
					case 5:
						e.Scope = ScopeOut
					default: // several signals at once: tests the reason order
						e.Admin = rapid.SampledFrom([]AdminState{Ready, Draining, Unavailable}).Draw(t, "admin")
						e.Probe = rapid.SampledFrom([]ProbeHealth{ProbeUnknown, ProbeHealthy, ProbeUnhealthy}).Draw(t, "probe2")
						e.Circuit = rapid.SampledFrom([]CircuitState{CircuitClosed, CircuitOpen}).Draw(t, "circuit")
						e.Ejected = rapid.Bool().Draw(t, "ejected")
						e.Scope = rapid.SampledFrom([]Scope{ScopeIn, ScopeOut}).Draw(t, "scope")
					}
				}
				out = append(out, e)
			}
		}
	}
	return rapid.Permutation(out).Draw(t, "inputOrder")
})

func mustCompute(t *rapid.T, p Policy, in []Endpoint) *Result {
	t.Helper()
	r, err := Compute(p, in)
	if err != nil {
		t.Fatalf("valid input rejected: %v", err)
	}
	return r
}

// (a) Conservation invariants, and exact agreement with the spec model.
func TestPropertyInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p, in := genPolicy.Draw(t, "policy"), genEndpoints.Draw(t, "endpoints")
		r := mustCompute(t, p, in)
		if err := checkInvariants(p, in, r); err != nil {
			t.Fatalf("%v\nresult %+v", err, r)
		}
		if want := specModel(p, in); !reflect.DeepEqual(r.Clone(), want.Clone()) {
			t.Fatalf("differs from the spec model:\n got %+v\nwant %+v", r, want)
		}
	})
}

// comparable strips EndpointResult.Index, which is an input position, and
// replaces it with the endpoint identity.
type identResult struct {
	Outcome      Outcome
	NTA, Dropped uint64
	TotalPanic   bool
	Priorities   []PriorityResult
	Localities   []LocalityResult
	Endpoints    []EndpointResult
	Addresses    []string
}

func byIdentity(r *Result, in []Endpoint) identResult {
	c := r.Clone()
	out := identResult{Outcome: c.Outcome, NTA: c.NTA, Dropped: c.DroppedMillionths, TotalPanic: c.TotalPanic,
		Priorities: c.Priorities, Localities: c.Localities, Endpoints: c.Endpoints}
	for i := range out.Endpoints {
		e := in[out.Endpoints[i].Index]
		out.Addresses = append(out.Addresses, fmt.Sprintf("%s:%d", e.Address, e.Port))
		out.Endpoints[i].Index = 0
	}
	return out
}

// (b) Permutation invariance, for valid inputs and for the first validation
// error of invalid ones.
func TestPropertyPermutationInvariance(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p, in := genPolicy.Draw(t, "policy"), genEndpoints.Draw(t, "endpoints")
		if len(in) > 1 && rapid.IntRange(0, 4).Draw(t, "corrupt") == 0 {
			i := rapid.IntRange(0, len(in)-1).Draw(t, "victim")
			switch rapid.IntRange(0, 3).Draw(t, "how") {
			case 0:
				in[i].Weight = 0
			case 1:
				in[i].Priority = 200
			case 2:
				in[i].Address, in[i].Port = in[(i+1)%len(in)].Address, in[(i+1)%len(in)].Port
			default:
				in[i].LocalityWeight++
			}
		}
		perm := rapid.Permutation(in).Draw(t, "permutation")
		c := NewCalculator()
		r1, err1 := c.Compute(p, in)
		var a identResult
		if err1 == nil {
			a = byIdentity(r1, in)
		}
		r2, err2 := c.Compute(p, perm)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("errors differ: %v vs %v", err1, err2)
		}
		if err1 != nil {
			for _, s := range sentinels {
				if errors.Is(err1, s) != errors.Is(err2, s) {
					t.Fatalf("error kinds differ: %v vs %v", err1, err2)
				}
			}
			return
		}
		if b := byIdentity(r2, perm); !reflect.DeepEqual(a, b) {
			t.Fatalf("permuted input changed the result:\n%+v\n%+v", a, b)
		}
	})
}

// usesPanicSet reports whether the selectable set of priority pi is its
// panic-eligible set (in panic, UseAll, Routable) rather than its eligible set.
func usesPanicSet(p Policy, r *Result, pi int) bool {
	return r.Priorities[pi].InPanic && p.PanicMode == UseAll && r.Outcome == Routable
}

// (c) Monotonicity. Turning one eligible endpoint ineligible (probe
// Unhealthy, circuit Open or Ejected: it stays configured and panic-eligible,
// so T_L and the panic set are unchanged) never raises its locality's
// Availability, provided its priority does not switch from selecting the
// eligible set to selecting the panic-eligible set. That switch is excluded
// because it is the one case where the selectable set grows: under UseAll a
// priority newly in panic (or a newly total panic) selects every
// panic-eligible endpoint, a superset of the eligible ones. In every other
// case the selectable set shrinks (eligible → eligible minus one; panic set →
// eligible ⊆ panic set) or stays equal (panic set → panic set), and
// floor(opf × S × 10_000 / T), the min-unit and the cap are all monotone in S.
func TestPropertyMonotonicity(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p, in := genPolicy.Draw(t, "policy"), genEndpoints.Draw(t, "endpoints")
		before := mustCompute(t, p, in).Clone()
		var candidates []int // positions in before.Endpoints
		for k, er := range before.Endpoints {
			if er.Eligible {
				candidates = append(candidates, k)
			}
		}
		if len(candidates) == 0 {
			return
		}
		k := rapid.SampledFrom(candidates).Draw(t, "endpoint")
		idx := before.Endpoints[k].Index
		switch rapid.IntRange(0, 2).Draw(t, "signal") {
		case 0:
			in[idx].Probe = ProbeUnhealthy
		case 1:
			in[idx].Circuit = CircuitOpen
		default:
			in[idx].Ejected = true
		}
		after := mustCompute(t, p, in)
		// Same topology, so positions in the canonical order are unchanged.
		li := -1
		for i, l := range before.Localities {
			if k >= l.FirstEndpoint && k < l.FirstEndpoint+l.EndpointCount {
				li = i
			}
		}
		pi := -1
		for i, pr := range before.Priorities {
			if li >= pr.FirstLocality && li < pr.FirstLocality+pr.LocalityCount {
				pi = i
			}
		}
		wasPanicSet, isPanicSet := usesPanicSet(p, before, pi), usesPanicSet(p, after, pi)
		if !wasPanicSet && isPanicSet {
			return // the selectable set grew: excluded, see above
		}
		b, a := before.Localities[li].Availability, after.Localities[li].Availability
		if a > b {
			t.Fatalf("availability of %v rose from %d to %d (panic set %v→%v)", before.Localities[li].Locality, b, a, wasPanicSet, isPanicSet)
		}
		if wasPanicSet && isPanicSet && a != b {
			t.Fatalf("panic set unchanged but availability %d → %d", b, a)
		}
		if after.Priorities[pi].EligibleWeight > before.Priorities[pi].EligibleWeight ||
			after.Priorities[pi].Health > before.Priorities[pi].Health {
			t.Fatalf("priority eligible weight or health rose")
		}
	})
}

// (d) A failover priority never takes load from a 100 % healthy one, and
// locality weights of higher priorities never change any load.
func TestPropertyFailoverAndLocalityWeightIndependence(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p, in := genPolicy.Draw(t, "policy"), genEndpoints.Draw(t, "endpoints")
		r := mustCompute(t, p, in).Clone()
		if len(r.Priorities) == 0 {
			return
		}
		full := len(r.Priorities)
		for pi, pr := range r.Priorities {
			if pr.Health == Million {
				full = min(full, pi)
				for _, q := range r.Priorities[pi+1:] {
					if q.Load != 0 {
						t.Fatalf("priority %d has health 100%% but priority %d gets load %d", pr.Priority, q.Priority, q.Load)
					}
				}
			}
		}
		// Scale the locality weights of every priority above a cut (the first
		// fully healthy priority if any, else a random one).
		cut := full
		if cut == len(r.Priorities) {
			cut = rapid.IntRange(0, len(r.Priorities)-1).Draw(t, "cut")
		}
		factor := rapid.OneOf(rapid.Uint64Range(2, 1000), rapid.Just[uint64](MaxWeight)).Draw(t, "factor")
		scaled := append([]Endpoint(nil), in...)
		for i := range scaled {
			if scaled[i].Priority > r.Priorities[cut].Priority {
				// at most 5 localities per priority: a cap of MaxWeight/5 keeps their sum valid
				if capW := uint64(MaxWeight / 5); scaled[i].LocalityWeight > capW/factor {
					scaled[i].LocalityWeight = capW
				} else {
					scaled[i].LocalityWeight *= factor
				}
			}
		}
		// Capping keeps each group consistent (same input weight ⇒
		// same output weight), so the scaled input stays valid.
		s := mustCompute(t, p, scaled)
		if s.Outcome != r.Outcome || s.NTA != r.NTA || s.TotalPanic != r.TotalPanic || s.DroppedMillionths != r.DroppedMillionths {
			t.Fatalf("stage 1 changed: %v/%d/%v/%d → %v/%d/%v/%d", r.Outcome, r.NTA, r.TotalPanic, r.DroppedMillionths,
				s.Outcome, s.NTA, s.TotalPanic, s.DroppedMillionths)
		}
		for pi := range r.Priorities {
			a, b := r.Priorities[pi], s.Priorities[pi]
			if a != b {
				t.Fatalf("priority result changed by scaling locality weights ×%d above %d:\n%+v\n%+v", factor, r.Priorities[cut].Priority, a, b)
			}
		}
		if full < len(r.Priorities) {
			for _, l := range s.Localities[r.Priorities[full].FirstLocality+r.Priorities[full].LocalityCount:] {
				if l.Traffic != 0 {
					t.Fatalf("locality %v behind a fully healthy priority gets traffic %d", l.Locality, l.Traffic)
				}
			}
		}
	})
}

// (e) A Calculator reused across many inputs, valid and invalid, agrees with
// a fresh one: no scratch state leaks between computations.
func TestPropertyCalculatorReuse(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := NewCalculator()
		steps := rapid.IntRange(1, 8).Draw(t, "steps")
		for range steps {
			p, in := genPolicy.Draw(t, "policy"), genEndpoints.Draw(t, "endpoints")
			if len(in) > 0 && rapid.IntRange(0, 5).Draw(t, "corrupt") == 0 {
				in[rapid.IntRange(0, len(in)-1).Draw(t, "victim")].Weight = MaxWeight + 1
			}
			got, gotErr := c.Compute(p, in)
			want, wantErr := NewCalculator().Compute(p, in)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("errors differ: reused %v, fresh %v", gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got.Clone(), want.Clone()) {
				t.Fatalf("reused Calculator differs from a fresh one:\n%+v\n%+v", got, want)
			}
		}
	})
}

// (f) Replay: the same seed gives the same picks, and frequencies follow the
// integer shares.
func TestReplaySeeded(t *testing.T) {
	t.Parallel()
	mk := func(prio uint32, region, zone string, lw uint64, weights []uint64, healthy int) []Endpoint {
		out := make([]Endpoint, len(weights))
		for i, w := range weights {
			out[i] = Endpoint{Address: fmt.Sprintf("10.%d.%s.%s.%d", prio, region, zone, i), Port: 80, Priority: prio,
				Locality: Locality{Region: region, Zone: zone}, LocalityWeight: lw, Weight: w}
			if i >= healthy {
				out[i].Probe = ProbeUnhealthy
			}
		}
		return out
	}
	w10 := []uint64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	failClosed := DefaultPolicy()
	failClosed.PanicMode = FailClosed
	cases := []struct {
		name string
		p    Policy
		in   []Endpoint
	}{
		// P0 1/10 eligible: in panic, FailClosed drops its 140/862.58 of the load;
		// P1 spreads over three localities of uneven weight and health.
		{"failclosed-drop", failClosed, concat(mk(0, "eu", "a", 1, w10, 1),
			mk(1, "eu", "a", 3, []uint64{5, 1, 1, 2}, 4), mk(1, "us", "a", 1, []uint64{1, 1, 10}, 2), mk(1, "us", "b", 2, w10, 5))},
		// Seed example plus a spill priority and a partly healthy P0.
		{"useall-spill", DefaultPolicy(), concat(mk(0, "x", "", 1, []uint64{1, 1}, 1), mk(0, "y", "", 2, []uint64{1, 1}, 2),
			mk(0, "z", "", 5, w10, 4), mk(2, "w", "", 1, []uint64{3, 7}, 2))},
	}
	const picks = 200_000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Compute(tc.p, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkInvariants(tc.p, tc.in, r); err != nil {
				t.Fatal(err)
			}
			a, b := Seeded(r, tc.in, 42), Seeded(r, tc.in, 42)
			other := Seeded(r, tc.in, 43)
			locCount := make([]int, len(r.Localities))
			epCount := make([]int, len(r.Endpoints))
			dropped, differ := 0, false
			for range picks {
				x, y := a.Pick(), b.Pick()
				if x != y {
					t.Fatalf("same seed, different picks: %+v vs %+v", x, y)
				}
				if other.Pick() != x {
					differ = true
				}
				if x.Dropped {
					dropped++
					continue
				}
				l := r.Localities[x.Locality]
				pr := r.Priorities[x.Priority]
				if x.Locality < pr.FirstLocality || x.Locality >= pr.FirstLocality+pr.LocalityCount ||
					x.Endpoint < l.FirstEndpoint || x.Endpoint >= l.FirstEndpoint+l.EndpointCount || !r.Endpoints[x.Endpoint].Selectable {
					t.Fatalf("inconsistent pick %+v", x)
				}
				locCount[x.Locality]++
				epCount[x.Endpoint]++
			}
			if !differ {
				t.Errorf("seeds 42 and 43 gave identical sequences")
			}
			within := func(what string, got int, millionths uint64) {
				prob := float64(millionths) / Million
				sigma := math.Sqrt(picks * prob * (1 - prob))
				if diff := math.Abs(float64(got) - picks*prob); diff > 5*sigma+1 { // +1: share rounding ≤ 1e-6
					t.Errorf("%s: %d picks, expected %.0f ± %.0f (5σ)", what, got, picks*prob, 5*sigma)
				}
			}
			within("dropped", dropped, r.DroppedMillionths)
			for i, l := range r.Localities {
				within(fmt.Sprintf("locality p%d %v", l.Priority, l.Locality), locCount[i], l.Traffic)
			}
			for i, er := range r.Endpoints {
				within(fmt.Sprintf("endpoint %s", tc.in[er.Index].Address), epCount[i], er.Share)
			}
			if r.DroppedMillionths == 0 && tc.name == "failclosed-drop" {
				t.Errorf("case meant to exercise dropping drops nothing")
			}
		})
	}
}

// (g) Apportion: parts sum to total, each is floor or floor+1 of the exact
// quota, the extra units go to the largest remainders with ties to the
// earlier key.
func TestPropertyApportion(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.OneOf(rapid.Uint64Range(0, 20), rapid.Uint64Range(0, Million), rapid.Uint64()).Draw(t, "total")
		n := rapid.IntRange(0, 20).Draw(t, "n")
		limit := uint64(math.MaxUint64) / uint64(max(n, 1))
		w := make([]uint64, n)
		for i := range w {
			w[i] = rapid.OneOf(rapid.Uint64Range(0, 3), rapid.Uint64Range(0, 1000), rapid.Uint64Range(0, limit)).Draw(t, "w")
		}
		parts := Apportion(total, w)
		if len(parts) != n {
			t.Fatalf("%d parts for %d weights", len(parts), n)
		}
		sum := new(big.Int)
		for _, x := range w {
			sum.Add(sum, bigU(x))
		}
		if sum.Sign() == 0 {
			for _, x := range parts {
				if x != 0 {
					t.Fatalf("Σw = 0 but parts %v", parts)
				}
			}
			return
		}
		var got uint64
		rems := make([]*big.Int, n)
		extra := make([]bool, n)
		for i := range w {
			q, r := new(big.Int).QuoRem(new(big.Int).Mul(bigU(total), bigU(w[i])), sum, new(big.Int))
			rems[i] = r
			switch {
			case parts[i] == q.Uint64():
			case parts[i] == q.Uint64()+1 && r.Sign() > 0:
				extra[i] = true
			default:
				t.Fatalf("part %d = %d, exact quota %v + %v/%v", i, parts[i], q, r, sum)
			}
			got += parts[i]
		}
		if got != total {
			t.Fatalf("parts %v sum to %d, want %d", parts, got, total)
		}
		for i := range w {
			for j := range w {
				if extra[i] && !extra[j] {
					if c := rems[i].Cmp(rems[j]); c < 0 || (c == 0 && i > j) {
						t.Fatalf("key %d (rem %v) got a unit before key %d (rem %v)", i, rems[i], j, rems[j])
					}
				}
			}
		}
		if !reflect.DeepEqual(parts, specApportion(total, w)) {
			t.Fatalf("differs from the big-integer reference")
		}
	})
}

func TestApportionTies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		total uint64
		w     []uint64
		want  []uint64
	}{
		{1, []uint64{1, 1}, []uint64{1, 0}},
		{2, []uint64{1, 1, 1}, []uint64{1, 1, 0}},
		{1, []uint64{0, 2, 2}, []uint64{0, 1, 0}},
		{5, []uint64{0, 0}, []uint64{0, 0}},
		{Million, []uint64{700_000, 2_000_000}, []uint64{259_259, 740_741}},
		{math.MaxUint64, []uint64{1, 1}, []uint64{1 << 63, 1<<63 - 1}},
	} {
		if got := Apportion(tc.total, tc.w); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Apportion(%d, %v) = %v, want %v", tc.total, tc.w, got, tc.want)
		}
	}
}
