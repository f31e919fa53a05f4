package publish

import (
	"maps"
	"slices"
	"testing"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xdsname"
)

func demandIn(pairs ...any) []affinity.Demand {
	var out []affinity.Demand
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, affinity.Demand{Zone: ClassOf(pairs[i].(string)), Weight: uint64(pairs[i+1].(int))})
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
		name     string
		reading  loadReading
		applied  DemandOrigin
		want     []affinity.Demand
		fromLoad bool
		total    uint64
	}{
		{name: "the upstream's clients do not report load", reading: loadReading{}, want: censusDemand},
		{name: "no reports in the window", reading: loadReading{ok: true}, want: censusDemand},
		{name: "too few requests to switch", reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 74, "eu/b": 25}}, want: censusDemand},
		{name: "enough requests to keep load reports once applied", applied: DemandOrigin{LoadReports: true},
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 45, "eu/b": 15}}, want: demandIn("eu/a", 750, "eu/b", 250), fromLoad: true, total: 60},
		{name: "too few even to keep them", applied: DemandOrigin{LoadReports: true},
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 30, "eu/b": 10}}, want: censusDemand},
		{name: "two classes at 3:1", reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 300, "eu/b": 100}},
			want: demandIn("eu/a", 750, "eu/b", 250), fromLoad: true, total: 400},
		{name: "region classes and clients without a locality count nothing",
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 90, "eu": 1000, "": 1000, "us/c": 10}},
			want:    demandIn("eu/a", 900, "us/c", 100), fromLoad: true, total: 100},
		{name: "largest remainder, ties by zone order",
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/c": 100, "eu/b": 100, "eu/a": 100}},
			want:    demandIn("eu/a", 334, "eu/b", 333, "eu/c", 333), fromLoad: true, total: 300},
		{name: "a zone that reported is at least 1",
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 2000, "eu/b": 1000, "us/x": 1}},
			want:    demandIn("eu/a", 667, "eu/b", 333, "us/x", 1), fromLoad: true, total: 3001},
		{name: "a saturated count is clamped",
			reading: loadReading{ok: true, requests: map[string]uint64{"eu/a": 1<<64 - 1, "eu/b": 1 << 40, "us/c": 1 << 38}},
			want:    demandIn("eu/a", 445, "eu/b", 444, "us/c", 111), fromLoad: true, total: 1<<41 + 1<<38},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := observeDemand(census, tc.reading, window, tc.applied)
			if !slices.Equal(got.demand, tc.want) || got.origin.LoadReports != tc.fromLoad || got.origin.Requests != tc.total {
				t.Errorf("got %v %+v, want %v from loads %v (%d requests)", got.demand, got.origin, tc.want, tc.fromLoad, tc.total)
			}
			if tc.fromLoad && got.origin.Window != window {
				t.Errorf("window %v", got.origin.Window)
			}
			var sum uint64
			for _, d := range got.demand {
				sum += d.Weight
			}
			if tc.fromLoad && (sum < DemandScale || sum > DemandScale+uint64(len(got.demand))) {
				t.Errorf("shares sum to %d", sum)
			}
		})
	}
}

// Noise in the rates does not move the demand: a reading counts as changed
// only when some zone's share leaves the band around the applied one.
func TestLoadDemandHoldsWithinTheBand(t *testing.T) {
	load := func(a, b, c uint64) demandReading {
		return observeDemand(nil, loadReading{ok: true, requests: map[string]uint64{"eu/a": a, "eu/b": b, "us/c": c}}, time.Minute, DemandOrigin{})
	}
	applied := load(3000, 1000, 0) // 750 / 250
	for _, tc := range []struct {
		name string
		next demandReading
		same bool
	}{
		{"the same shares from other counts", load(600, 200, 0), true},
		{"noise of a few per cent of the rate", load(3090, 970, 0), true}, // 761 / 239
		{"a share 20 per mille off", load(3080, 920, 0), true},            // 770 / 230
		{"a share 21 per mille off", load(3084, 916, 0), false},           // 771 / 229
		{"a new zone within the band", load(3000, 1000, 40), true},        // 743 / 247 / 10
		{"a new zone beyond it", load(3000, 1000, 200), false},            // 714 / 238 / 48
		{"the census instead", demandReading{demand: demandIn("eu/a", 3, "eu/b", 1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameDemand(tc.next, applied); got != tc.same {
				t.Errorf("%v against %v: same %v, want %v", tc.next.demand, applied.demand, got, tc.same)
			}
		})
	}
	// the census compares exactly
	a, b := demandReading{demand: demandIn("eu/a", 3)}, demandReading{demand: demandIn("eu/a", 4)}
	if sameDemand(a, b) || !sameDemand(a, a) || !sameDemand(demandReading{}, demandReading{}) {
		t.Error("census demand compares exactly")
	}
}

// fakeLoads is a LoadDemand whose reports the test sets.
type fakeLoads struct {
	requests map[string]uint64
	reads    int
}

func (f *fakeLoads) demand() LoadDemand {
	return LoadDemand{Bucket: 5 * time.Second, Window: 30 * time.Second,
		Requests: func(cluster string, _ time.Time) (map[string]uint64, bool) {
			f.reads++
			return maps.Clone(f.requests), cluster == xdsname.Cluster(web)
		}}
}

// A Balanced upstream whose clients report load follows the reported
// request rates, with the same hysteresis as the census; noise within the
// band moves nothing, and without enough reports the census is back.
func TestBalancedFollowsLoadReportsWithHysteresis(t *testing.T) {
	c, p, clk, _ := balancedOnClock(t)
	loads := &fakeLoads{}
	p.SetLoadDemand(loads.demand())
	// the census says 1:1 (one client each) ...
	for _, s := range []*xdscache.Stream{client(t, c, "eu", "a", 0), client(t, c, "eu", "b", 0)} {
		defer s.Close()
	}
	p.cls.censusAt = clk.t
	p.refreshClasses()
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	census := demandIn("eu/a", 1, "eu/b", 1)
	if got, from := p.AppliedDemandFrom(web); !slices.Equal(got, census) || from.LoadReports {
		t.Fatalf("applied %v from %+v, want the census %v", got, from, census)
	}
	// ... the reports 3:1, and a zone without clients here counts nothing
	loads.requests = map[string]uint64{"eu/a": 300, "eu/b": 100, "us/c": 1000}
	clk.t = clk.t.Add(5 * time.Second) // the next bucket
	p.refreshClasses()
	if got, _ := p.AppliedDemandFrom(web); !slices.Equal(got, census) {
		t.Fatalf("load demand applied before DemandQuiet: %v", got)
	}
	clk.t = clk.t.Add(DemandQuiet)
	reads := loads.reads
	p.refreshClasses()
	if loads.reads != reads {
		t.Errorf("read the reports again within one bucket")
	}
	want := demandIn("eu/a", 750, "eu/b", 250)
	got, from := p.AppliedDemandFrom(web)
	if !slices.Equal(got, want) || !from.LoadReports || from.Requests != 400 || from.Window != 30*time.Second {
		t.Fatalf("applied %v from %+v, want %v from load reports", got, from, want)
	}
	// eu/a: (1/3)/(3/4) = 4/9 local, the rest to eu/b and us/c by their
	// surpluses 1/12 and 1/3 (us/c has no demand here)
	if got := trafficOf(t, c, "eu/a"); !maps.Equal(got, map[string]uint32{"eu/a": 444_445, "eu/b": 111_111, "us/c": 444_444}) {
		t.Errorf("eu/a: %v", got)
	}
	changed := p.DemandChanged()
	// noise, bucket after bucket: nothing moves
	for i, r := range [][2]uint64{{310, 95}, {290, 105}, {305, 100}, {2900, 1050}} {
		loads.requests = map[string]uint64{"eu/a": r[0], "eu/b": r[1]}
		clk.t = clk.t.Add(5 * time.Second)
		if due := p.refreshClasses(); due <= 0 || due > 5*time.Second {
			t.Errorf("noise %d: next look in %v, want within a bucket", i, due)
		}
		if got, _ := p.AppliedDemandFrom(web); !slices.Equal(got, want) {
			t.Fatalf("noise %d moved the demand to %v", i, got)
		}
	}
	select {
	case <-changed:
		t.Fatal("noise published a demand change")
	default:
	}
	// a real move (1:1) is applied after DemandQuiet
	loads.requests = map[string]uint64{"eu/a": 200, "eu/b": 200}
	clk.t = clk.t.Add(5 * time.Second)
	p.refreshClasses()
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	if got, _ := p.AppliedDemandFrom(web); !slices.Equal(got, demandIn("eu/a", 500, "eu/b", 500)) {
		t.Fatalf("after a move: %v", got)
	}
	// the reports fade below DemandKeepRequests: the census again
	loads.requests = map[string]uint64{"eu/a": 20, "eu/b": 20}
	clk.t = clk.t.Add(5 * time.Second)
	p.refreshClasses()
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	if got, from := p.AppliedDemandFrom(web); !slices.Equal(got, census) || from.LoadReports {
		t.Fatalf("without reports: %v from %+v, want the census", got, from)
	}
}
