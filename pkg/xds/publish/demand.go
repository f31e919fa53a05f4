package publish

import (
	"math/bits"
	"slices"
	"strings"
	"time"

	"poise.dev/poise/pkg/affinity"
)

// The demand of a Balanced upstream whose clients report load (LRS) is
// their reported request rate per zone class rather than the count of
// connected clients, once the window holds enough reports (docs/weights.md,
// "Demand from load reports").
const (
	// DemandMinRequests is the fewest requests, reported over the window by
	// the reporters of the upstream's connected zone classes, for the load
	// reports to become the demand; DemandKeepRequests the fewest for them
	// to stay it once applied.
	DemandMinRequests  = 100
	DemandKeepRequests = 50
	// DemandScale is what the request shares of the zone classes sum to
	// (per mille): a zone's demand is its share, at least 1.
	DemandScale = 1000
	// DemandBand is how far, in per mille, every zone's share may move from
	// the applied one (a zone missing counts 0) before the load demand
	// counts as changed: below it the split holds still.
	DemandBand = 20
	// maxClassRequests clamps one zone class's reported requests, so that
	// the sum over the classes fits 64 bits and a share's product 128.
	maxClassRequests = 1 << 40
)

// LoadDemand is how the publisher reads the load reports of a Balanced
// upstream's clients; SetLoadDemand installs it.
type LoadDemand struct {
	// Requests is the number of requests the clients of each locality class
	// ("region/zone", a region, or "") reported to the endpoints of the
	// published cluster over the window ending at now; ok is false when
	// that cluster's clients do not report load.
	Requests func(cluster string, now time.Time) (requests map[string]uint64, ok bool)
	// Bucket is how often the figures move; the publisher reads them once a
	// bucket per upstream. Window is the span they cover.
	Bucket, Window time.Duration
}

// DemandOrigin says where a demand comes from.
type DemandOrigin struct {
	// LoadReports: the zones' reported request shares (per mille); false:
	// the connected clients' demand weights.
	LoadReports bool
	// Requests is the zone classes' reported requests the shares were
	// taken from, and Window the span they were reported over.
	Requests uint64
	Window   time.Duration
}

// demandReading is a demand and its origin.
type demandReading struct {
	demand []affinity.Demand
	origin DemandOrigin
}

// loadReading is one upstream's load reports as last read.
type loadReading struct {
	epoch    int64 // now / Bucket when read
	ok       bool
	requests map[string]uint64 // of the connected zone classes only
}

// observeDemand is the demand a Balanced upstream follows: its load demand
// when its clients report load and the zone classes connected reported at
// least DemandMinRequests over the window (DemandKeepRequests when the
// applied demand is already from load reports), else the census's.
func observeDemand(census map[string]uint64, reading loadReading, window time.Duration, applied DemandOrigin) demandReading {
	if reading.ok {
		least := uint64(DemandMinRequests)
		if applied.LoadReports {
			least = DemandKeepRequests
		}
		if d, total := loadShares(reading.requests); total >= least {
			return demandReading{demand: d, origin: DemandOrigin{LoadReports: true, Requests: total, Window: window}}
		}
	}
	return demandReading{demand: demandOf(census)}
}

// loadShares turns the requests of each zone class into demand: the
// classes' shares of their sum, apportioned over DemandScale by largest
// remainder (ties by zone order), each at least 1. Each class's requests
// are clamped to maxClassRequests first; total is the clamped sum.
func loadShares(requests map[string]uint64) (demand []affinity.Demand, total uint64) {
	type class struct {
		zone affinity.Zone
		n    uint64
	}
	classes := make([]class, 0, len(requests))
	for k, n := range requests {
		if n == 0 || !isZoneClass(k) {
			continue
		}
		n = min(n, maxClassRequests)
		classes = append(classes, class{ClassOf(k), n})
		total += n
	}
	if total == 0 {
		return nil, 0
	}
	slices.SortFunc(classes, func(a, b class) int { return a.zone.Compare(b.zone) })
	demand = make([]affinity.Demand, len(classes))
	rem := make([]uint64, len(classes))
	left := uint64(DemandScale)
	for i, c := range classes {
		hi, lo := bits.Mul64(c.n, DemandScale)
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

// isZoneClass says whether a class key names a zone ("region/zone"), the
// only classes that receive a Balanced split and so count demand.
func isZoneClass(k string) bool {
	region, zone, ok := strings.Cut(k, "/")
	return ok && region != "" && zone != ""
}

// sameDemand says whether a demand reading would hold the split that b
// holds: the same origin kind and, for the census, the same demand; for
// load reports every zone's share within DemandBand of b's (a zone one
// lacks counts 0 there). The request count and window do not matter.
func sameDemand(a, b demandReading) bool {
	if a.origin.LoadReports != b.origin.LoadReports {
		return false
	}
	if !a.origin.LoadReports {
		return slices.Equal(a.demand, b.demand)
	}
	i, j := 0, 0
	for i < len(a.demand) || j < len(b.demand) {
		var x, y uint64
		switch {
		case j == len(b.demand) || (i < len(a.demand) && a.demand[i].Zone.Compare(b.demand[j].Zone) < 0):
			x = a.demand[i].Weight
			i++
		case i == len(a.demand) || b.demand[j].Zone.Compare(a.demand[i].Zone) < 0:
			y = b.demand[j].Weight
			j++
		default:
			x, y = a.demand[i].Weight, b.demand[j].Weight
			i, j = i+1, j+1
		}
		if max(x, y)-min(x, y) > DemandBand {
			return false
		}
	}
	return true
}
