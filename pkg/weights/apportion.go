package weights

import (
	"math/bits"
	"sort"
)

// apportioner splits an integer total over weights by largest remainder
// (Hamilton), with ties to the key that comes first, reusing its scratch.
type apportioner struct {
	w     []uint64
	parts []uint64
	rems  []uint64
	order []int32
}

// weights returns the zeroed weight scratch for n keys.
func (a *apportioner) weights(n int) []uint64 {
	if cap(a.w) < n {
		a.w = make([]uint64, n)
		a.parts = make([]uint64, n)
		a.rems = make([]uint64, n)
		a.order = make([]int32, n)
	}
	a.w, a.parts, a.rems, a.order = a.w[:n], a.parts[:n], a.rems[:n], a.order[:n]
	clear(a.w)
	return a.w
}

// reserve makes room for n keys, so that weights(k) for k ≤ n never allocates.
func (a *apportioner) reserve(n int) {
	if cap(a.w) < n {
		a.weights(n)
	}
}

// apportion fills parts with the split of total over a.w, whose sum is sum (> 0).
func (a *apportioner) apportion(total, sum uint64) {
	given := uint64(0)
	for i, w := range a.w {
		hi, lo := bits.Mul64(total, w)
		q, rem := bits.Div64(hi, lo, sum) // w ≤ sum, so q ≤ total fits
		a.parts[i], a.rems[i] = q, rem
		given += q
	}
	left := total - given // < number of keys with a remainder
	if left == 0 {
		return
	}
	for i := range a.order {
		a.order[i] = int32(i)
	}
	sort.Sort(byRemainder{a})
	for _, i := range a.order[:left] {
		a.parts[i]++
	}
}

// Apportion splits total over weights so the parts sum exactly to total;
// if the weights sum to 0 every part is 0. It panics if the weights overflow
// uint64 when summed.
func Apportion(total uint64, weights []uint64) []uint64 {
	var a apportioner
	w := a.weights(len(weights))
	var sum uint64
	for i, x := range weights {
		var ok bool
		if sum, ok = addChecked(sum, x); !ok {
			panic("weights: Apportion weights overflow uint64")
		}
		w[i] = x
	}
	out := make([]uint64, len(weights))
	if sum == 0 {
		return out
	}
	a.apportion(total, sum)
	copy(out, a.parts)
	return out
}

type byRemainder struct{ a *apportioner }

func (s byRemainder) Len() int { return len(s.a.order) }
func (s byRemainder) Less(i, j int) bool {
	x, y := s.a.order[i], s.a.order[j]
	if s.a.rems[x] != s.a.rems[y] {
		return s.a.rems[x] > s.a.rems[y]
	}
	return x < y
}
func (s byRemainder) Swap(i, j int) { s.a.order[i], s.a.order[j] = s.a.order[j], s.a.order[i] }

// groupSorter orders group ids by (priority, region, zone, subZone).
type groupSorter struct{ c *Calculator }

func (s *groupSorter) Len() int { return len(s.c.groupOrder) }
func (s *groupSorter) Swap(i, j int) {
	s.c.groupOrder[i], s.c.groupOrder[j] = s.c.groupOrder[j], s.c.groupOrder[i]
}
func (s *groupSorter) Less(i, j int) bool {
	a, b := &s.c.groups[s.c.groupOrder[i]], &s.c.groups[s.c.groupOrder[j]]
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.locality.Compare(b.locality) < 0
}

// runSorter orders order[lo:hi] by (address, port), ties by input index.
type runSorter struct {
	c      *Calculator
	lo, hi int
}

func (s *runSorter) Len() int { return s.hi - s.lo }
func (s *runSorter) Swap(i, j int) {
	o := s.c.order
	o[s.lo+i], o[s.lo+j] = o[s.lo+j], o[s.lo+i]
}
func (s *runSorter) Less(i, j int) bool {
	x, y := s.c.order[s.lo+i], s.c.order[s.lo+j]
	a, b := &s.c.eps[x], &s.c.eps[y]
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return x < y
}
