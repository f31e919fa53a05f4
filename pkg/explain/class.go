package explain

import (
	"cmp"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
)

// Bounds of a client locality and a demand given by a person (--from,
// --demand, and the same query parameters of /debug/explain).
const (
	// MaxDemandZones is the most zones one demand may name.
	MaxDemandZones = 64
	// MaxNameBytes is the longest region, zone or subZone name accepted.
	MaxNameBytes = 128
	// maxFromBytes is REGION/ZONE/SUBZONE at their longest.
	maxFromBytes = 3*MaxNameBytes + 2
	// maxDemandBytes is MaxDemandZones entries REGION/ZONE=1000000 at their
	// longest and the commas between them, checked before the text is split
	// so a huge argument is refused without being taken apart.
	maxDemandBytes = MaxDemandZones*(2*MaxNameBytes+len("/=1000000")+1) - 1
)

// Demand sources of a Balanced class (Balanced.DemandSource).
const (
	DemandGiven   = "Given"   // --demand or the demand query parameter
	DemandClients = "Clients" // the connected clients, as the live plane applies it
	// DemandLoadReports: the request shares the clients' load reports show
	// over the window, as the live plane applies them.
	DemandLoadReports = "LoadReports"
	DemandNone        = "None" // neither: every Balanced class falls back
)

// From is the client locality a report is for. A class is a region and a
// zone; SubZone is carried so the report shows what was asked.
type From struct {
	Region  string `json:"region"`
	Zone    string `json:"zone"`
	SubZone string `json:"subZone,omitempty"`
}

func (f From) String() string {
	if f.SubZone == "" {
		return f.Region + "/" + f.Zone
	}
	return f.Region + "/" + f.Zone + "/" + f.SubZone
}

// DemandEntry is one zone's demand weight as given. Region is empty for a
// bare zone, which each Balanced upstream resolves among its own zones.
type DemandEntry struct {
	Region string `json:"region"`
	Zone   string `json:"zone"`
	Weight uint64 `json:"weight"`
}

// compareDemand is the canonical order of demand entries: region, then zone.
func compareDemand(a, b DemandEntry) int {
	return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone))
}

func (d DemandEntry) key() string {
	if d.Region == "" {
		return d.Zone
	}
	return d.Region + "/" + d.Zone
}

// Class is what the clients of the report's locality receive for one
// upstream, and how: the proximity ranks and effective priorities
// (PreferSameZone, PreferSameRegion) or the Balanced division by zone.
type Class struct {
	// Mode is the upstream's localityAffinity mode (None without it).
	Mode string `json:"mode"`
	// Region and Zone name the class: a zone (PreferSameZone, Balanced), a
	// region (PreferSameRegion: Zone is empty), or every client (None: both empty).
	Region string `json:"region"`
	Zone   string `json:"zone"`
	// ReceivesNone: the class receives the upstream's own split (its
	// priorities) unchanged; Reason says why and Split is absent.
	ReceivesNone bool                `json:"receivesNone"`
	Reason       string              `json:"reason,omitempty"`
	Ranks        []ZoneRank          `json:"ranks,omitempty"`
	Effective    []EffectivePriority `json:"effectivePriorities,omitempty"`
	Balanced     *Balanced           `json:"balanced,omitempty"`
	// Split is the derivation the class receives. Under PreferSame* it is
	// the weights math on the effective priorities; under Balanced it has
	// the shape of the upstream's priorities, whose health, availability,
	// effective weight and share in priority it keeps, with the class's own
	// load, traffic and share.
	Split *Split `json:"split,omitempty"`

	// state is the class's topology, for Simulate; not part of the report.
	state *topology.UpstreamState
}

// ZoneRank is the proximity rank of one of the upstream's zones.
type ZoneRank struct {
	Region string `json:"region"`
	Zone   string `json:"zone"`
	Rank   uint32 `json:"rank"`
	// Proximity is SameZone, SameRegion, FailoverRegion or OtherRegion.
	Proximity string `json:"proximity"`
}

// EffectivePriority is one (configured priority, rank) pair that occurs
// and the effective priority it became.
type EffectivePriority struct {
	ConfiguredPriority uint32 `json:"configuredPriority"`
	Rank               uint32 `json:"rank"`
	EffectivePriority  uint32 `json:"effectivePriority"`
}

// Balanced is the division of the upstream's split for the class's zone.
// Surplus, zone weight and surplus sum are exact integers that may exceed
// 64 bits; they are JSON numbers of any length.
type Balanced struct {
	// DemandSource is Given, Clients, LoadReports or None.
	DemandSource string `json:"demandSource"`
	// DemandRequests and DemandWindowSeconds, under LoadReports, are the
	// requests the zones' reporters reported and the window they span: each
	// zone's demand is its share of them, per mille.
	DemandRequests      uint64 `json:"demandRequests,omitempty"`
	DemandWindowSeconds int64  `json:"demandWindowSeconds,omitempty"`
	// RoutableMillionths is U, the upstream's traffic less its drop.
	RoutableMillionths uint64 `json:"routableMillionths"`
	// Demand is D, the sum of the zones' demand.
	Demand uint64 `json:"demand"`
	// SurplusSum is S, the sum of the positive surpluses; absent on fallback.
	SurplusSum *big.Int `json:"surplusSum,omitempty"`
	// KeepsAll: u_z × D ≥ d_z × U, the class keeps all its traffic local.
	KeepsAll bool `json:"keepsAll"`
	// Zones are every zone with supply or demand, by region then zone.
	Zones []BalancedZone `json:"zones"`
}

// BalancedZone is one zone of a Balanced division. Surplus, Weight and
// Traffic are absent when the class falls back to the upstream's split.
type BalancedZone struct {
	Region  string   `json:"region"`
	Zone    string   `json:"zone"`
	Supply  uint64   `json:"supply"`            // u_k, millionths
	Demand  uint64   `json:"demand"`            // d_k
	Surplus *big.Int `json:"surplus,omitempty"` // s_k = u_k × D − d_k × U
	Weight  *big.Int `json:"weight,omitempty"`  // N_k
	Traffic *uint64  `json:"traffic,omitempty"` // t_k, millionths
}

// ClassOptions select the client locality a report explains, and the demand
// its Balanced upstreams are divided by where the snapshot applies none.
type ClassOptions struct {
	From From
	// Demand is the demand as given, from ParseDemand. The demand a live
	// snapshot applies to an upstream (its connected clients', or their
	// load reports') is used instead where there is one.
	Demand []DemandEntry
}

// DemandError is a given demand that does not fit an upstream: a bare zone
// that is ambiguous or unknown, or, under Balanced, no entry for the zone
// of the clients explained. It is the caller's input that is wrong.
type DemandError struct {
	Upstream topology.Key
	Msg      string
}

func (e *DemandError) Error() string { return "upstream " + e.Upstream.String() + ": " + e.Msg }

// ParseFrom reads REGION/ZONE[/SUBZONE].
func ParseFrom(s string) (From, error) {
	if len(s) > maxFromBytes {
		return From{}, fmt.Errorf("%d bytes: want REGION/ZONE[/SUBZONE], each at most %d bytes", len(s), MaxNameBytes)
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return From{}, fmt.Errorf("%q: want REGION/ZONE[/SUBZONE]", s)
	}
	for i, p := range parts {
		if err := checkName(p); err != nil {
			return From{}, fmt.Errorf("%q: the %s %w", s, [...]string{"region", "zone", "subZone"}[i], err)
		}
	}
	f := From{Region: parts[0], Zone: parts[1]}
	if len(parts) == 3 {
		f.SubZone = parts[2]
	}
	return f, nil
}

// ParseDemand reads REGION/ZONE=N or ZONE=N entries separated by commas,
// each weight 1..1,000,000, each zone once. The entries come back in
// canonical order (region, then zone), so the order given does not matter.
func ParseDemand(s string) ([]DemandEntry, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty: want REGION/ZONE=N,... (or ZONE=N for a zone whose name is unique)")
	}
	if len(s) > maxDemandBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(s), maxDemandBytes)
	}
	if n := strings.Count(s, ",") + 1; n > MaxDemandZones {
		return nil, fmt.Errorf("%d zones, at most %d", n, MaxDemandZones)
	}
	var out []DemandEntry
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		key, num, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want REGION/ZONE=N or ZONE=N", item)
		}
		var e DemandEntry
		switch parts := strings.Split(key, "/"); len(parts) {
		case 1:
			e.Zone = parts[0]
		case 2:
			e.Region, e.Zone = parts[0], parts[1]
			if err := checkName(e.Region); err != nil {
				return nil, fmt.Errorf("%q: the region %w", item, err)
			}
		default:
			return nil, fmt.Errorf("%q: want REGION/ZONE=N or ZONE=N (demand is per zone, without subZone)", item)
		}
		if err := checkName(e.Zone); err != nil {
			return nil, fmt.Errorf("%q: the zone %w", item, err)
		}
		w, err := strconv.ParseUint(num, 10, 64)
		if err != nil || w < 1 || w > affinity.MaxDemandWeight {
			return nil, fmt.Errorf("%q: weight %q: want an integer 1..%d", item, num, affinity.MaxDemandWeight)
		}
		e.Weight = w
		if slices.ContainsFunc(out, func(o DemandEntry) bool { return o.Region == e.Region && o.Zone == e.Zone }) {
			return nil, fmt.Errorf("%q: %s is given twice", item, e.key())
		}
		out = append(out, e)
	}
	slices.SortFunc(out, compareDemand)
	return out, nil
}

// checkName refuses what cannot be a region, zone or subZone name: empty,
// too long, not printable text (it is echoed in reports), or holding a
// separator of the syntax.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxNameBytes:
		return fmt.Errorf("is %d bytes, at most %d", len(s), MaxNameBytes)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return errors.New("is not printable UTF-8 text")
	case strings.ContainsAny(s, "/,="):
		return errors.New(`may not contain "/", "," or "="`)
	}
	return nil
}

// BuildFor explains like Build and adds, per upstream, what the clients in
// opts.From receive and how.
func BuildFor(s *topology.Snapshot, opts ClassOptions, only ...topology.Key) (Report, error) {
	rep := Build(s, only...)
	from := opts.From
	rep.From = &from
	rep.Demand = slices.Clone(opts.Demand)
	slices.SortFunc(rep.Demand, compareDemand)
	for i := range rep.Upstreams {
		x := &rep.Upstreams[i]
		c, err := BuildClass(s.Upstream(topology.Key{Namespace: x.Namespace, Name: x.Name}), opts)
		if err != nil {
			return Report{}, err
		}
		x.Class = c
	}
	return rep, nil
}

// BuildClass explains what the clients in opts.From receive for u.
func BuildClass(u *topology.UpstreamState, opts ClassOptions) (*Class, error) {
	from := affinity.Zone{Region: opts.From.Region, Zone: opts.From.Zone}
	mode := u.Upstream.ModeOf()
	c := &Class{Mode: mode.String(), Region: from.Region, Zone: from.Zone}
	var demand []affinity.Demand
	sourceName := DemandNone
	switch mode {
	case affinity.None:
		c.Region, c.Zone = "", ""
		c.ReceivesNone = true
		c.Reason = "the upstream has no localityAffinity: every client receives the same split"
		return c, nil
	case affinity.PreferSameRegion:
		c.Zone = ""
	case affinity.Balanced:
		var err error
		if demand, sourceName, err = classDemand(u, from, opts); err != nil {
			return nil, err
		}
	}
	cs, err := u.ForClass(from, demand)
	if err != nil {
		return nil, err
	}
	if mode == affinity.PreferSameZone || mode == affinity.PreferSameRegion {
		c.Ranks = zoneRanks(u, mode, from)
		for _, e := range cs.Effective {
			c.Effective = append(c.Effective, EffectivePriority{ConfiguredPriority: e.Configured, Rank: e.Rank, EffectivePriority: e.Effective})
		}
	}
	if b := cs.Balanced; b != nil {
		c.Balanced = balancedOf(b, sourceName)
		if sourceName == DemandLoadReports {
			c.Balanced.DemandRequests, c.Balanced.DemandWindowSeconds = u.Demand.Requests, int64(u.Demand.Window/time.Second)
		}
		c.Reason = b.Fallback
	}
	if cs.Base(u) {
		c.ReceivesNone = true
		return c, nil
	}
	split := buildSplit(cs.State, cs.Effective)
	c.Split, c.state = &split, cs.State
	return c, nil
}

// classDemand is the demand a Balanced upstream is divided by, and its
// source: the demand the snapshot applies to it when there is one (a live
// plane's), else the given one, resolved against the upstream's zones.
func classDemand(u *topology.UpstreamState, from affinity.Zone, opts ClassOptions) ([]affinity.Demand, string, error) {
	if a := u.Demand; !a.None() {
		if a.LoadReports {
			return a.Zones, DemandLoadReports, nil
		}
		return a.Zones, DemandClients, nil
	}
	if len(opts.Demand) == 0 {
		return nil, DemandNone, nil
	}
	d, err := resolveDemand(u, opts.Demand)
	if err != nil {
		return nil, "", err
	}
	if !slices.ContainsFunc(d, func(x affinity.Demand) bool { return x.Zone == from }) {
		// Offline, a class without demand of its own would only explain a
		// fallback the live plane never shows for connected clients.
		return nil, "", &DemandError{Upstream: u.Upstream.Key,
			Msg: fmt.Sprintf("localityAffinity Balanced: the demand has no entry for %s, the zone of the clients explained; add %s=N", from, from)}
	}
	return d, DemandGiven, nil
}

// resolveDemand turns the given entries into zones of u: a bare zone must
// name exactly one region among u's zones and the entries that name their
// region.
func resolveDemand(u *topology.UpstreamState, given []DemandEntry) ([]affinity.Demand, error) {
	known := map[affinity.Zone]bool{}
	for _, e := range u.Endpoints {
		known[affinity.ZoneOf(e.Locality)] = true
	}
	for _, g := range u.Groups {
		known[affinity.ZoneOf(g.Locality)] = true
	}
	for _, e := range given {
		if e.Region != "" {
			known[affinity.Zone{Region: e.Region, Zone: e.Zone}] = true
		}
	}
	out := make([]affinity.Demand, 0, len(given))
	for _, e := range given {
		z := affinity.Zone{Region: e.Region, Zone: e.Zone}
		if e.Region == "" {
			var regions []string
			for k := range known {
				if k.Zone == e.Zone {
					regions = append(regions, k.Region)
				}
			}
			slices.Sort(regions)
			switch len(regions) {
			case 0:
				return nil, &DemandError{Upstream: u.Upstream.Key, Msg: fmt.Sprintf("zone %q is none of its zones; write REGION/ZONE=N", e.Zone)}
			case 1:
				z.Region = regions[0]
			default:
				return nil, &DemandError{Upstream: u.Upstream.Key, Msg: fmt.Sprintf("zone %q is in regions %s; write REGION/ZONE=N", e.Zone, strings.Join(regions, ", "))}
			}
		}
		if slices.ContainsFunc(out, func(d affinity.Demand) bool { return d.Zone == z }) {
			return nil, &DemandError{Upstream: u.Upstream.Key, Msg: fmt.Sprintf("%s is given twice (%q names it)", z, e.key())}
		}
		out = append(out, affinity.Demand{Zone: z, Weight: e.Weight})
	}
	return out, nil
}

// zoneRanks ranks every zone of u's endpoints as seen from a client in from.
func zoneRanks(u *topology.UpstreamState, mode affinity.Mode, from affinity.Zone) []ZoneRank {
	failover := u.Upstream.Affinity.FailoverRegions
	var out []ZoneRank
	for _, e := range u.Endpoints {
		z := affinity.ZoneOf(e.Locality)
		if slices.ContainsFunc(out, func(r ZoneRank) bool { return r.Region == z.Region && r.Zone == z.Zone }) {
			continue
		}
		proximity := "OtherRegion"
		switch {
		case z.Region == from.Region && mode == affinity.PreferSameZone && z.Zone == from.Zone:
			proximity = "SameZone"
		case z.Region == from.Region:
			proximity = "SameRegion"
		case slices.Contains(failover, z.Region):
			proximity = "FailoverRegion"
		}
		out = append(out, ZoneRank{Region: z.Region, Zone: z.Zone, Rank: affinity.Rank(mode, failover, from, e.Locality), Proximity: proximity})
	}
	slices.SortFunc(out, func(a, b ZoneRank) int { return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone)) })
	return out
}

func balancedOf(b *affinity.BalancedSplit, source string) *Balanced {
	out := &Balanced{DemandSource: source, RoutableMillionths: b.Routable, Demand: b.Demand, KeepsAll: b.KeepsAll, Zones: []BalancedZone{}}
	divided := b.Fallback == ""
	if divided {
		out.SurplusSum = new(big.Int)
	}
	for _, z := range b.Zones {
		x := BalancedZone{Region: z.Zone.Region, Zone: z.Zone.Zone, Supply: z.Supply, Demand: z.Demand}
		if divided {
			t := z.Traffic
			x.Surplus, x.Weight, x.Traffic = z.Surplus, z.Weight, &t
			if z.Surplus.Sign() > 0 {
				out.SurplusSum.Add(out.SurplusSum, z.Surplus)
			}
		}
		out.Zones = append(out.Zones, x)
	}
	return out
}
