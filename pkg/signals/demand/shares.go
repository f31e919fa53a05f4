package demand

import (
	"math/bits"
	"slices"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
)

// The demand of a Balanced upstream whose clients report load (LRS) is
// their reported request rate per zone class rather than the count of
// connected clients, once the window holds enough reports (docs/weights.md,
// "Demand from load reports").
const (
	// MinRequests is the fewest requests, reported over the window by
	// the reporters of the upstream's connected zone classes, for the load
	// reports to become the demand; KeepRequests the fewest for them
	// to stay it once applied.
	MinRequests  = 100
	KeepRequests = 50
	// Scale is what the request shares of the zone classes sum to
	// (per mille): a zone's demand is its share, at least 1.
	Scale = 1000
	// Band is how far, in per mille, every zone's share may move from
	// the applied one (a zone missing counts 0) before the load demand
	// counts as changed: below it the split holds still.
	Band = 20
	// maxClassRequests clamps one zone class's reported requests, so that
	// the sum over the classes fits 64 bits and a share's product 128.
	maxClassRequests = 1 << 40
)

// reading is a demand as observed, in the form the Directory takes it.
type reading = topology.AppliedDemand

// loadReading is one upstream's load reports as last read.
type loadReading struct {
	epoch    int64 // now / Bucket when read
	ok       bool
	requests map[string]uint64 // of the connected zone classes only
}

// observeDemand is the demand a Balanced upstream follows: its load demand
// when its clients report load and the zone classes connected reported at
// least MinRequests over the window (KeepRequests when the
// applied demand is already from load reports), else the census's.
func observeDemand(census map[string]uint64, loads loadReading, window time.Duration, fromLoads bool) reading {
	if loads.ok {
		least := uint64(MinRequests)
		if fromLoads {
			least = KeepRequests
		}
		if d, total := loadShares(loads.requests); total >= least {
			return reading{Zones: d, LoadReports: true, Requests: total, Window: window}
		}
	}
	return reading{Zones: censusDemand(census)}
}

// censusDemand is a census demand as the Balanced split takes it, in zone
// order: the zone classes' summed demand weights.
func censusDemand(m map[string]uint64) []affinity.Demand {
	if len(m) == 0 {
		return nil
	}
	out := make([]affinity.Demand, 0, len(m))
	for k, w := range m {
		out = append(out, affinity.Demand{Zone: topology.ClassZone(k), Weight: w})
	}
	slices.SortFunc(out, func(a, b affinity.Demand) int { return a.Zone.Compare(b.Zone) })
	return out
}

// loadShares turns the requests of each zone class into demand: the
// classes' shares of their sum, apportioned over Scale by largest
// remainder (ties by zone order), each at least 1. Each class's requests
// are clamped to maxClassRequests first; total is the clamped sum.
func loadShares(requests map[string]uint64) (demand []affinity.Demand, total uint64) {
	type class struct {
		zone affinity.Zone
		n    uint64
	}
	classes := make([]class, 0, len(requests))
	for k, n := range requests {
		if n == 0 || !topology.IsZoneClass(k) {
			continue
		}
		n = min(n, maxClassRequests)
		classes = append(classes, class{topology.ClassZone(k), n})
		total += n
	}
	if total == 0 {
		return nil, 0
	}
	slices.SortFunc(classes, func(a, b class) int { return a.zone.Compare(b.zone) })
	demand = make([]affinity.Demand, len(classes))
	rem := make([]uint64, len(classes))
	left := uint64(Scale)
	for i, c := range classes {
		hi, lo := bits.Mul64(c.n, Scale)
		q, r := bits.Div64(hi, lo, total) // hi < total: c.n ≤ total
		demand[i] = affinity.Demand{Zone: c.zone, Weight: q}
		rem[i] = r
		left -= q
	}
	order := make([]int, len(classes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:left] {
		demand[i].Weight++
	}
	for i := range demand {
		demand[i].Weight = max(demand[i].Weight, 1)
	}
	return demand, total
}

// sameDemand says whether a demand reading would hold the split that b
// holds: the same origin kind and, for the census, the same demand; for
// load reports every zone's share within Band of b's (a zone one
// lacks counts 0 there). The request count and window do not matter.
func sameDemand(a, b reading) bool {
	if a.LoadReports != b.LoadReports {
		return false
	}
	if !a.LoadReports {
		return slices.Equal(a.Zones, b.Zones)
	}
	i, j := 0, 0
	for i < len(a.Zones) || j < len(b.Zones) {
		var x, y uint64
		switch {
		case j == len(b.Zones) || (i < len(a.Zones) && a.Zones[i].Zone.Compare(b.Zones[j].Zone) < 0):
			x = a.Zones[i].Weight
			i++
		case i == len(a.Zones) || b.Zones[j].Zone.Compare(a.Zones[i].Zone) < 0:
			y = b.Zones[j].Weight
			j++
		default:
			x, y = a.Zones[i].Weight, b.Zones[j].Weight
			i, j = i+1, j+1
		}
		if max(x, y)-min(x, y) > Band {
			return false
		}
	}
	return true
}
