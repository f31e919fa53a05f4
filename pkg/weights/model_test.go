package weights

// A slow, independent reference model of docs/weights.md (math/big, maps of
// nothing, sort.SliceStable) and the invariant checker shared by the property
// and fuzz tests. The model is written from the spec text, not from compute.go.

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
)

// specEligibility is the spec's Eligibility section, word for word.
func specEligibility(e Endpoint, p Policy) (configured, eligible, panicEligible bool, reason Reason) {
	configured = e.Scope == ScopeIn &&
		(e.Admin == Ready || (e.Admin == Draining && p.DrainingCapacity == IncludeDraining))
	panicEligible = configured && e.Admin == Ready
	eligible = panicEligible && e.Probe != ProbeUnhealthy && e.Circuit == CircuitClosed && !e.Ejected
	switch {
	case e.Scope == ScopeOut:
		reason = ReasonOutOfScope
	case e.Admin == Unavailable:
		reason = ReasonUnavailable
	case e.Admin == Draining:
		reason = ReasonDraining
	case e.Probe == ProbeUnhealthy:
		reason = ReasonProbeUnhealthy
	case e.Circuit == CircuitOpen:
		reason = ReasonCircuitOpen
	case e.Ejected:
		reason = ReasonOutlierEjected
	}
	return
}

func bigU(x uint64) *big.Int { return new(big.Int).SetUint64(x) }

// specRatio is min(1_000_000, floor(opf × part × 10_000 / whole)), 0 if whole is 0.
func specRatio(opf uint32, part, whole uint64) uint64 {
	if whole == 0 {
		return 0
	}
	n := new(big.Int).Mul(bigU(uint64(opf)), bigU(part))
	n.Mul(n, big.NewInt(10_000))
	n.Quo(n, bigU(whole))
	if n.Cmp(big.NewInt(Million)) > 0 {
		return Million
	}
	return n.Uint64()
}

// specApportion is Hamilton's method in big integers: floor quotas, then one
// unit each to the largest remainders, ties to the lower index.
func specApportion(total uint64, w []uint64) []uint64 {
	out := make([]uint64, len(w))
	sum := new(big.Int)
	for _, x := range w {
		sum.Add(sum, bigU(x))
	}
	if sum.Sign() == 0 {
		return out
	}
	rems := make([]*big.Int, len(w))
	given := uint64(0)
	for i, x := range w {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(bigU(total), bigU(x)), sum, new(big.Int))
		out[i], rems[i] = q.Uint64(), r
		given += out[i]
	}
	idx := make([]int, len(w))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rems[idx[a]].Cmp(rems[idx[b]]) > 0 })
	for _, i := range idx[:total-given] {
		out[i]++
	}
	return out
}

func canonicalLess(a, b Endpoint) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if a.Locality != b.Locality {
		if a.Locality.Region != b.Locality.Region {
			return a.Locality.Region < b.Locality.Region
		}
		if a.Locality.Zone != b.Locality.Zone {
			return a.Locality.Zone < b.Locality.Zone
		}
		return a.Locality.SubZone < b.Locality.SubZone
	}
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	return a.Port < b.Port
}

// specModel computes the Result the spec prescribes for a valid input whose
// enum fields are in range. Two points where the spec is silent are modelled
// on the implementation's documented choice:
//   - no configured endpoint at all ⇒ NoCapacity (the spec's literal reading
//     of rule 2 would give PanicRejected under FailClosed);
//   - Availability/EffectiveWeight/ShareInPriority are filled for every
//     priority (display), Traffic and Share only where load flows.
func specModel(p Policy, in []Endpoint) *Result {
	order := make([]int, len(in))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return canonicalLess(in[order[a]], in[order[b]]) })

	r := &Result{Outcome: Routable}
	for k := 0; k < len(order); {
		prio := in[order[k]].Priority
		pr := PriorityResult{Priority: prio, FirstLocality: len(r.Localities)}
		for k < len(order) && in[order[k]].Priority == prio {
			first := in[order[k]]
			lr := LocalityResult{Priority: prio, Locality: first.Locality, LocalityWeight: first.LocalityWeight, FirstEndpoint: len(r.Endpoints)}
			for k < len(order) && in[order[k]].Priority == prio && in[order[k]].Locality == first.Locality {
				e := in[order[k]]
				c, el, pe, reason := specEligibility(e, p)
				r.Endpoints = append(r.Endpoints, EndpointResult{Index: order[k], Configured: c, Eligible: el, PanicEligible: pe, Reason: reason})
				if c {
					lr.ConfiguredWeight += e.Weight
					pr.ConfiguredWeight += e.Weight
				}
				if el {
					pr.EligibleWeight += e.Weight
				}
				if pe {
					pr.PanicEligibleWeight += e.Weight
				}
				k++
			}
			lr.EndpointCount = len(r.Endpoints) - lr.FirstEndpoint
			r.Localities = append(r.Localities, lr)
		}
		pr.LocalityCount = len(r.Localities) - pr.FirstLocality
		r.Priorities = append(r.Priorities, pr)
	}

	// Stage 1.
	var sumHealth uint64
	anyConfigured := false
	for i := range r.Priorities {
		pr := &r.Priorities[i]
		if pr.ConfiguredWeight > 0 {
			anyConfigured = true
			pr.Health = specRatio(p.OverprovisioningFactor, pr.EligibleWeight, pr.ConfiguredWeight)
			sumHealth += pr.Health
		}
	}
	r.NTA = min(sumHealth, Million)
	if !anyConfigured {
		r.Outcome = NoCapacity
	} else {
		normal := false
		for i := range r.Priorities {
			pr := &r.Priorities[i]
			if pr.ConfiguredWeight == 0 {
				continue
			}
			lhs := new(big.Int).Mul(bigU(pr.EligibleWeight), big.NewInt(100))
			rhs := new(big.Int).Mul(bigU(pr.ConfiguredWeight), bigU(uint64(p.PanicThreshold)))
			pr.InPanic = p.PanicThreshold > 0 && r.NTA < Million && lhs.Cmp(rhs) < 0
			if !pr.InPanic && r.NTA > 0 {
				normal = true
			}
		}
		switch {
		case normal:
			remaining := uint64(Million)
			first := -1
			for i := range r.Priorities {
				pr := &r.Priorities[i]
				if pr.Health > 0 && first < 0 {
					first = i
				}
				pr.Load = min(remaining, pr.Health*Million/r.NTA)
				remaining -= pr.Load
			}
			r.Priorities[first].Load += remaining
			for i := range r.Priorities {
				pr := &r.Priorities[i]
				if pr.InPanic && p.PanicMode == FailClosed {
					pr.Dropped = pr.Load
					r.DroppedMillionths += pr.Load
				}
			}
		case p.PanicThreshold > 0:
			r.TotalPanic = true
			if p.PanicMode == FailClosed {
				r.Outcome, r.DroppedMillionths = PanicRejected, Million
				break
			}
			w := make([]uint64, len(r.Priorities))
			for i, pr := range r.Priorities {
				w[i] = pr.PanicEligibleWeight
			}
			loads := specApportion(Million, w)
			if sumOf(w) == 0 {
				r.Outcome = NoCapacity
				break
			}
			for i := range r.Priorities {
				r.Priorities[i].Load = loads[i]
			}
		default:
			r.Outcome = NoCapacity
		}
	}

	// Stages 2 and 3.
	for pi := range r.Priorities {
		pr := &r.Priorities[pi]
		usePanic := pr.InPanic && p.PanicMode == UseAll && r.Outcome == Routable
		locs := r.Localities[pr.FirstLocality : pr.FirstLocality+pr.LocalityCount]
		eff := make([]uint64, len(locs))
		for li := range locs {
			l := &locs[li]
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er := &r.Endpoints[ei]
				er.Selectable = er.Eligible || (usePanic && er.PanicEligible)
				if er.Selectable {
					l.SelectableWeight += in[er.Index].Weight
				}
			}
			l.Availability = specRatio(p.OverprovisioningFactor, l.SelectableWeight, l.ConfiguredWeight)
			if l.SelectableWeight > 0 && l.Availability == 0 {
				l.Availability = 1
			}
			l.EffectiveWeight = l.LocalityWeight * l.Availability
			eff[li] = l.EffectiveWeight
		}
		if sumOf(eff) == 0 {
			continue
		}
		for li, s := range specApportion(Million, eff) {
			locs[li].ShareInPriority = s
		}
		flowing := pr.Load - pr.Dropped
		if flowing == 0 || r.Outcome != Routable {
			continue
		}
		for li, tr := range specApportion(flowing, eff) {
			l := &locs[li]
			l.Traffic = tr
			if tr == 0 {
				continue
			}
			eps := r.Endpoints[l.FirstEndpoint : l.FirstEndpoint+l.EndpointCount]
			w := make([]uint64, len(eps))
			for i, er := range eps {
				if er.Selectable {
					w[i] = in[er.Index].Weight
				}
			}
			for i, s := range specApportion(tr, w) {
				eps[i].Share = s
			}
		}
	}
	return r
}

func sumOf(w []uint64) uint64 {
	var s uint64
	for _, x := range w {
		s += x
	}
	return s
}

// enumsInRange reports whether every enum of the input has a declared value
// (the spec defines nothing for others; see fuzz_test.go).
func enumsInRange(p Policy, in []Endpoint) bool {
	if p.PanicMode > FailClosed || p.DrainingCapacity > IncludeDraining {
		return false
	}
	for _, e := range in {
		if e.Admin > Unavailable || e.Probe > ProbeUnhealthy || e.Circuit > CircuitOpen || e.Scope > ScopeOut {
			return false
		}
	}
	return true
}

// expectedErrors is an independent validator: the set of sentinel errors the
// implementation may return for this input, nil when the input is valid.
// Stages mirror the spec's "whole snapshot is rejected": the policy first, then
// per-endpoint ranges, then duplicates, then per-group consistency and sums.
func expectedErrors(p Policy, in []Endpoint) []error {
	if p.OverprovisioningFactor < 1 || p.OverprovisioningFactor > 1000 || p.PanicThreshold > 100 ||
		p.PanicMode > FailClosed || p.DrainingCapacity > IncludeDraining {
		return []error{ErrInvalidPolicy}
	}
	var out []error
	for _, e := range in {
		if e.Weight < 1 || e.Weight > MaxWeight || e.LocalityWeight < 1 || e.LocalityWeight > MaxWeight {
			out = appendOnce(out, ErrInvalidWeight)
		}
		if e.Priority > MaxPriority {
			out = appendOnce(out, ErrInvalidPriority)
		}
		if e.Admin > Unavailable || e.Probe > ProbeUnhealthy || e.Circuit > CircuitOpen || e.Scope > ScopeOut {
			out = appendOnce(out, ErrInvalidState)
		}
	}
	if out != nil {
		return out
	}
	type hp struct {
		a string
		p uint32
	}
	seen := map[hp]bool{}
	for _, e := range in {
		if seen[hp{e.Address, e.Port}] {
			return []error{ErrDuplicateEndpoint}
		}
		seen[hp{e.Address, e.Port}] = true
	}
	type group struct {
		p uint32
		l Locality
	}
	lw := map[group]uint64{}
	sums := map[group]uint64{}
	lwSum := map[uint32]uint64{}
	for _, e := range in {
		g := group{e.Priority, e.Locality}
		if w, ok := lw[g]; ok && w != e.LocalityWeight {
			out = appendOnce(out, ErrInconsistentTopology)
		} else if !ok {
			lw[g] = e.LocalityWeight
			lwSum[e.Priority] += e.LocalityWeight // ≤ 128·n·2³², no wrap for test sizes
		}
		sums[g] += e.Weight // each ≤ 2³²−1, no wrap for test sizes
		if sums[g] > MaxWeight {
			out = appendOnce(out, ErrWeightOverflow)
		}
	}
	for _, s := range lwSum {
		if s > MaxWeight {
			out = appendOnce(out, ErrWeightOverflow)
		}
	}
	return out
}

func appendOnce(s []error, e error) []error {
	for _, x := range s {
		if x == e {
			return s
		}
	}
	return append(s, e)
}

var sentinels = []error{ErrInconsistentTopology, ErrDuplicateEndpoint, ErrInvalidWeight, ErrInvalidPriority, ErrWeightOverflow, ErrInvalidPolicy, ErrInvalidState}

// checkError verifies err against the independent validator.
func checkError(p Policy, in []Endpoint, err error) error {
	want := expectedErrors(p, in)
	if err == nil {
		if want != nil {
			return fmt.Errorf("accepted an input the validator rejects with %v", want)
		}
		return nil
	}
	matched := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			matched++
		}
	}
	if matched != 1 {
		return fmt.Errorf("error %q matches %d sentinels, want exactly 1", err, matched)
	}
	for _, w := range want {
		if errors.Is(err, w) {
			return nil
		}
	}
	return fmt.Errorf("error %q, want one of %v", err, want)
}

// checkInvariants is property (a): conservation of the millionths, the
// structure of the Result and the verifiable reason of a non-Routable outcome.
func checkInvariants(p Policy, in []Endpoint, r *Result) error {
	if len(r.Endpoints) != len(in) {
		return fmt.Errorf("%d endpoint results for %d inputs", len(r.Endpoints), len(in))
	}
	seen := make([]bool, len(in))
	for _, er := range r.Endpoints {
		if er.Index < 0 || er.Index >= len(in) || seen[er.Index] {
			return fmt.Errorf("endpoint index %d out of range or repeated", er.Index)
		}
		seen[er.Index] = true
		if !er.Selectable && er.Share != 0 {
			return fmt.Errorf("endpoint #%d not selectable but has share %d", er.Index, er.Share)
		}
		if er.Eligible && (!er.PanicEligible || !er.Configured) || er.PanicEligible && !er.Configured {
			return fmt.Errorf("endpoint #%d: eligible ⊄ panic-eligible ⊄ configured", er.Index)
		}
	}
	// Structure: priorities ascending, localities and endpoints tiled exactly.
	nextLoc, nextEp := 0, 0
	var sumT, sumP uint64
	for pi, pr := range r.Priorities {
		if pi > 0 && pr.Priority <= r.Priorities[pi-1].Priority {
			return fmt.Errorf("priorities not strictly ascending at %d", pi)
		}
		if pr.FirstLocality != nextLoc || pr.LocalityCount < 1 {
			return fmt.Errorf("priority %d localities [%d,+%d) do not tile", pr.Priority, pr.FirstLocality, pr.LocalityCount)
		}
		nextLoc += pr.LocalityCount
		sumT += pr.ConfiguredWeight
		sumP += pr.PanicEligibleWeight
		for _, l := range r.Localities[pr.FirstLocality:nextLoc] {
			if l.Priority != pr.Priority || l.FirstEndpoint != nextEp || l.EndpointCount < 1 {
				return fmt.Errorf("locality %v of priority %d does not tile", l.Locality, pr.Priority)
			}
			nextEp += l.EndpointCount
		}
	}
	if nextLoc != len(r.Localities) || nextEp != len(r.Endpoints) {
		return fmt.Errorf("tiling covers %d/%d localities, %d/%d endpoints", nextLoc, len(r.Localities), nextEp, len(r.Endpoints))
	}

	if r.Outcome != Routable {
		for _, er := range r.Endpoints {
			if er.Share != 0 {
				return fmt.Errorf("outcome %v but endpoint #%d has share %d", r.Outcome, er.Index, er.Share)
			}
		}
		for _, l := range r.Localities {
			if l.Traffic != 0 {
				return fmt.Errorf("outcome %v but locality %v has traffic %d", r.Outcome, l.Locality, l.Traffic)
			}
		}
		for _, pr := range r.Priorities {
			if pr.Load != 0 {
				return fmt.Errorf("outcome %v but priority %d has load %d", r.Outcome, pr.Priority, pr.Load)
			}
		}
	}
	switch r.Outcome {
	case NoCapacity:
		// A verifiable reason: nothing configured; or panic disabled and no
		// priority has any health; or total panic under UseAll with no
		// panic-eligible (hence no eligible) weight anywhere.
		switch {
		case sumT == 0:
		case p.PanicThreshold == 0 && r.NTA == 0:
		case p.PanicThreshold > 0 && p.PanicMode == UseAll && r.TotalPanic && sumP == 0:
			for _, er := range r.Endpoints {
				if er.PanicEligible || er.Eligible {
					return fmt.Errorf("NoCapacity but endpoint #%d is panic-eligible", er.Index)
				}
			}
		default:
			return fmt.Errorf("NoCapacity without a reason (ΣT=%d, ΣP=%d, NTA=%d, policy %+v)", sumT, sumP, r.NTA, p)
		}
		return nil
	case PanicRejected:
		if p.PanicMode != FailClosed || p.PanicThreshold == 0 || !r.TotalPanic || r.DroppedMillionths != Million {
			return fmt.Errorf("PanicRejected without total panic under FailClosed (%+v, total %v, dropped %d)", p, r.TotalPanic, r.DroppedMillionths)
		}
		for _, pr := range r.Priorities {
			if pr.ConfiguredWeight > 0 && !pr.InPanic && r.NTA > 0 {
				return fmt.Errorf("PanicRejected but priority %d is not in panic and NTA=%d", pr.Priority, r.NTA)
			}
		}
		return nil
	case Routable:
	default:
		return fmt.Errorf("unknown outcome %d", r.Outcome)
	}

	var sumLoad, sumShare, sumDropped uint64
	for _, pr := range r.Priorities {
		sumLoad += pr.Load
		sumDropped += pr.Dropped
		if pr.Dropped != 0 && (pr.Dropped != pr.Load || !pr.InPanic || p.PanicMode != FailClosed) {
			return fmt.Errorf("priority %d drops %d of load %d (in panic %v, %v)", pr.Priority, pr.Dropped, pr.Load, pr.InPanic, p.PanicMode)
		}
		var sumTraffic uint64
		for _, l := range r.Localities[pr.FirstLocality : pr.FirstLocality+pr.LocalityCount] {
			sumTraffic += l.Traffic
			var s uint64
			for _, er := range r.Endpoints[l.FirstEndpoint : l.FirstEndpoint+l.EndpointCount] {
				s += er.Share
			}
			if s != l.Traffic {
				return fmt.Errorf("locality %v of priority %d: Σ share %d ≠ traffic %d", l.Locality, pr.Priority, s, l.Traffic)
			}
			sumShare += s
		}
		if sumTraffic != pr.Load-pr.Dropped {
			return fmt.Errorf("priority %d: Σ traffic %d ≠ load %d − dropped %d", pr.Priority, sumTraffic, pr.Load, pr.Dropped)
		}
	}
	if sumLoad != Million {
		return fmt.Errorf("Σ load = %d", sumLoad)
	}
	if sumDropped != r.DroppedMillionths {
		return fmt.Errorf("Σ priority dropped %d ≠ DroppedMillionths %d", sumDropped, r.DroppedMillionths)
	}
	if sumShare+r.DroppedMillionths != Million {
		return fmt.Errorf("Σ share %d + dropped %d ≠ 1_000_000", sumShare, r.DroppedMillionths)
	}
	return nil
}
