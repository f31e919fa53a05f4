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

// canonicalSorter orders input indexes by (priority, region, zone, subZone, address, port).
type canonicalSorter struct{ c *Calculator }

func (s *canonicalSorter) Len() int { return len(s.c.order) }
func (s *canonicalSorter) Swap(i, j int) {
	s.c.order[i], s.c.order[j] = s.c.order[j], s.c.order[i]
}
func (s *canonicalSorter) Less(i, j int) bool {
	a, b := &s.c.eps[s.c.order[i]], &s.c.eps[s.c.order[j]]
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if c := a.Locality.Compare(b.Locality); c != 0 {
		return c < 0
	}
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return s.c.order[i] < s.c.order[j]
}

// addressSorter orders input indexes by (address, port).
type addressSorter struct{ c *Calculator }

func (s *addressSorter) Len() int { return len(s.c.byAddr) }
func (s *addressSorter) Swap(i, j int) {
	s.c.byAddr[i], s.c.byAddr[j] = s.c.byAddr[j], s.c.byAddr[i]
}
func (s *addressSorter) Less(i, j int) bool {
	a, b := &s.c.eps[s.c.byAddr[i]], &s.c.eps[s.c.byAddr[j]]
	if a.Address != b.Address {
		return a.Address < b.Address
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return s.c.byAddr[i] < s.c.byAddr[j]
}
