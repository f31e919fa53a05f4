package planelog

import (
	"context"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"poise.dev/poise/pkg/topology"
)

const (
	// DefaultPeriod is how often a key (an upstream's shares, its state, an
	// endpoint's signal) may have a line once its burst is spent.
	DefaultPeriod = 10 * time.Second
	// flushGap is the least time between two looks at the publications: a
	// stream of publications is logged as one change a second at most.
	flushGap = time.Second
	// maxLines is how many lines of one kind one look writes; the rest are
	// counted on one line.
	maxLines = 10
)

// Options configure a Log.
type Options struct {
	// Log receives the lines (nil: nowhere).
	Log *slog.Logger
	// Period bounds each key's lines (0: DefaultPeriod).
	Period time.Duration
}

// Log follows the publications and logs what they changed. Queue takes a
// publication's changed upstreams (cheap, under the publisher's lock); Run
// looks at them on its own goroutine, at most once per second, so the
// log's cost never delays a publication and a burst of publications is one
// change in the log. A look compares each upstream's state as published
// before with its state now: changes faster than a look are seen as their
// sum.
type Log struct {
	log    *slog.Logger
	period time.Duration
	now    func() time.Time

	mu       sync.Mutex
	pending  map[topology.Key]change
	revision uint64 // of the latest publication queued
	queued   bool   // a publication was queued: the next is not the first
	kick     chan struct{}

	// Used by Flush only (flushing serializes on it).
	flush     sync.Mutex
	summaries keyed[topology.Key, *topology.UpstreamState]
	states    keyed[topology.Key, upstreamState]
	endpoints keyed[endpointKey, endpointState]
}

// change is one upstream's state before the publications queued since the
// last look, and after them; start: the first publication added it.
type change struct {
	old, cur *topology.UpstreamState
	start    bool
}

// New returns a Log; Run it.
func New(o Options) *Log {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	period := o.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	return &Log{log: log, period: period, now: time.Now, pending: map[topology.Key]change{}, kick: make(chan struct{}, 1),
		summaries: newKeyed[topology.Key, *topology.UpstreamState](period, topology.Key.Compare),
		states:    newKeyed[topology.Key, upstreamState](period, topology.Key.Compare),
		endpoints: newKeyed[endpointKey, endpointState](period, endpointKey.compare)}
}

// Queue takes the upstreams the publication of revision rev changed, as
// (old, cur) pairs: (nil, cur) added, (old, nil) removed. An upstream
// queued again before a look keeps its first old state and takes the
// latest.
func (l *Log) Queue(rev uint64, changed iter.Seq2[*topology.UpstreamState, *topology.UpstreamState]) {
	l.mu.Lock()
	start := !l.queued
	l.queued = true
	l.revision = max(l.revision, rev)
	for old, cur := range changed {
		u := cur
		if u == nil {
			u = old
		}
		if u == nil {
			continue
		}
		k := u.Upstream.Key
		if c, ok := l.pending[k]; ok {
			c.cur = cur
			l.pending[k] = c
			continue
		}
		l.pending[k] = change{old: old, cur: cur, start: start}
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Run looks at what is queued, and writes the lines held for their period,
// until ctx is done.
func (l *Log) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-timer.C:
		}
		if wait := last.Add(flushGap).Sub(l.now()); wait > 0 {
			timer.Reset(wait)
			continue
		}
		last = l.now()
		if next := l.Flush(); !next.IsZero() {
			timer.Reset(max(next.Sub(l.now()), 0))
		}
	}
}

// Flush looks at what is queued now and writes the lines due. It returns
// when the next held line is due (zero: none is held).
func (l *Log) Flush() time.Time {
	l.flush.Lock()
	defer l.flush.Unlock()
	l.mu.Lock()
	// what is queued is taken whole: Queue goes on filling a new map while
	// this one is read without the lock
	var pending map[topology.Key]change
	if len(l.pending) > 0 {
		pending = l.pending
		l.pending = make(map[topology.Key]change, len(pending))
	}
	rev := l.revision
	l.mu.Unlock()

	w := &writer{l: l, rev: rev, now: l.now()}
	for _, k := range slices.SortedFunc(maps.Keys(pending), topology.Key.Compare) {
		c := pending[k]
		if c.old == nil && c.cur == nil {
			continue
		}
		if !c.start {
			// the start is one line of its own (the source's); each
			// upstream's shares are in explain
			w.summary(k, c.old, c.cur)
		}
		w.upstream(k, c.old, c.cur)
		if c.old != nil && c.cur != nil {
			w.endpointsOf(k, c.old, c.cur)
		}
	}
	for _, d := range l.summaries.due(w.now) {
		w.writeSummary(d.key, d.from, d.to, d.n, diffShares(d.from, d.to))
	}
	for _, d := range l.states.due(w.now) {
		w.writeState(d.key, d.from, d.to, d.n)
	}
	for _, d := range l.endpoints.due(w.now) {
		w.writeEndpoint(d.key, d.from, d.to, d.n)
	}
	w.writeRest()
	l.summaries.prune(w.now)
	l.states.prune(w.now)
	l.endpoints.prune(w.now)
	next := l.summaries.next()
	for _, t := range []time.Time{l.states.next(), l.endpoints.next()} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}
