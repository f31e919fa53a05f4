package outlier

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
)

var (
	up     = topology.Key{Namespace: "ns", Name: "svc"}
	t0     = time.Unix(1_800_000_000, 0)
	window = 30 * time.Second
	cfg    = topology.OutlierDetection{ErrorPercent: 20, MinRequestVolume: 100, MinReporters: 3,
		BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 10}
)

// endpoints is n endpoints of weight 1, in canonical order.
func endpoints(n int) []Endpoint {
	var out []Endpoint
	for i := range n {
		out = append(out, Endpoint{Address: addr(i), Port: 8080, Weight: 1})
	}
	return out
}

// bad is an aggregate where the listed endpoints (of n) fail at errPct
// percent of 1,000 requests from 5 clients, all failing; the rest succeed.
func bad(n int, errPct uint64, idx ...int) Aggregate {
	agg := Aggregate{Reporters: 5}
	for i := range n {
		e := summary(addr(i), 8080, 1000, 0, 5)
		if slices.Contains(idx, i) {
			e = summary(addr(i), 8080, 1000, errPct*10, 5, "c0", "c1", "c2", "c3", "c4")
		}
		agg.Endpoints = append(agg.Endpoints, e)
	}
	return agg
}

func ejected(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Ejected {
			out = append(out, v.Address)
		}
	}
	return out
}

func TestDecideThresholds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  func(*topology.OutlierDetection)
		agg  Aggregate
		want []string
	}{
		{"healthy", nil, bad(10, 0), nil},
		{"one at 48 %", nil, bad(10, 48, 3), []string{addr(3)}},
		{"exactly errorPercent ejects", nil, bad(10, 20, 3), []string{addr(3)}},
		{"just below errorPercent does not", nil, func() Aggregate { a := bad(10, 20, 3); a.Endpoints[3].Errors--; return a }(), nil},
		{"too few requests", func(c *topology.OutlierDetection) { c.MinRequestVolume = 1001 }, bad(10, 50, 3), nil},
		{"too few failing reporters", func(c *topology.OutlierDetection) { c.MinReporters = 6 }, bad(10, 50, 3), nil},
		{"the cap: 10 % of 10 is one, the worst first", nil, bad(10, 50, 2, 5, 7), []string{addr(2)}},
		{"the worst ratio first", nil, func() Aggregate { a := bad(10, 30, 2, 5, 7); a.Endpoints[5].Errors = 900; return a }(), []string{addr(5)}},
		{"maxEjectionPercent 0 still ejects one", func(c *topology.OutlierDetection) { c.MaxEjectionPercent = 0 }, bad(4, 100, 0, 1), []string{addr(0)}},
		{"25 % of 4 is one", func(c *topology.OutlierDetection) { c.MaxEjectionPercent = 25 }, bad(4, 100, 0, 1), []string{addr(0)}},
		{"50 % of 4 is two", func(c *topology.OutlierDetection) { c.MaxEjectionPercent = 50 }, bad(4, 100, 0, 1, 3), []string{addr(0), addr(1)}},
		{"a lone endpoint is never ejected under 100 %", nil, bad(1, 100, 0), nil},
		{"100 % ejects a lone endpoint", func(c *topology.OutlierDetection) { c.MaxEjectionPercent = 100 }, bad(1, 100, 0), []string{addr(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			n := len(tc.agg.Endpoints)
			if n == 0 {
				n = 10
			}
			got := ejected(NewDecider(window).Decide(up, c, tc.agg, endpoints(n), t0))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ejected %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDecideWeightedCap: the cap is on configured weight, not endpoints.
func TestDecideWeightedCap(t *testing.T) {
	t.Parallel()
	eps := endpoints(4)
	eps[0].Weight, eps[1].Weight = 7, 1 // total 10: 20 % is 2
	c := cfg
	c.MaxEjectionPercent = 20
	got := ejected(NewDecider(window).Decide(up, c, bad(4, 100, 0, 1, 2), eps, t0))
	// addr 0 (weight 7) goes first as the one always allowed; then nothing fits
	if !slices.Equal(got, []string{addr(0)}) {
		t.Errorf("ejected %v", got)
	}
	eps[0].Weight = 1 // total 4: 20 % is 0.8, so one (the minimum)
	got = ejected(NewDecider(window).Decide(up, c, bad(4, 100, 0, 1, 2), eps, t0))
	if !slices.Equal(got, []string{addr(0)}) {
		t.Errorf("ejected %v", got)
	}
}

// TestEjectionLifecycle: the ejection lasts base × count capped at max; it
// ends by itself; a second one needs new evidence and lasts longer; healthy
// windows decay the count; the origin says what was seen.
func TestEjectionLifecycle(t *testing.T) {
	t.Parallel()
	d := NewDecider(window)
	c := cfg
	c.MaxEjectionTime = 75 * time.Second
	eps := endpoints(10)
	agg := bad(10, 48, 3)
	agg.Endpoints[3].Requests, agg.Endpoints[3].Errors, agg.Endpoints[3].Reporters = 1240, 600, 7

	v := d.Decide(up, c, agg, eps, t0)
	want := []Verdict{{Address: addr(3), Port: 8080, Ejected: true, Origin: "load reports: 7 clients, at least 5 failing, 1,240 requests, 48 % errors, window 30 s"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("first: %+v", v)
	}
	if e := d.Ejections(up); len(e) != 1 || e[0].Until != t0.Add(30*time.Second) || e[0].Count != 1 {
		t.Fatalf("ejections %+v", e)
	}
	// still ejected, still failing: no change
	if v := d.Decide(up, c, agg, eps, t0.Add(29*time.Second)); v != nil {
		t.Fatalf("during: %+v", v)
	}
	// time up: it returns, even though the window still says it fails
	v = d.Decide(up, c, agg, eps, t0.Add(30*time.Second))
	if !reflect.DeepEqual(v, []Verdict{{Address: addr(3), Port: 8080}}) {
		t.Fatalf("end: %+v", v)
	}
	// new evidence (a window after the ejection began): ejected again for 2 × 30 s
	v = d.Decide(up, c, agg, eps, t0.Add(35*time.Second))
	if ejected(v) == nil {
		t.Fatalf("second: %+v", v)
	}
	if e := d.Ejections(up); e[0].Count != 2 || e[0].Until != t0.Add(95*time.Second) {
		t.Fatalf("second ejection %+v", e)
	}
	// returns at 95 s; the third is capped at 75 s
	d.Decide(up, c, agg, eps, t0.Add(95*time.Second))
	d.Decide(up, c, agg, eps, t0.Add(125*time.Second))
	if e := d.Ejections(up); e[0].Count != 3 || e[0].Until != t0.Add(200*time.Second) {
		t.Fatalf("third ejection %+v", e)
	}
	// returns at 200 s, then healthy: the count decays by one a window
	healthy := bad(10, 0)
	d.Decide(up, c, healthy, eps, t0.Add(200*time.Second))
	d.Decide(up, c, healthy, eps, t0.Add(260*time.Second)) // two windows: 3 → 1
	d.Decide(up, c, agg, eps, t0.Add(261*time.Second))
	if e := d.Ejections(up); len(e) != 1 || e[0].Count != 2 {
		t.Fatalf("after decay %+v", e)
	}
	// the state is freed once the count is zero
	d.Decide(up, c, healthy, eps, t0.Add(400*time.Second))
	d.Decide(up, c, healthy, eps, t0.Add(500*time.Second))
	if len(d.Upstreams()) != 0 {
		t.Errorf("state kept: %v", d.Upstreams())
	}
}

// TestDecideEndpointsLeaving: an ejected endpoint that leaves the upstream
// is withdrawn; Forget withdraws every ejection.
func TestDecideEndpointsLeaving(t *testing.T) {
	t.Parallel()
	d := NewDecider(window)
	c := cfg
	c.MaxEjectionPercent = 50
	d.Decide(up, c, bad(4, 100, 0, 1), endpoints(4), t0)
	v := d.Decide(up, c, bad(4, 100, 0, 1), endpoints(4)[1:], t0.Add(time.Second))
	if !reflect.DeepEqual(v, []Verdict{{Address: addr(0), Port: 8080}}) {
		t.Fatalf("left: %+v", v)
	}
	if v := d.Forget(up); !reflect.DeepEqual(v, []Verdict{{Address: addr(1), Port: 8080}}) {
		t.Fatalf("forget: %+v", v)
	}
}

func TestOriginFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    EndpointSummary
		w    time.Duration
		want string
	}{
		{EndpointSummary{Requests: 12400, Errors: 5084, Reporters: 37, Failing: 20, FailingFloor: 12, Instances: InstanceSet{1, 2, 3}}, 30 * time.Second,
			"load reports: 37 clients, at least 12 failing, 12,400 requests, 41 % errors, window 30 s"},
		{EndpointSummary{Requests: 1<<64 - 1, Errors: 1<<64 - 1, Reporters: 1000, Failing: 1500, FailingFloor: 700, Instances: make(InstanceSet, 1000)}, 1500 * time.Millisecond,
			"load reports: 1,000 clients, at least 1,000 failing, 18,446,744,073,709,551,615 requests, 100 % errors, window 1500 ms"},
		{EndpointSummary{Requests: 3, Errors: 2, Reporters: 1}, time.Minute, "load reports: 1 clients, at least 0 failing, 3 requests, 66 % errors, window 60 s"},
	} {
		if got := Origin(tc.e, tc.w); got != tc.want {
			t.Errorf("Origin(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}

// TestDecideProperties: over random aggregates, weights and configurations,
// the ejected weight never passes the cap (beyond the one endpoint always
// allowed), and the decisions do not depend on the order of the aggregate's
// entries.
func TestDecideProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 2))
	for iter := range 2000 {
		n := 1 + rng.IntN(12)
		eps := endpoints(n)
		for i := range eps {
			eps[i].Weight = 1 + rng.Uint64N(100)
		}
		c := topology.OutlierDetection{ErrorPercent: 1 + uint32(rng.IntN(100)), MinRequestVolume: 1 + rng.Uint64N(200),
			MinReporters: 1 + uint32(rng.IntN(4)), BaseEjectionTime: time.Duration(1+rng.IntN(10)) * time.Second,
			MaxEjectionPercent: uint32(rng.IntN(101))}
		c.MaxEjectionTime = c.BaseEjectionTime * time.Duration(1+rng.IntN(5))
		d1, d2 := NewDecider(5*time.Second), NewDecider(5*time.Second)
		now := t0
		for step := range 20 {
			agg := Aggregate{}
			for i := range n {
				req := rng.Uint64N(400)
				rep := rng.Uint64N(6)
				failing := rng.Uint64N(rep + 1)
				agg.Endpoints = append(agg.Endpoints, EndpointSummary{Address: addr(i), Port: 8080, Requests: req,
					Errors: rng.Uint64N(req + 1), Reporters: rep, Failing: failing, FailingFloor: failing})
			}
			shuffled := agg
			shuffled.Endpoints = slices.Clone(agg.Endpoints)
			rng.Shuffle(n, func(i, j int) {
				shuffled.Endpoints[i], shuffled.Endpoints[j] = shuffled.Endpoints[j], shuffled.Endpoints[i]
			})
			v1 := d1.Decide(up, c, agg, eps, now)
			v2 := d2.Decide(up, c, shuffled, eps, now)
			if !reflect.DeepEqual(v1, v2) {
				t.Fatalf("iteration %d step %d: order changed the decisions:\n%+v\n%+v", iter, step, v1, v2)
			}
			var total, out uint64
			for _, e := range eps {
				total += e.Weight
			}
			ej := d1.Ejections(up)
			for _, e := range ej {
				i := slices.IndexFunc(eps, func(x Endpoint) bool { return x.Address == e.Address })
				out += eps[i].Weight
			}
			if len(ej) > 1 && out*100 > total*uint64(c.MaxEjectionPercent) {
				t.Fatalf("iteration %d step %d: %d of %d weight ejected, cap %d %%: %+v", iter, step, out, total, c.MaxEjectionPercent, ej)
			}
			if n < 2 && len(ej) > 0 && c.MaxEjectionPercent < 100 {
				t.Fatalf("a lone endpoint ejected under a cap of %d %%", c.MaxEjectionPercent)
			}
			now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
		}
	}
}
