package trafficmap

import (
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"poise.dev/poise/pkg/weights"
)

// Observed is what an upstream's clients reported they sent it (load
// reports, spec.loadReporting): the requests issued to each endpoint over
// the window, summed over the reporters, or over those of Class.
type Observed struct {
	// Window is the span of the reports counted.
	Window time.Duration
	// Class is the client zone (REGION/ZONE) whose reporters are counted;
	// empty for every reporter.
	Class string
	// Issued is the requests issued to each endpoint, by host:port.
	Issued map[string]uint64
}

// total is the requests issued to every endpoint.
func (o *Observed) total() uint64 {
	var t uint64
	for _, n := range o.Issued {
		t += n
	}
	return t
}

// observedShare is an endpoint's share of the requests the clients
// reported, in millionths, rounded down; exact for any counts (issued is
// at most total).
func observedShare(issued, total uint64) uint64 {
	if total == 0 || issued > total {
		return 0
	}
	hi, lo := bits.Mul64(issued, weights.Million)
	q, _ := bits.Div64(hi, lo, total)
	return q
}

// observedNote says what the observed figures are of.
func observedNote(o *Observed, total uint64) string {
	who := "the clients"
	if o.Class != "" {
		who = "the clients in " + o.Class
	}
	if total == 0 {
		return fmt.Sprintf("observed: no requests reported by %s over the last %v (load reports)", who, o.Window)
	}
	return fmt.Sprintf("observed: %s requests reported by %s over the last %v (load reports); each endpoint's second line is its share of them",
		thousands(total), who, o.Window)
}

// thousands prints n with a comma every three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
