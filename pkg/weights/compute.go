package weights

import (
	"cmp"
	"hash/maphash"
	"math/bits"
	"slices"
	"sort"
)

// Calculator computes Results and keeps its scratch between calls, so a
// Calculator reused at a stable candidate count allocates nothing. It is not
// safe for concurrent use; the Result it returns is valid until its next Compute.
type Calculator struct {
	eps   []Endpoint
	order []int32 // input indexes in canonical order

	// Grouping by hash keeps the sort to the few distinct groups and the
	// small runs inside each, so its memory access stays local: sorting all
	// endpoints at once by their strings is cache-bound at 100k endpoints.
	// groupOf keeps every key it has seen; a slot belongs to this
	// computation only when its generation matches. Overwriting a present
	// key never allocates, where clearing and refilling the map may (clear
	// reseeds it, and a refill can split its tables differently).
	groupOf    map[groupKey]groupSlot
	generation uint32
	groups     []groupKey
	groupSize  []int32
	groupOrder []int32 // group ids in canonical order
	groupStart []int32 // by group id: first position in order
	epGroup    []int32 // by input index
	// duplicates: (hash of address:port, canonical position), sorted: a
	// compact array sorts with local memory access where a map of 100k
	// string keys would miss the cache on every probe
	addrs []addrHash
	seed  maphash.Seed

	groupSort groupSorter
	runSort   runSorter
	split     apportioner
	result    Result
}

type groupKey struct {
	priority uint32
	locality Locality
}

type groupSlot struct {
	generation uint32
	id         int32
}

type addrHash struct {
	hash uint64
	pos  int32 // position in canonical order
}

// NewCalculator returns a Calculator with empty scratch.
func NewCalculator() *Calculator {
	c := &Calculator{groupOf: map[groupKey]groupSlot{}, seed: maphash.MakeSeed()}
	c.groupSort.c = c
	c.runSort.c = c
	return c
}

// Compute derives the shares of one upstream. A validation error rejects the
// whole input and no Result is returned. The Result is owned by c and is
// overwritten by the next Compute; Clone it to keep it.
func (c *Calculator) Compute(p Policy, eps []Endpoint) (*Result, error) {
	c.eps = eps
	defer func() { c.eps = nil }()
	if err := validatePolicy(p); err != nil {
		return nil, err
	}
	c.sortCanonical()
	if err := c.validateEndpoints(); err != nil {
		return nil, err
	}
	if err := c.checkDuplicates(); err != nil {
		return nil, err
	}
	r := &c.result
	r.reset()
	if err := c.group(p); err != nil {
		return nil, err
	}
	c.split.reserve(c.maxKeys())
	c.priorityLoads(p)
	c.localityTraffic(p)
	return r, nil
}

// Compute is the one-shot form of Calculator.Compute; the caller owns the Result.
func Compute(p Policy, eps []Endpoint) (*Result, error) {
	return NewCalculator().Compute(p, eps)
}

// Validate reports the first validation error of an input, or nil.
func Validate(p Policy, eps []Endpoint) error {
	_, err := NewCalculator().Compute(p, eps)
	return err
}

// Clone returns a deep copy that no Calculator will overwrite.
func (r *Result) Clone() *Result {
	out := new(Result)
	r.CloneInto(out)
	return out
}

// CloneInto makes out a copy of r that shares nothing with it.
func (r *Result) CloneInto(out *Result) {
	*out = *r
	out.Priorities = append([]PriorityResult(nil), r.Priorities...)
	out.Localities = append([]LocalityResult(nil), r.Localities...)
	out.Endpoints = append([]EndpointResult(nil), r.Endpoints...)
}

func (r *Result) reset() {
	r.Outcome = Routable
	r.NTA = 0
	r.TotalPanic = false
	r.DroppedMillionths = 0
	r.Priorities = r.Priorities[:0]
	r.Localities = r.Localities[:0]
	r.Endpoints = r.Endpoints[:0]
}

func validatePolicy(p Policy) error {
	if p.OverprovisioningFactor < 1 || p.OverprovisioningFactor > 1000 {
		return &InvalidPolicyError{Field: "overprovisioningFactor", Value: p.OverprovisioningFactor, Want: "1..1000"}
	}
	if p.PanicThreshold > 100 {
		return &InvalidPolicyError{Field: "panicThreshold", Value: p.PanicThreshold, Want: "0..100"}
	}
	if p.PanicMode > FailClosed {
		return &InvalidPolicyError{Field: "panicMode", Value: uint32(p.PanicMode), Want: "UseAll or FailClosed"}
	}
	if p.DrainingCapacity > IncludeDraining {
		return &InvalidPolicyError{Field: "drainingCapacity", Value: uint32(p.DrainingCapacity), Want: "Exclude or Include"}
	}
	return nil
}

// validateEndpoints checks each endpoint in canonical order, so a permuted
// input reports the same first error.
func (c *Calculator) validateEndpoints() error {
	for _, idx := range c.order {
		i, e := int(idx), &c.eps[idx]
		if e.Weight < 1 || e.Weight > MaxWeight {
			return &InvalidWeightError{Index: i, Field: "weight", Value: e.Weight}
		}
		if e.LocalityWeight < 1 || e.LocalityWeight > MaxWeight {
			return &InvalidWeightError{Index: i, Field: "localityWeight", Value: e.LocalityWeight}
		}
		if e.Priority > MaxPriority {
			return &InvalidPriorityError{Index: i, Priority: e.Priority}
		}
		if e.Admin > Unavailable || e.Probe > ProbeUnhealthy || e.Circuit > CircuitOpen || e.Scope > ScopeOut {
			return &InvalidStateError{Index: i, Admin: e.Admin, Probe: e.Probe, Circuit: e.Circuit, Scope: e.Scope}
		}
	}
	return nil
}

// eligibility classifies one endpoint; it is the single place where the
// health signals are read, so every later stage uses the same sample.
func eligibility(e *Endpoint, p Policy) (configured, eligible, panicEligible bool, reason Reason) {
	configured = e.Scope == ScopeIn &&
		(e.Admin == Ready || (e.Admin == Draining && p.DrainingCapacity == IncludeDraining))
	switch {
	case e.Scope != ScopeIn:
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
	panicEligible = configured && e.Admin == Ready
	eligible = panicEligible && reason == ReasonNone
	return configured, eligible, panicEligible, reason
}

// sortCanonical puts the input indexes in canonical order: groups by
// (priority, locality), then endpoints by (address, port) inside each.
func (c *Calculator) sortCanonical() {
	n := len(c.eps)
	c.generation++
	if c.generation == 0 || len(c.groupOf) > 4*len(c.groups)+4096 {
		// forget keys of long-gone topologies; rare, and the only time this allocates
		clear(c.groupOf)
		c.generation = 1
	}
	c.groups, c.groupSize = c.groups[:0], c.groupSize[:0]
	c.epGroup = growTo(c.epGroup, n)
	g := int32(-1)
	for i := range c.eps {
		k := groupKey{c.eps[i].Priority, c.eps[i].Locality}
		// inputs usually arrive a group at a time: compare with the group
		// of the endpoint before instead of hashing every key
		if g < 0 || c.groups[g] != k {
			slot := c.groupOf[k]
			g = slot.id
			if slot.generation != c.generation {
				g = int32(len(c.groups))
				c.groupOf[k] = groupSlot{generation: c.generation, id: g}
				c.groups = append(c.groups, k)
				c.groupSize = append(c.groupSize, 0)
			}
		}
		c.epGroup[i] = g
		c.groupSize[g]++
	}
	ng := len(c.groups)
	c.groupOrder = growTo(c.groupOrder, ng)
	for g := range c.groupOrder {
		c.groupOrder[g] = int32(g)
	}
	sort.Sort(&c.groupSort)
	c.groupStart = growTo(c.groupStart, ng)
	pos := int32(0)
	for _, g := range c.groupOrder {
		c.groupStart[g] = pos
		pos += c.groupSize[g]
	}
	c.order = growTo(c.order, n)
	for i := range c.eps {
		g := c.epGroup[i]
		c.order[c.groupStart[g]] = int32(i)
		c.groupStart[g]++
	}
	// inside each group: by (address, port), ties by input index
	start := 0
	for _, g := range c.groupOrder {
		end := start + int(c.groupSize[g])
		c.runSort.lo, c.runSort.hi = start, end
		sort.Sort(&c.runSort)
		start = end
	}
}

func growTo(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// checkDuplicates finds one address:port twice. Of all duplicates it
// reports the one met first in canonical order, so the error does not
// depend on input order (nor on the hash seed).
func (c *Calculator) checkDuplicates() error {
	n := len(c.order)
	if n <= smallDuplicateCheck && !c.mayHaveDuplicates() {
		return nil
	}
	if cap(c.addrs) < n {
		c.addrs = make([]addrHash, n)
	}
	c.addrs = c.addrs[:n]
	for pos, idx := range c.order {
		e := &c.eps[idx]
		c.addrs[pos] = addrHash{hash: maphash.String(c.seed, e.Address) ^ uint64(e.Port)*0x9e3779b97f4a7c15, pos: int32(pos)}
	}
	slices.SortFunc(c.addrs, func(a, b addrHash) int {
		if a.hash != b.hash {
			return cmp.Compare(a.hash, b.hash)
		}
		return cmp.Compare(a.pos, b.pos)
	})
	first, second := int32(-1), int32(-1)
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && c.addrs[hi].hash == c.addrs[lo].hash {
			hi++
		}
		// a run shares a hash; it holds duplicates only if the keys are equal
		for j := lo + 1; j < hi; j++ {
			b := &c.eps[c.order[c.addrs[j].pos]]
			for i := lo; i < j; i++ {
				a := &c.eps[c.order[c.addrs[i].pos]]
				if a.Address == b.Address && a.Port == b.Port {
					if second < 0 || c.addrs[j].pos < second {
						first, second = c.addrs[i].pos, c.addrs[j].pos
					}
					break
				}
			}
		}
		lo = hi
	}
	if second < 0 {
		return nil
	}
	i, j := int(c.order[first]), int(c.order[second])
	if i > j {
		i, j = j, i
	}
	e := &c.eps[c.order[second]]
	return &DuplicateEndpointError{Address: e.Address, Port: e.Port, Indexes: [2]int{i, j}}
}

// smallDuplicateCheck is the most endpoints mayHaveDuplicates checks with
// its table on the stack.
const smallDuplicateCheck = 64

// mayHaveDuplicates reports whether two endpoints may share address and
// port, by an open-addressed table of their hashes: a small upstream, the
// common case of a change, then skips sorting. A true answer (a real
// duplicate, or two keys whose hashes collide) leaves the exact search,
// and the choice of which duplicate to report, to the sort.
func (c *Calculator) mayHaveDuplicates() bool {
	const size = 2 * smallDuplicateCheck // a power of two, at most half full
	var table [size]uint64               // 0: empty; hashes are made odd
	for i := range c.eps {
		e := &c.eps[i]
		h := (maphash.String(c.seed, e.Address) ^ uint64(e.Port)*0x9e3779b97f4a7c15) | 1
		for slot := h % size; ; slot = (slot + 1) % size {
			if table[slot] == 0 {
				table[slot] = h
				break
			}
			if table[slot] == h {
				return true
			}
		}
	}
	return false
}

// group walks the canonical order once, classifying endpoints and summing
// the weights of every priority and locality with checked arithmetic.
func (c *Calculator) group(p Policy) error {
	r := &c.result
	for k := 0; k < len(c.order); {
		e := &c.eps[c.order[k]]
		prio := PriorityResult{Priority: e.Priority, FirstLocality: len(r.Localities)}
		var localityWeights uint64 // Σ localityWeight ≤ MaxWeight: what Envoy and gRPC accept per priority, and it bounds every eff sum
		for k < len(c.order) && c.eps[c.order[k]].Priority == prio.Priority {
			first := &c.eps[c.order[k]]
			loc := LocalityResult{
				Priority:       prio.Priority,
				Locality:       first.Locality,
				LocalityWeight: first.LocalityWeight,
				FirstEndpoint:  len(r.Endpoints),
			}
			var all uint64
			locStart := k
			for k < len(c.order) {
				idx := c.order[k]
				e := &c.eps[idx]
				if e.Priority != prio.Priority || e.Locality != loc.Locality {
					break
				}
				if e.LocalityWeight != loc.LocalityWeight {
					return &InconsistentTopologyError{
						Priority: prio.Priority, Locality: loc.Locality,
						Weights: [2]uint64{loc.LocalityWeight, e.LocalityWeight},
						Indexes: [2]int{int(c.order[locStart]), int(idx)},
					}
				}
				all += e.Weight // each ≤ 2³²−1 and checked below, so this cannot wrap first
				if all > MaxWeight {
					return &WeightOverflowError{What: "endpoint weights of one locality sum above 4294967295", Priority: prio.Priority, Locality: loc.Locality}
				}
				configured, eligible, panicEligible, reason := eligibility(e, p)
				r.Endpoints = append(r.Endpoints, EndpointResult{
					Index: int(idx), Configured: configured, Eligible: eligible,
					PanicEligible: panicEligible, Reason: reason,
				})
				if configured {
					loc.ConfiguredWeight += e.Weight
				}
				k++
			}
			loc.EndpointCount = len(r.Endpoints) - loc.FirstEndpoint
			var ok bool
			if localityWeights, ok = addChecked(localityWeights, loc.LocalityWeight); !ok || localityWeights > MaxWeight {
				return &WeightOverflowError{What: "locality weights of one priority sum above 4294967295", Priority: prio.Priority, Locality: loc.Locality}
			}
			if prio.ConfiguredWeight, ok = addChecked(prio.ConfiguredWeight, loc.ConfiguredWeight); !ok {
				return &WeightOverflowError{What: "configured weight of a priority", Priority: prio.Priority, Locality: loc.Locality}
			}
			r.Localities = append(r.Localities, loc)
		}
		prio.LocalityCount = len(r.Localities) - prio.FirstLocality
		// E_p and P_p are bounded by T_p-like sums of the same weights, so the
		// checked T_p sum of all endpoints bounds them too.
		for li := prio.FirstLocality; li < len(r.Localities); li++ {
			l := &r.Localities[li]
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er := &r.Endpoints[ei]
				w := c.eps[er.Index].Weight
				if er.Eligible {
					prio.EligibleWeight += w
				}
				if er.PanicEligible {
					prio.PanicEligibleWeight += w
				}
			}
		}
		r.Priorities = append(r.Priorities, prio)
	}
	return nil
}

// maxKeys is the most keys any apportion of this topology can split over:
// the priorities, the localities of one priority, the endpoints of one
// locality. Which of those apportions run depends on health, so the scratch
// is sized for all of them up front: otherwise a health change that sends
// traffic to a larger locality (or priority) than any that had traffic during
// warm-up would grow the scratch at a stable candidate count.
func (c *Calculator) maxKeys() int {
	r := &c.result
	n := len(r.Priorities)
	for i := range r.Priorities {
		n = max(n, r.Priorities[i].LocalityCount)
	}
	for i := range r.Localities {
		n = max(n, r.Localities[i].EndpointCount)
	}
	return n
}

func addChecked(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}

// ratioMillionths is min(Million, floor(opf × part × 10_000 / whole)) with a
// 128-bit intermediate; part ≤ whole, so the quotient fits.
func ratioMillionths(opf uint32, part, whole uint64) uint64 {
	if whole == 0 {
		return 0
	}
	hi, lo := bits.Mul64(part, uint64(opf)*10_000)
	q, _ := bits.Div64(hi, lo, whole)
	if q > Million {
		return Million
	}
	return q
}

// priorityLoads is stage 1.
func (c *Calculator) priorityLoads(p Policy) {
	r := &c.result
	var sumHealth uint64
	configured := 0
	for i := range r.Priorities {
		pr := &r.Priorities[i]
		if pr.ConfiguredWeight == 0 {
			continue
		}
		configured++
		pr.Health = ratioMillionths(p.OverprovisioningFactor, pr.EligibleWeight, pr.ConfiguredWeight)
		sumHealth += pr.Health // ≤ 128 × Million
	}
	r.NTA = min(sumHealth, Million)
	if configured == 0 {
		// Nothing is configured at all: there is no capacity to panic into.
		r.Outcome = NoCapacity
		return
	}
	notInPanic := 0
	for i := range r.Priorities {
		pr := &r.Priorities[i]
		if pr.ConfiguredWeight == 0 {
			continue
		}
		pr.InPanic = p.PanicThreshold > 0 && r.NTA < Million &&
			lessThanPercent(pr.EligibleWeight, pr.ConfiguredWeight, p.PanicThreshold)
		if !pr.InPanic {
			notInPanic++
		}
	}
	switch {
	case r.NTA > 0 && notInPanic > 0:
		c.normalLoads(p)
	case p.PanicThreshold > 0:
		c.totalPanic(p)
	default:
		r.Outcome = NoCapacity
	}
}

// lessThanPercent reports E × 100 < threshold × T without overflow.
func lessThanPercent(e, t uint64, threshold uint32) bool {
	eh, el := bits.Mul64(e, 100)
	th, tl := bits.Mul64(t, uint64(threshold))
	return eh < th || (eh == th && el < tl)
}

func (c *Calculator) normalLoads(p Policy) {
	r := &c.result
	remaining := uint64(Million)
	firstHealthy := -1
	for i := range r.Priorities {
		pr := &r.Priorities[i]
		if pr.Health == 0 {
			continue
		}
		if firstHealthy < 0 {
			firstHealthy = i
		}
		pr.Load = min(remaining, pr.Health*Million/r.NTA)
		remaining -= pr.Load
	}
	r.Priorities[firstHealthy].Load += remaining
	if p.PanicMode == FailClosed {
		for i := range r.Priorities {
			pr := &r.Priorities[i]
			if pr.InPanic {
				pr.Dropped = pr.Load
				r.DroppedMillionths += pr.Load
			}
		}
	}
}

func (c *Calculator) totalPanic(p Policy) {
	r := &c.result
	r.TotalPanic = true
	if p.PanicMode == FailClosed {
		r.Outcome = PanicRejected
		r.DroppedMillionths = Million
		return
	}
	w := c.split.weights(len(r.Priorities))
	var sum uint64
	for i := range r.Priorities {
		w[i] = r.Priorities[i].PanicEligibleWeight
		sum += w[i]
	}
	if sum == 0 {
		r.Outcome = NoCapacity
		return
	}
	c.split.apportion(Million, sum)
	for i := range r.Priorities {
		r.Priorities[i].Load = c.split.parts[i]
	}
}

// localityTraffic is stages 2 and 3. Availability and share in priority are
// computed for every configured priority (explain and standby rendering show
// them); traffic flows only where the priority has undropped load.
func (c *Calculator) localityTraffic(p Policy) {
	r := &c.result
	for pi := range r.Priorities {
		pr := &r.Priorities[pi]
		usePanic := pr.InPanic && p.PanicMode == UseAll && r.Outcome == Routable
		locs := r.Localities[pr.FirstLocality : pr.FirstLocality+pr.LocalityCount]
		for li := range locs {
			l := &locs[li]
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er := &r.Endpoints[ei]
				er.Selectable = er.Eligible || (usePanic && er.PanicEligible)
				if er.Selectable {
					l.SelectableWeight += c.eps[er.Index].Weight
				}
			}
			l.Availability = ratioMillionths(p.OverprovisioningFactor, l.SelectableWeight, l.ConfiguredWeight)
			if l.SelectableWeight > 0 && l.Availability == 0 {
				l.Availability = 1
			}
			l.EffectiveWeight = l.LocalityWeight * l.Availability // Σ ≤ MaxWeight × Million < 2⁶⁴
		}
		w := c.split.weights(len(locs))
		var sum uint64
		for li := range locs {
			w[li] = locs[li].EffectiveWeight
			sum += w[li]
		}
		if sum == 0 {
			continue
		}
		c.split.apportion(Million, sum)
		for li := range locs {
			locs[li].ShareInPriority = c.split.parts[li]
		}
		flowing := pr.Load - pr.Dropped
		if flowing == 0 || r.Outcome != Routable {
			continue
		}
		c.split.apportion(flowing, sum)
		for li := range locs {
			locs[li].Traffic = c.split.parts[li]
		}
		for li := range locs {
			c.endpointShares(&locs[li])
		}
	}
}

func (c *Calculator) endpointShares(l *LocalityResult) {
	if l.Traffic == 0 {
		return
	}
	r := &c.result
	eps := r.Endpoints[l.FirstEndpoint : l.FirstEndpoint+l.EndpointCount]
	w := c.split.weights(len(eps))
	for i := range eps {
		if eps[i].Selectable {
			w[i] = c.eps[eps[i].Index].Weight
		}
	}
	c.split.apportion(l.Traffic, l.SelectableWeight)
	for i := range eps {
		eps[i].Share = c.split.parts[i]
	}
}
