package xdscache

import "sync/atomic"

// backlog counts the streams woken (by a change or a request) and not yet
// served: how far a replica is behind its clients. A replica that keeps up
// reads near zero; one whose clients wait in its run queue reads how many
// do (poise_xds_streams_waiting).
type backlog struct{ waiting atomic.Int64 }

// Waiting is how many streams are woken and not yet served.
func (c *Cache) Waiting() int64 { return c.backlog.waiting.Load() }

// queue counts s among the streams waiting to be served, once until it is.
func (s *Stream) queue() {
	if s.queued.CompareAndSwap(false, true) {
		s.c.backlog.waiting.Add(1)
	}
}

// dequeue uncounts s: it is being served.
func (s *Stream) dequeue() {
	if s.queued.Swap(false) {
		s.c.backlog.waiting.Add(-1)
	}
}

// unqueue uncounts s for good when it closes: queued stays set, so a wake
// after this counts nothing that no Next would uncount.
func (s *Stream) unqueue() {
	if !s.queued.CompareAndSwap(false, true) {
		s.c.backlog.waiting.Add(-1)
	}
}
