package demand

import (
	"slices"
	"testing"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
)

func demandIn(pairs ...any) []affinity.Demand {
	var out []affinity.Demand
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, affinity.Demand{Zone: topology.ClassZone(pairs[i].(string)), Weight: uint64(pairs[i+1].(int))})
	}
	return out
}

// The rate → demand conversion: which source is in force, the shares, and
// their bounds.
func TestObserveDemand(t *testing.T) {
	census := map[string]uint64{"eu/a": 1, "eu/b": 3}
	censusDemand := demandIn("eu/a", 1, "eu/b", 3)
	const window = 30 * time.Second
	for _, tc := range []struct {
		name      string
		loads     loadReading
		fromLoads bool // the applied demand is from load reports
		want      []affinity.Demand
		fromLoad  bool
		total     uint64
	}{
		{name: "the upstream's clients do not report load", loads: loadReading{}, want: censusDemand},
		{name: "no reports in the window", loads: loadReading{ok: true}, want: censusDemand},
		{name: "too few requests to switch", loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 74, "eu/b": 25}}, want: censusDemand},
		{name: "enough requests to keep load reports once applied", fromLoads: true,
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 45, "eu/b": 15}}, want: demandIn("eu/a", 750, "eu/b", 250), fromLoad: true, total: 60},
		{name: "too few even to keep them", fromLoads: true,
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 30, "eu/b": 10}}, want: censusDemand},
		{name: "two classes at 3:1", loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 300, "eu/b": 100}},
			want: demandIn("eu/a", 750, "eu/b", 250), fromLoad: true, total: 400},
		{name: "region classes and clients without a locality count nothing",
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 90, "eu": 1000, "": 1000, "us/c": 10}},
			want:  demandIn("eu/a", 900, "us/c", 100), fromLoad: true, total: 100},
		{name: "largest remainder, ties by zone order",
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/c": 100, "eu/b": 100, "eu/a": 100}},
			want:  demandIn("eu/a", 334, "eu/b", 333, "eu/c", 333), fromLoad: true, total: 300},
		{name: "a zone that reported is at least 1",
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 2000, "eu/b": 1000, "us/x": 1}},
			want:  demandIn("eu/a", 667, "eu/b", 333, "us/x", 1), fromLoad: true, total: 3001},
		{name: "a saturated count is clamped",
			loads: loadReading{ok: true, requests: map[string]uint64{"eu/a": 1<<64 - 1, "eu/b": 1 << 40, "us/c": 1 << 38}},
			want:  demandIn("eu/a", 445, "eu/b", 444, "us/c", 111), fromLoad: true, total: 1<<41 + 1<<38},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := observeDemand(census, tc.loads, window, tc.fromLoads)
			if !slices.Equal(got.Zones, tc.want) || got.LoadReports != tc.fromLoad || got.Requests != tc.total {
				t.Errorf("got %+v, want %v from loads %v (%d requests)", got, tc.want, tc.fromLoad, tc.total)
			}
			if tc.fromLoad && got.Window != window {
				t.Errorf("window %v", got.Window)
			}
			var sum uint64
			for _, d := range got.Zones {
				sum += d.Weight
			}
			if tc.fromLoad && (sum < Scale || sum > Scale+uint64(len(got.Zones))) {
				t.Errorf("shares sum to %d", sum)
			}
		})
	}
}

// Noise in the rates does not move the demand: a reading counts as changed
// only when some zone's share leaves the band around the applied one.
func TestLoadDemandHoldsWithinTheBand(t *testing.T) {
	load := func(a, b, c uint64) reading {
		return observeDemand(nil, loadReading{ok: true, requests: map[string]uint64{"eu/a": a, "eu/b": b, "us/c": c}}, time.Minute, false)
	}
	applied := load(3000, 1000, 0) // 750 / 250
	for _, tc := range []struct {
		name string
		next reading
		same bool
	}{
		{"the same shares from other counts", load(600, 200, 0), true},
		{"noise of a few per cent of the rate", load(3090, 970, 0), true}, // 761 / 239
		{"a share 20 per mille off", load(3080, 920, 0), true},            // 770 / 230
		{"a share 21 per mille off", load(3084, 916, 0), false},           // 771 / 229
		{"a new zone within the band", load(3000, 1000, 40), true},        // 743 / 247 / 10
		{"a new zone beyond it", load(3000, 1000, 200), false},            // 714 / 238 / 48
		{"the census instead", reading{Zones: demandIn("eu/a", 3, "eu/b", 1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameDemand(tc.next, applied); got != tc.same {
				t.Errorf("%v against %v: same %v, want %v", tc.next.Zones, applied.Zones, got, tc.same)
			}
		})
	}
	// the census compares exactly
	a, b := reading{Zones: demandIn("eu/a", 3)}, reading{Zones: demandIn("eu/a", 4)}
	if sameDemand(a, b) || !sameDemand(a, a) || !sameDemand(reading{}, reading{}) {
		t.Error("census demand compares exactly")
	}
}
