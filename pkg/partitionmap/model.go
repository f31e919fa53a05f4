package partitionmap

// NoCap is Domain.CapPercent when the domain has no locality share cap: every request
// with a usable box takes the locality step.
const NoCap = -1

// Defaults of a SpatialDomain (spec "Model").
const (
	DefaultGridDeg  = 5
	DefaultMaxCells = 256
)

// Replica is one copy of a domain's data: the Upstream that serves it and the region it
// lives in. Names, upstreams and regions are identifiers (see ValidIdentifier).
type Replica struct {
	Name     string
	Upstream string // an Upstream name in the domain's namespace
	Region   string
}

// Product is one product of a domain, served under a path prefix, whose data may only
// be read in its allowed regions.
type Product struct {
	Name           string
	PathPrefix     string
	AllowedRegions []string
}

// Domain is a spatial domain: its grid, share cap, replicas and products.
type Domain struct {
	Name       string
	GridDeg    int // a positive divisor of 180
	MaxCells   int // at least 1
	CapPercent int // 0..100, or NoCap
	Replicas   []Replica
	Products   []Product
}

// Partition is one partition of a domain: its extent in CRS84 (West > East crosses the
// antimeridian) and the names of the replicas that hold it.
type Partition struct {
	Name     string
	Extent   BBox
	Replicas []string
}

// ValidIdentifier reports whether s may be emitted into the generated Lua: non-empty,
// at most 253 bytes of [A-Za-z0-9._:-]. Nothing else is ever written into a Lua string.
func ValidIdentifier(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
