package weights

import (
	"errors"
	"fmt"
	"testing"
)

// eps builds n endpoints of weight 1 in one (priority, locality); the first
// `eligible` of them are healthy and the rest probe-Unhealthy.
func eps(prio uint32, region string, localityWeight uint64, n, eligible int) []Endpoint {
	out := make([]Endpoint, n)
	for i := range out {
		out[i] = Endpoint{
			Address: fmt.Sprintf("10.%d.%s.%d", prio, region, i), Port: 8080,
			Priority: prio, Locality: Locality{Region: region},
			LocalityWeight: localityWeight, Weight: 1,
		}
		if i >= eligible {
			out[i].Probe = ProbeUnhealthy
		}
	}
	return out
}

func concat(parts ...[]Endpoint) []Endpoint {
	var out []Endpoint
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestWorkedExample1Seed(t *testing.T) {
	t.Parallel()
	r, err := Compute(DefaultPolicy(), concat(eps(0, "x", 1, 2, 1), eps(0, "y", 2, 2, 2)))
	if err != nil {
		t.Fatal(err)
	}
	x, y := r.Localities[0], r.Localities[1]
	check(t, "avail_X", x.Availability, 700_000)
	check(t, "eff_X", x.EffectiveWeight, 700_000)
	check(t, "avail_Y", y.Availability, 1_000_000)
	check(t, "eff_Y", y.EffectiveWeight, 2_000_000)
	check(t, "traffic_X", x.Traffic, 259_259)
	check(t, "traffic_Y", y.Traffic, 740_741)
}

func TestWorkedExample2Threshold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		eligible int
		want     uint64
	}{{7, 1_000_000}, {5, 1_000_000}, {4, 800_000}} {
		r, err := Compute(DefaultPolicy(), eps(0, "a", 1, 7, tc.eligible))
		if err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("avail with %d/7", tc.eligible), r.Localities[0].Availability, tc.want)
	}
}

func TestWorkedExample3PrioritySpill(t *testing.T) {
	t.Parallel()
	for _, p1Weight := range []uint64{1, 1000} {
		r, err := Compute(DefaultPolicy(), concat(eps(0, "a", 1, 10, 5), eps(1, "b", p1Weight, 4, 4)))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "health_0", r.Priorities[0].Health, 700_000)
		check(t, "health_1", r.Priorities[1].Health, 1_000_000)
		check(t, "NTA", r.NTA, 1_000_000)
		check(t, "load_0", r.Priorities[0].Load, 700_000)
		check(t, "load_1", r.Priorities[1].Load, 300_000)
	}
}

func TestWorkedExample4Panic(t *testing.T) {
	t.Parallel()
	in := eps(0, "a", 1, 10, 3)
	r, err := Compute(DefaultPolicy(), in)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "health", r.Priorities[0].Health, 420_000)
	check(t, "NTA", r.NTA, 420_000)
	if !r.TotalPanic || r.Outcome != Routable {
		t.Fatalf("want total panic, routable; got %v %v", r.TotalPanic, r.Outcome)
	}
	check(t, "load", r.Priorities[0].Load, 1_000_000)
	for _, e := range r.Endpoints {
		if !e.Selectable || e.Share != 100_000 {
			t.Errorf("endpoint %d: selectable %v share %d, want true 100000", e.Index, e.Selectable, e.Share)
		}
	}
	p := DefaultPolicy()
	p.PanicMode = FailClosed
	r, err = Compute(p, in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != PanicRejected || r.DroppedMillionths != Million {
		t.Fatalf("FailClosed: outcome %v dropped %d", r.Outcome, r.DroppedMillionths)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	base := func() []Endpoint { return eps(0, "a", 1, 3, 3) }
	for _, tc := range []struct {
		name   string
		mutate func([]Endpoint) []Endpoint
		want   error
	}{
		{"zero weight", func(e []Endpoint) []Endpoint { e[1].Weight = 0; return e }, ErrInvalidWeight},
		{"huge weight", func(e []Endpoint) []Endpoint { e[1].Weight = MaxWeight + 1; return e }, ErrInvalidWeight},
		{"zero locality weight", func(e []Endpoint) []Endpoint { e[2].LocalityWeight = 0; return e }, ErrInvalidWeight},
		{"priority 128", func(e []Endpoint) []Endpoint { e[0].Priority = 128; return e }, ErrInvalidPriority},
		{"duplicate", func(e []Endpoint) []Endpoint { e[2].Address = e[0].Address; return e }, ErrDuplicateEndpoint},
		{"inconsistent", func(e []Endpoint) []Endpoint { e[2].LocalityWeight = 2; return e }, ErrInconsistentTopology},
		{"locality sum overflow", func(e []Endpoint) []Endpoint {
			for i := range e {
				e[i].Weight = MaxWeight
			}
			return e
		}, ErrWeightOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compute(DefaultPolicy(), tc.mutate(base()))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func check(t *testing.T, what string, got, want uint64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %d, want %d", what, got, want)
	}
}
