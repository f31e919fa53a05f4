package loadgen

import "sync"

// FlipLog is when each change of each cluster was written: a client that
// receives new content for a cluster at time t is credited with every flip
// of it written before t that it was not credited with yet. Times are Unix
// nanoseconds, so that processes on one machine share them.
//
// A worker process learns of a flip through a pipe, and a busy worker may
// read a receipt before it: a receipt that no logged flip explains waits
// (pending), and the next flip of its cluster logged with an earlier time
// is credited to it then.
type FlipLog struct {
	mu    sync.RWMutex
	at    [][]int64 // per cluster, its flips' times in order
	total int64
	// subs, when set, counts each cluster's subscribers, and expected sums
	// them over the flips logged: the deliveries due.
	subs     []int32
	expected int64
	// pending are, per cluster, the receipts no flip explained yet: the
	// receiving client's cursor and the earliest such receipt's time.
	pending map[int32]map[*int32]int64
	// explained are, per cluster, the last receipt of each client that
	// logged flips explained: it may reflect a flip written just before it
	// whose log has not reached this process yet (a flip coalesced with
	// the one before it into one publication), which is credited to it
	// when logged. Not counted as unexplained; at most one per
	// subscription, and a cluster's go with its next flip.
	explained map[int32]map[*int32]int64
	// hist counts each delivery's time, seg those since the last Segment;
	// deliver is told how many arrived.
	hist, seg *Histogram
	deliver   func(n int)
}

// NewFlipLog is an empty log of clusters clusters; subs (may be nil) counts
// each cluster's subscribers, h (may be nil) counts the deliveries' times
// and deliver (may be nil) is told of deliveries.
func NewFlipLog(clusters int, subs []int32, h *Histogram, deliver func(n int)) *FlipLog {
	if h == nil {
		h = new(Histogram)
	}
	if deliver == nil {
		deliver = func(int) {}
	}
	return &FlipLog{at: make([][]int64, clusters), subs: subs, pending: map[int32]map[*int32]int64{},
		explained: map[int32]map[*int32]int64{}, hist: h, seg: new(Histogram), deliver: deliver}
}

// Add logs a flip of cluster u written at time at (taken before the write
// begins), which must not precede u's previous flip; receipts pending
// after at are credited with it.
func (l *FlipLog) Add(u int32, at int64) {
	l.mu.Lock()
	if u < 0 || int(u) >= len(l.at) {
		l.mu.Unlock()
		return
	}
	l.at[u] = append(l.at[u], at)
	l.total++
	if l.subs != nil {
		l.expected += int64(l.subs[u])
	}
	n := 0
	for _, receipts := range []map[*int32]int64{l.pending[u], l.explained[u]} {
		for cursor, t := range receipts {
			// A receipt at or before this flip can explain no later one.
			if t > at && int(*cursor) == len(l.at[u])-1 {
				l.record(t - at)
				*cursor++
				n++
			}
			delete(receipts, cursor)
		}
	}
	l.mu.Unlock()
	if n > 0 {
		l.deliver(n)
	}
}

// Flips is how many flips were logged; Expected the deliveries they are due.
func (l *FlipLog) Flips() (flips, expected int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.total, l.expected
}

// Pending is how many receipts no logged flip explains.
func (l *FlipLog) Pending() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, m := range l.pending {
		n += int64(len(m))
	}
	return n
}

// first records a client's first receipt of cluster u at at: what it
// holds reflects the flips written before, which it is not credited with.
func (l *FlipLog) first(u int32, cursor *int32, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := int32(0)
	for _, t := range l.at[u] {
		if t >= at {
			break
		}
		n++
	}
	*cursor = n
}

// credit records, for each flip of u from *cursor on written before at,
// the time it took to arrive, and advances *cursor past them; a receipt
// that explains none waits for a flip logged later. The client's own
// goroutine alone calls it for a cursor.
func (l *FlipLog) credit(u int32, cursor *int32, at int64) {
	l.mu.Lock()
	flips := l.at[u]
	n := 0
	for int(*cursor) < len(flips) {
		t0 := flips[*cursor]
		if t0 >= at {
			break
		}
		l.record(at - t0)
		*cursor++
		n++
	}
	if n == 0 {
		m := receiptsOf(l.pending, u)
		if _, ok := m[cursor]; !ok {
			m[cursor] = at // the earliest receipt since the last credit
		}
	} else {
		delete(l.pending[u], cursor)
		receiptsOf(l.explained, u)[cursor] = at
	}
	l.mu.Unlock()
	if n > 0 {
		l.deliver(n)
	}
}

// receiptsOf is cluster u's receipts in byCluster, made when missing.
func receiptsOf(byCluster map[int32]map[*int32]int64, u int32) map[*int32]int64 {
	m := byCluster[u]
	if m == nil {
		m = map[*int32]int64{}
		byCluster[u] = m
	}
	return m
}

// record counts one delivery's time; l.mu is held.
func (l *FlipLog) record(ns int64) {
	l.hist.Record(ns)
	l.seg.Record(ns)
}

// Segment is the deliveries' times since the previous Segment (or the
// start), and starts the next: a run's phases are measured apart.
func (l *FlipLog) Segment() HistogramData {
	l.mu.Lock()
	seg := l.seg
	l.seg = new(Histogram)
	l.mu.Unlock()
	return seg.Data()
}
