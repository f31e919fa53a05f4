package affinity

import (
	"fmt"
	"math/big"
	"slices"

	"poise.dev/poise/pkg/weights"
)

// MaxDemandWeight is the largest demand one client may declare
// (node metadata poise.dev/demand-weight).
const MaxDemandWeight = 1_000_000

// Demand is the summed demand weight of the connected clients of one zone.
type Demand struct {
	Zone   Zone
	Weight uint64
}

// ZoneSplit is one zone's part of a Balanced split, for explain.
type ZoneSplit struct {
	Zone    Zone
	Supply  uint64   // u_k: the None traffic of the zone's localities, millionths
	Demand  uint64   // d_k
	Surplus *big.Int // s_k = u_k × D − d_k × U
	// Weight is N_k, the zone's weight in the apportion of U for the
	// client's class (common denominator d_z × U × S); kept for explain.
	Weight  *big.Int
	Traffic uint64 // t_k: what the client's class sends to this zone, millionths
}

// BalancedSplit is what the clients of one zone receive.
type BalancedSplit struct {
	From Zone
	// KeepsAll: the client's zone has at least its demand's part of the
	// routable traffic, so every unit stays local.
	KeepsAll bool
	// Fallback says why the class receives the None split unchanged ("" when
	// it does not): no locality, no demand, or nothing routable.
	Fallback string
	// Routable is U = Million − dropped, the same for every client.
	Routable uint64
	Demand   uint64 // D
	Zones    []ZoneSplit
	// Traffic is each locality's traffic, millionths, indexed as the None
	// result's Localities.
	Traffic []uint64
}

// Balance divides the None result r again for the clients of zone from,
// given the demand of every client zone, as docs/weights.md ("Balanced") says: each
// zone keeps local what its supply allows for its demand, the rest goes to
// the zones with a surplus in proportion to it, and inside a zone the None
// locality split holds. Summed over all clients weighted by demand, every
// locality's traffic is its None traffic (to the rounding of two apportion
// steps). The drop, if any, is the same for every client.
func Balance(r *weights.Result, demand []Demand, from Zone) (*BalancedSplit, error) {
	out := &BalancedSplit{From: from, Traffic: make([]uint64, len(r.Localities))}
	for i, l := range r.Localities {
		out.Traffic[i] = l.Traffic
	}
	if r.Outcome != weights.Routable {
		out.Fallback = "nothing is routable"
		return out, nil
	}
	out.Routable = weights.Million - r.DroppedMillionths

	// zones: every zone with supply or demand, in canonical order
	idx := map[Zone]int{}
	zoneOf := func(z Zone) int {
		i, ok := idx[z]
		if !ok {
			i = len(out.Zones)
			idx[z] = i
			out.Zones = append(out.Zones, ZoneSplit{Zone: z})
		}
		return i
	}
	for _, l := range r.Localities {
		out.Zones[zoneOf(ZoneOf(l.Locality))].Supply += l.Traffic
	}
	for _, d := range demand {
		if !d.Zone.Known() || d.Weight == 0 {
			continue
		}
		i := zoneOf(d.Zone)
		out.Zones[i].Demand += d.Weight
		out.Demand += d.Weight
	}
	slices.SortFunc(out.Zones, func(a, b ZoneSplit) int { return a.Zone.Compare(b.Zone) })
	for i, z := range out.Zones {
		idx[z.Zone] = i
	}
	switch {
	case !from.Known():
		out.Fallback = "the client has no locality"
		return out, nil
	case out.Demand == 0:
		out.Fallback = "no client declares demand"
		return out, nil
	case out.Routable == 0:
		out.Fallback = "nothing is routable"
		return out, nil
	}
	zi, ok := idx[from]
	if !ok || out.Zones[zi].Demand == 0 {
		out.Fallback = fmt.Sprintf("no demand is counted for %s yet", from)
		return out, nil
	}

	D, U := new(big.Int).SetUint64(out.Demand), new(big.Int).SetUint64(out.Routable)
	S := new(big.Int)
	for i := range out.Zones {
		z := &out.Zones[i]
		s := new(big.Int).Mul(new(big.Int).SetUint64(z.Supply), D)
		s.Sub(s, new(big.Int).Mul(new(big.Int).SetUint64(z.Demand), U))
		z.Surplus = s
		if s.Sign() > 0 {
			S.Add(S, s)
		}
	}
	me := &out.Zones[zi]
	uzD := new(big.Int).Mul(new(big.Int).SetUint64(me.Supply), D)
	dzU := new(big.Int).Mul(new(big.Int).SetUint64(me.Demand), U)
	N := make([]*big.Int, len(out.Zones))
	for i := range N {
		N[i] = new(big.Int)
	}
	if uzD.Cmp(dzU) >= 0 {
		out.KeepsAll = true
		N[zi].SetInt64(1)
	} else {
		N[zi].Mul(uzD, S)
		deficit := new(big.Int).Sub(dzU, uzD)
		for i, z := range out.Zones {
			if z.Surplus.Sign() > 0 {
				N[i].Mul(deficit, z.Surplus)
			}
		}
	}
	t := apportionBig(out.Routable, N)
	for i := range out.Zones {
		out.Zones[i].Weight, out.Zones[i].Traffic = N[i], t[i]
	}

	// inside each zone, the None split of its localities
	members := make([][]int, len(out.Zones))
	for i, l := range r.Localities {
		k := idx[ZoneOf(l.Locality)]
		members[k] = append(members[k], i)
	}
	for k, ls := range members {
		w := make([]uint64, len(ls))
		for j, i := range ls {
			w[j] = r.Localities[i].Traffic
		}
		parts := weights.Apportion(out.Zones[k].Traffic, w)
		for j, i := range ls {
			out.Traffic[i] = parts[j]
		}
	}
	return out, nil
}

// apportionBig is weights' largest-remainder apportion over exact integer
// weights of any size: floor(total × w_i / Σw) each, then one unit each to
// the largest remainders, ties to the lower index (the canonical order).
func apportionBig(total uint64, w []*big.Int) []uint64 {
	parts := make([]uint64, len(w))
	sum := new(big.Int)
	for _, x := range w {
		sum.Add(sum, x)
	}
	if sum.Sign() == 0 {
		return parts
	}
	T := new(big.Int).SetUint64(total)
	rem := make([]*big.Int, len(w))
	left := total
	for i, x := range w {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(T, x), sum, new(big.Int))
		parts[i] = q.Uint64()
		rem[i] = r
		left -= parts[i]
	}
	order := make([]int, len(w))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return rem[b].Cmp(rem[a]) })
	for _, i := range order[:left] {
		parts[i]++
	}
	return parts
}
