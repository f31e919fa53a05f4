package grpctraffic

import (
	"fmt"
	"math"
	"net"

	"poise.dev/poise/pkg/explain"
)

// Limit is how many standard deviations an observed count may be from its
// computed share and still agree with it: 4.5 σ, about one chance in
// 150,000 per figure of a false alarm.
const Limit = 4.5

// Split is the split explain computes for some clients: the millionths of
// each endpoint (host:port) and the dropped millionths.
type Split struct {
	Share   map[string]uint64
	Dropped uint64
}

// SplitOf reads one derivation: an upstream that rejects its traffic in
// panic drops all of it.
func SplitOf(s explain.Split) Split {
	out := Split{Share: map[string]uint64{}, Dropped: s.DroppedMillionths}
	if s.Outcome == "PanicRejected" {
		out.Dropped = 1_000_000
	}
	for _, p := range s.Priorities {
		for _, l := range p.Localities {
			for _, e := range l.Endpoints {
				out.Share[net.JoinHostPort(e.Address, fmt.Sprint(e.Port))] = e.Share
			}
		}
	}
	return out
}

// ClientSplit is what the clients an upstream's report is for receive: the
// split of their class (explain --from, /debug/explain?from=), or the
// upstream's own where the report names no locality or the class receives
// it. A class with no split of its own that does not receive the
// upstream's is an error.
func ClientSplit(u explain.Upstream) (Split, error) {
	switch c := u.Class; {
	case c == nil || c.ReceivesNone:
		return SplitOf(u.Split), nil
	case c.Split == nil:
		return Split{}, fmt.Errorf("upstream %s/%s: the class %s/%s has no split of its own and does not receive the upstream's", u.Namespace, u.Name, c.Region, c.Zone)
	default:
		return SplitOf(*c.Split), nil
	}
}

// Deviation is how many standard deviations observed is from mean, for a
// count of that variance: (observed − mean) / √variance. With no variance
// (a share of 0 or 100 %) it is 0 when observed is within rounding of
// mean, and ±Inf otherwise: a backend of share 0 must serve nothing.
func Deviation(observed, mean, variance float64) float64 {
	d := observed - mean
	switch {
	case variance > 0:
		return d / math.Sqrt(variance)
	case math.Abs(d) < 1:
		return 0
	}
	return math.Copysign(math.Inf(1), d)
}

// Binomial is the Deviation of k of n calls from a share of millionths:
// mean n·p, variance n·p·(1 − p).
func Binomial(k, n int, millionths uint64) float64 {
	p := float64(millionths) / 1e6
	return Deviation(float64(k), float64(n)*p, float64(n)*p*(1-p))
}
