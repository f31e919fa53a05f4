package topology

import (
	"fmt"
	"slices"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/weights"
)

// ClassState is what the clients of one locality class receive for one
// upstream under its localityAffinity, and how it was derived, for explain.
type ClassState struct {
	From affinity.Zone
	Mode affinity.Mode
	// State is the upstream as the class sees it. It is the base state
	// itself when the class receives the None split.
	State *UpstreamState
	// Effective lists, under PreferSameZone and PreferSameRegion, every
	// (configured priority, proximity rank) pair that occurs and the
	// effective priority it became, in effective order.
	Effective []EffectivePriority
	// Balanced is the Balanced derivation; nil under the other modes.
	Balanced *affinity.BalancedSplit
}

// EffectivePriority is one step of the PreferSame* re-prioritisation.
type EffectivePriority struct {
	Configured, Rank, Effective uint32
}

// Base reports whether the class receives the None split unchanged.
func (c *ClassState) Base(u *UpstreamState) bool { return c.State == u }

// ModeOf is the upstream's affinity mode: None when Affinity is nil, and
// None too when spec.localityAffinity says so or an imported Service's
// trafficDistribution is not a preference Poise maps.
func (u *Upstream) ModeOf() affinity.Mode {
	if u.Affinity == nil {
		return affinity.None
	}
	return u.Affinity.Mode
}

// ForClass derives what clients in from receive: under PreferSameZone and
// PreferSameRegion the seed's math runs again on the re-prioritised
// endpoints; under Balanced the None result is divided again by client zone
// for the given demand (see affinity.Balance) and each locality's traffic
// is split over its endpoints as the seed's stage 3 does. A client with no
// locality, an upstream without affinity, and a Balanced class that falls
// back, receive the base state.
func (u *UpstreamState) ForClass(from affinity.Zone, demand []affinity.Demand) (*ClassState, error) {
	c := &ClassState{From: from, Mode: u.Upstream.ModeOf(), State: u}
	if !from.Known() {
		return c, nil
	}
	switch c.Mode {
	case affinity.PreferSameZone, affinity.PreferSameRegion:
		return c, c.preferSame(u)
	case affinity.Balanced:
		return c, c.balanced(u, demand)
	}
	return c, nil
}

func (c *ClassState) preferSame(u *UpstreamState) error {
	failover := u.Upstream.Affinity.FailoverRegions
	eps, err := affinity.Reprioritize(c.Mode, failover, c.From, u.Endpoints, nil)
	if err != nil {
		return fmt.Errorf("upstream %s, clients in %s: %w", u.Upstream.Key, c.From, err)
	}
	for i, e := range eps {
		step := EffectivePriority{Configured: u.Endpoints[i].Priority, Rank: affinity.Rank(c.Mode, failover, c.From, e.Locality), Effective: e.Priority}
		if !slices.Contains(c.Effective, step) {
			c.Effective = append(c.Effective, step)
		}
	}
	slices.SortFunc(c.Effective, func(a, b EffectivePriority) int { return int(a.Effective) - int(b.Effective) })
	res, err := weights.Compute(u.Upstream.Policy, eps)
	if err != nil {
		return fmt.Errorf("upstream %s, clients in %s: %w", u.Upstream.Key, c.From, err)
	}
	derived := *u
	derived.Endpoints, derived.Result = eps, res
	c.State = &derived
	return nil
}

func (c *ClassState) balanced(u *UpstreamState, demand []affinity.Demand) error {
	split, err := affinity.Balance(u.Result, demand, c.From)
	if err != nil {
		return fmt.Errorf("upstream %s, clients in %s: %w", u.Upstream.Key, c.From, err)
	}
	c.Balanced = split
	if split.Fallback != "" {
		return nil
	}
	res := *u.Result
	res.Priorities = slices.Clone(u.Result.Priorities)
	res.Localities = slices.Clone(u.Result.Localities)
	res.Endpoints = slices.Clone(u.Result.Endpoints)
	var w []uint64
	for li := range res.Localities {
		l := &res.Localities[li]
		l.Traffic = split.Traffic[li]
		eps := res.Endpoints[l.FirstEndpoint : l.FirstEndpoint+l.EndpointCount]
		w = w[:0]
		for _, er := range eps {
			if er.Selectable {
				w = append(w, u.Endpoints[er.Index].Weight)
			} else {
				w = append(w, 0)
			}
		}
		parts := weights.Apportion(l.Traffic, w)
		for i := range eps {
			eps[i].Share = parts[i]
		}
	}
	// A zone's traffic may sit in localities of several priorities, so the
	// class's priority loads are its own: what its localities carry plus the
	// priority's drop, which is the same for every class. Without this the
	// seeded picker (stage 1 draws a priority by load) would replay None.
	for pi := range res.Priorities {
		p := &res.Priorities[pi]
		p.Load = p.Dropped
		for _, l := range res.Localities[p.FirstLocality : p.FirstLocality+p.LocalityCount] {
			p.Load += l.Traffic
		}
	}
	derived := *u
	derived.Result = &res
	c.State = &derived
	return nil
}

// ZoneLocal is, for the clients of one zone, the share of their traffic
// that stays in their zone.
type ZoneLocal struct {
	Zone   affinity.Zone
	Local  uint64 // millionths of all traffic
	Demand uint64 // the zone's demand, under Balanced
	// Note says why the zone's clients receive the None split, when they
	// do under an affinity mode (a Balanced fallback, or a derivation error).
	Note string
}

// LocalShares derives, for each zone u has localities in (in zone order,
// at most limit of them), the share its clients keep in their zone under
// u's affinity, with demand dividing a Balanced split; more counts the
// zones left out. It is nil without affinity.
func (u *UpstreamState) LocalShares(demand []affinity.Demand, limit int) (out []ZoneLocal, more int) {
	if u.Upstream.ModeOf() == affinity.None || u.Result == nil {
		return nil, 0
	}
	var zones []affinity.Zone
	for _, l := range u.Result.Localities {
		if z := affinity.ZoneOf(l.Locality); z.Known() && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.SortFunc(zones, affinity.Zone.Compare)
	if len(zones) > limit {
		zones, more = zones[:limit], len(zones)-limit
	}
	for _, z := range zones {
		zl := ZoneLocal{Zone: z}
		for _, d := range demand {
			if d.Zone == z {
				zl.Demand += d.Weight
			}
		}
		c, err := u.ForClass(z, demand)
		switch {
		case err != nil:
			zl.Note = err.Error()
			c = &ClassState{State: u}
		case c.Balanced != nil && c.Balanced.Fallback != "":
			zl.Note = c.Balanced.Fallback
		}
		for _, l := range c.State.Result.Localities {
			if affinity.ZoneOf(l.Locality) == z {
				zl.Local += l.Traffic
			}
		}
		out = append(out, zl)
	}
	return out, more
}
