package hashring

import (
	"errors"
	"math/bits"
	"slices"
	"sort"
)

// Client is the client the table reproduces.
func (t *Table) Client() Client { return t.client }

// Len is the number of ring entries, or of Maglev slots (0 for an empty
// table).
func (t *Table) Len() int { return len(t.owners) }

// Entry is ring entry i in hash order, or Maglev slot i (its hash is then
// i itself), and the index of the endpoint it names.
func (t *Table) Entry(i int) (hash uint64, endpoint int) {
	if t.client == EnvoyMaglev {
		return uint64(i), int(t.owners[i])
	}
	return t.hashes[i], int(t.owners[i])
}

// Pick is the endpoint the client sends a request of this hash to, as the
// index of Build's input; ok is false when the table is empty. It is the
// client's own first choice: grpc-go and grpc-js then walk on past an
// endpoint in TRANSIENT_FAILURE, which a table cannot know.
func (t *Table) Pick(hash uint64) (endpoint int, ok bool) {
	i, ok := t.slot(hash)
	if !ok {
		return -1, false
	}
	return int(t.owners[i]), true
}

// slot is the entry or slot the client looks up for hash.
func (t *Table) slot(hash uint64) (int, bool) {
	if len(t.owners) == 0 {
		return 0, false
	}
	switch t.client {
	case EnvoyMaglev:
		return int(hash % uint64(len(t.owners))), true
	case GRPCGo:
		// ring.pick: the first entry whose hash is ≥ hash, else the first.
		i := sort.Search(len(t.hashes), func(i int) bool { return t.hashes[i] >= hash })
		if i == len(t.hashes) {
			i = 0
		}
		return i, true
	}
	return ketama(t.hashes, hash), true
}

// ketama is the binary search Envoy's Ring::chooseHost and grpc-js's
// findIndexForHash both port from libketama, signed indices and all: the
// entry i with hashes[i-1] < hash ≤ hashes[i] (hashes[-1] taken as 0),
// else entry 0.
func ketama(hashes []uint64, h uint64) int {
	n := int64(len(hashes))
	lowp, highp := int64(0), n
	for {
		midp := (lowp + highp) / 2
		if midp == n {
			return 0
		}
		midval := hashes[midp]
		var midval1 uint64
		if midp > 0 {
			midval1 = hashes[midp-1]
		}
		if h <= midval && h > midval1 {
			return int(midp)
		}
		if midval < h {
			lowp = midp + 1
		} else {
			highp = midp - 1
		}
		if lowp > highp {
			return 0
		}
	}
}

// ErrNotEnvoy is PickAttempt's answer for a gRPC client, which does not
// hash a retry again.
var ErrNotEnvoy = errors.New("hashring: only Envoy rehashes a host selection retry")

// PickAttempt is the host Envoy's attempt-th host selection (0 the first)
// returns when a retry host predicate rejected the ones before: the ring
// entry attempt places after the first one, or, in Maglev, the slot of the
// hash xored with -attempt.
func (t *Table) PickAttempt(hash uint64, attempt uint32) (endpoint int, ok bool, err error) {
	switch t.client {
	case EnvoyRingHash:
		i, ok := t.slot(hash)
		if !ok {
			return -1, false, nil
		}
		if attempt > 0 {
			i = int((uint64(i) + uint64(attempt)) % uint64(len(t.owners)))
		}
		return int(t.owners[i]), true, nil
	case EnvoyMaglev:
		if attempt > 0 {
			hash ^= ^uint64(0) - uint64(attempt) + 1
		}
		e, ok := t.Pick(hash)
		return e, ok, nil
	}
	return -1, false, ErrNotEnvoy
}

// Count is a number of request hashes, from 0 to 2^64 inclusive: Hi is 1
// only for the whole space.
type Count struct{ Hi, Lo uint64 }

func (c Count) add(x Count) Count {
	lo, carry := bits.Add64(c.Lo, x.Lo, 0)
	return Count{c.Hi + x.Hi + carry, lo}
}

// Share is what one endpoint owns of a table.
type Share struct {
	// Entries is the ring entries or Maglev slots that name it.
	Entries uint64
	// Hashes is how many of the 2^64 request hashes pick it; they sum to
	// 2^64 over the endpoints of a non-empty table.
	Hashes Count
	// Millionths is Hashes in millionths of the hash space, by largest
	// remainder (ties to the lower index): they sum to exactly 1,000,000
	// over a non-empty table.
	Millionths uint64
}

// Shares is every input endpoint's share, indexed as Build's input, exact
// in integers: a ring entry owns the hashes after the previous entry's up
// to its own (the first also those past the last), a Maglev slot the
// hashes that leave it as remainder.
func (t *Table) Shares() []Share {
	s := make([]Share, t.endpoints)
	for i, n := range t.entries {
		s[i].Entries = n
	}
	n := len(t.owners)
	if n == 0 {
		return s
	}
	if t.client == EnvoyMaglev {
		q, r := bits.Div64(1, 0, uint64(n)) // 2^64 = q·n + r
		for slot, o := range t.owners {
			c := Count{Lo: q}
			if uint64(slot) < r {
				c.Lo++
			}
			s[o].Hashes = s[o].Hashes.add(c)
		}
	} else {
		h := t.hashes
		for i, o := range t.owners {
			var c Count
			if i > 0 {
				c.Lo = h[i] - h[i-1]
			} else if d := h[n-1] - h[0]; d == 0 {
				c.Hi = 1
			} else {
				c.Lo = -d
			}
			s[o].Hashes = s[o].Hashes.add(c)
		}
	}
	apportionMillionths(s)
	return s
}

// apportionMillionths sets each share's millionths of 2^64 by largest
// remainder, ties to the lower index.
func apportionMillionths(s []Share) {
	const total = 1_000_000
	rems := make([]uint64, len(s))
	given := uint64(0)
	for i := range s {
		hi, lo := bits.Mul64(s[i].Hashes.Lo, total)
		s[i].Millionths = s[i].Hashes.Hi*total + hi
		rems[i] = lo
		given += s[i].Millionths
	}
	left := total - given
	if left == 0 {
		return
	}
	order := make([]int, len(s))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rems[a] > rems[b]:
			return -1
		case rems[a] < rems[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:left] {
		s[i].Millionths++
	}
}
