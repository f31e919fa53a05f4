package loadgen

import "sync"

// FlipLog is when each change of each cluster was written: a client that
// receives new content for a cluster at time t is credited with every flip
// of it written before t that it was not credited with yet. Times are Unix
// nanoseconds, so that processes on one machine share them.
type FlipLog struct {
	mu    sync.RWMutex
	at    [][]int64 // per cluster, its flips' times in order
	total int64
	// subs, when set, counts each cluster's subscribers, and expected sums
	// them over the flips logged: the deliveries due.
	subs     []int32
	expected int64
}

// NewFlipLog is an empty log of clusters clusters; subs (may be nil) counts
// each cluster's subscribers.
func NewFlipLog(clusters int, subs []int32) *FlipLog {
	return &FlipLog{at: make([][]int64, clusters), subs: subs}
}

// Add logs a flip of cluster u written at time at (before the write
// begins), which must not precede u's previous flip.
func (l *FlipLog) Add(u int32, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u < 0 || int(u) >= len(l.at) {
		return
	}
	l.at[u] = append(l.at[u], at)
	l.total++
	if l.subs != nil {
		l.expected += int64(l.subs[u])
	}
}

// Flips is how many flips were logged; Expected the deliveries they are due.
func (l *FlipLog) Flips() (flips, expected int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.total, l.expected
}

// before is how many flips of u were written before at.
func (l *FlipLog) before(u int32, at int64) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := 0
	for _, t := range l.at[u] {
		if t >= at {
			break
		}
		n++
	}
	return n
}

// credit records in h, for each flip of u from *cursor on written before
// at, the time it took to arrive, advances *cursor past them and returns
// how many there were.
func (l *FlipLog) credit(u int32, cursor *int32, at int64, h *Histogram) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	flips := l.at[u]
	n := 0
	for int(*cursor) < len(flips) {
		t0 := flips[*cursor]
		if t0 >= at {
			break
		}
		h.Record(at - t0)
		*cursor++
		n++
	}
	return n
}
