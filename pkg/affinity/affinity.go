package affinity

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"poise.dev/poise/pkg/weights"
)

// Mode is an Upstream's spec.localityAffinity.mode.
type Mode uint8

const (
	// None: every client receives the same split.
	None Mode = iota
	// PreferSameZone ranks the client's zone, then its region, then the
	// failover regions in order, then every other region.
	PreferSameZone
	// PreferSameRegion ranks the client's region, then the failover regions
	// in order, then every other region.
	PreferSameRegion
	// Balanced keeps each client zone's traffic local as far as that zone's
	// capacity allows, so that summed over all clients the split is None's.
	Balanced
)

var modeNames = [...]string{"None", "PreferSameZone", "PreferSameRegion", "Balanced"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode reads a mode by its API name; "" is None.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return None, nil
	}
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return None, fmt.Errorf("locality affinity mode %q: want None, PreferSameZone, PreferSameRegion or Balanced", s)
}

// Zone is a client's or a locality's (region, zone). A client with no
// region has no locality.
type Zone struct {
	Region, Zone string
}

// Compare orders zones bytewise by region, then zone: the canonical order
// ties are broken by.
func (z Zone) Compare(o Zone) int {
	return cmp.Or(cmp.Compare(z.Region, o.Region), cmp.Compare(z.Zone, o.Zone))
}

func (z Zone) String() string { return z.Region + "/" + z.Zone }

// Known says whether the client has a locality at all.
func (z Zone) Known() bool { return z.Region != "" }

// ZoneOf is the zone a locality belongs to (its subZone is ignored).
func ZoneOf(l weights.Locality) Zone { return Zone{Region: l.Region, Zone: l.Zone} }

// ErrTooManyPriorities: the effective priorities of one client do not fit
// the 0..127 a proxy accepts.
var ErrTooManyPriorities = errors.New("too many effective priorities")

// Rank is the proximity rank of a locality for a client in from, under a
// PreferSame* mode (0 under any other mode). Lower is closer.
func Rank(mode Mode, failoverRegions []string, from Zone, l weights.Locality) uint32 {
	n := uint32(len(failoverRegions))
	switch mode {
	case PreferSameZone:
		switch {
		case l.Region == from.Region && from.Zone != "" && l.Zone == from.Zone:
			// a client with no zone (or of a region-level class) has no
			// zone of its own: its whole region ranks alike
			return 0
		case l.Region == from.Region:
			return 1
		}
		if i := slices.Index(failoverRegions, l.Region); i >= 0 {
			return 2 + uint32(i)
		}
		return 2 + n
	case PreferSameRegion:
		if l.Region == from.Region {
			return 0
		}
		if i := slices.Index(failoverRegions, l.Region); i >= 0 {
			return 1 + uint32(i)
		}
		return 1 + n
	}
	return 0
}

// Reprioritize returns eps as a client in from sees them under a PreferSame*
// mode: each endpoint's priority becomes its effective priority, the rank
// of the pair (configured priority, proximity rank) among the pairs that
// occur, in lexicographic order. The result is written into out (reused
// when large enough). Under None or Balanced, or for a client with no
// locality, the endpoints are returned unchanged (copied).
func Reprioritize(mode Mode, failoverRegions []string, from Zone, eps []weights.Endpoint, out []weights.Endpoint) ([]weights.Endpoint, error) {
	out = append(out[:0], eps...)
	if (mode != PreferSameZone && mode != PreferSameRegion) || !from.Known() {
		return out, nil
	}
	// a pair as one integer: configured priorities are at most 127 and ranks
	// at most len(failoverRegions)+2, so this never overflows for valid input
	stride := uint64(len(failoverRegions)) + 3
	pairs := make([]uint64, len(out))
	for i, e := range out {
		pairs[i] = uint64(e.Priority)*stride + uint64(Rank(mode, failoverRegions, from, e.Locality))
	}
	distinct := slices.Clone(pairs)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	if len(distinct) > weights.MaxPriority+1 {
		return nil, fmt.Errorf("%w: a client in %s would need %d priorities (configured priority × proximity rank), a proxy accepts %d",
			ErrTooManyPriorities, from, len(distinct), weights.MaxPriority+1)
	}
	for i, p := range pairs {
		j, _ := slices.BinarySearch(distinct, p)
		out[i].Priority = uint32(j)
	}
	return out, nil
}
