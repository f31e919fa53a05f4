package planelog

import (
	"slices"
	"time"
)

// keyBurst is how many lines one key may have at once before the period
// bounds it: a change and its undoing (an endpoint out and back, an edit
// and its revert) are both written when they happen.
const keyBurst = 2

// keyed bounds the lines of one kind by key: each key has a bucket of
// keyBurst lines refilled one per period. A change that finds its key's
// bucket empty is held, and the changes after it merged into it (from stays
// what the last line said, to follows the latest, n counts them), until a
// line is due: then one line says what they came to.
type keyed[K comparable, V any] struct {
	every time.Duration
	cmp   func(a, b K) int // the order due lines are written in
	keys  map[K]*bucket[V]
	// pruned is when keys was last rid of the keys whose buckets are full.
	pruned time.Time
}

type bucket[V any] struct {
	tokens   int
	refilled time.Time
	held     *held[V] // nil: nothing waits for a line
}

// held is the changes of one key waiting for its next line.
type held[V any] struct {
	from, to V
	n        int
	due      time.Time
}

func newKeyed[K comparable, V any](every time.Duration, cmp func(a, b K) int) keyed[K, V] {
	return keyed[K, V]{every: every, cmp: cmp, keys: map[K]*bucket[V]{}}
}

// offer is a change of key k from from to to at now. It says whether a line
// may be written now; if not, the change is held (merged into what is held
// already), and written by due.
func (b *keyed[K, V]) offer(k K, from, to V, now time.Time) bool {
	bk := b.keys[k]
	if bk == nil {
		return true
	}
	if bk.held != nil {
		bk.held.to = to
		bk.held.n++
		return false
	}
	b.refill(bk, now)
	if bk.tokens > 0 {
		return true
	}
	bk.held = &held[V]{from: from, to: to, n: 1, due: bk.refilled.Add(b.every)}
	return false
}

// holding says whether key k has changes waiting for a line.
func (b *keyed[K, V]) holding(k K) bool {
	bk := b.keys[k]
	return bk != nil && bk.held != nil
}

// wrote takes a token of key k for a line written at now, and forgets
// what was held.
func (b *keyed[K, V]) wrote(k K, now time.Time) {
	bk := b.keys[k]
	if bk == nil {
		bk = &bucket[V]{tokens: keyBurst, refilled: now}
		b.keys[k] = bk
	}
	b.refill(bk, now)
	bk.tokens = max(bk.tokens-1, 0)
	bk.held = nil
}

// follow makes what is held for key k (holding is true) end at to,
// without counting a change: what the line will say follows the latest.
func (b *keyed[K, V]) follow(k K, to V) {
	b.keys[k].held.to = to
}

// drop forgets what is held for key k, which is gone.
func (b *keyed[K, V]) drop(k K) {
	if bk := b.keys[k]; bk != nil {
		bk.held = nil
	}
}

func (b *keyed[K, V]) refill(bk *bucket[V], now time.Time) {
	n := int(now.Sub(bk.refilled) / b.every)
	if n <= 0 {
		return
	}
	if bk.tokens+n >= keyBurst {
		bk.tokens, bk.refilled = keyBurst, now
		return
	}
	bk.tokens += n
	bk.refilled = bk.refilled.Add(time.Duration(n) * b.every)
}

// dueLine is a key's held changes whose line is due.
type dueLine[K comparable, V any] struct {
	key K
	held[V]
}

// due takes the held changes whose line is due at now, in key order; the
// caller writes (or counts) each and says so with wrote.
func (b *keyed[K, V]) due(now time.Time) []dueLine[K, V] {
	var out []dueLine[K, V]
	for k, bk := range b.keys {
		if bk.held != nil && !bk.held.due.After(now) {
			out = append(out, dueLine[K, V]{k, *bk.held})
			bk.held = nil
		}
	}
	slices.SortFunc(out, func(x, y dueLine[K, V]) int { return b.cmp(x.key, y.key) })
	return out
}

// next is when the first held line is due; zero when none is held.
func (b *keyed[K, V]) next() time.Time {
	var first time.Time
	for _, bk := range b.keys {
		if bk.held != nil && (first.IsZero() || bk.held.due.Before(first)) {
			first = bk.held.due
		}
	}
	return first
}

// prune forgets, at most once a period, the keys that hold nothing and
// whose buckets are full again: they are as if they never had a line, so
// the keys kept are those with lines in the last keyBurst periods.
func (b *keyed[K, V]) prune(now time.Time) {
	if now.Sub(b.pruned) < b.every {
		return
	}
	b.pruned = now
	for k, bk := range b.keys {
		if bk.held == nil && now.Sub(bk.refilled) >= time.Duration(keyBurst-bk.tokens)*b.every {
			delete(b.keys, k)
		}
	}
}
