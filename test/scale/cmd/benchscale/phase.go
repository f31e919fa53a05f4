package main

import (
	"slices"
	"sync/atomic"
	"time"
)

// phase is a run of flips and their deliveries. A client that receives new
// content for an upstream at time t credits it with every flip of that
// upstream written before t that it has not credited yet: the content it
// holds then reflects them (or a later state). Flips of one upstream are
// spaced far apart (the window's size divided by the rate), so a receipt
// that credits more than one flip at once means the server coalesced them —
// or, when the server runs further behind than that spacing, that content
// from before the later flip was credited to it; multiCredits counts both.
type phase struct {
	clients int32
	pos     []int32 // per flip: its upstream's position in the window
	byPos   [][]int32
	t0      []atomic.Int64 // per flip: the fleet clock just before its write; 0 until written
	got     []atomic.Int32 // per flip: clients that received it
	last    []atomic.Int64 // per flip: when the last of them did
	done    atomic.Int64   // flips every client received

	multiCredits, unattributed atomic.Int64
}

func newPhase(pos []int32, window, clients int) *phase {
	p := &phase{clients: int32(clients), pos: pos, byPos: make([][]int32, window),
		t0: make([]atomic.Int64, len(pos)), got: make([]atomic.Int32, len(pos)), last: make([]atomic.Int64, len(pos))}
	for i, q := range pos {
		p.byPos[q] = append(p.byPos[q], int32(i))
	}
	return p
}

// credit records that c received new content for position p at time at.
func (c *client) credit(p int, at int64) {
	ph := c.f.phase.Load()
	if ph == nil {
		return // no flips yet
	}
	if c.ph != ph {
		c.ph = ph
		clear(c.cursors)
	}
	flips := ph.byPos[p]
	n := 0
	for int(c.cursors[p]) < len(flips) {
		i := flips[c.cursors[p]]
		t0 := ph.t0[i].Load()
		if t0 == 0 || t0 >= at {
			break
		}
		c.cursors[p]++
		n++
		for {
			last := ph.last[i].Load()
			if at <= last || ph.last[i].CompareAndSwap(last, at) {
				break
			}
		}
		if ph.got[i].Add(1) == ph.clients {
			ph.done.Add(1)
		}
	}
	switch {
	case n == 0:
		ph.unattributed.Add(1)
	case n > 1:
		ph.multiCredits.Add(1)
	}
}

// latencies is, for each flip every client received, the time from its
// write to the last client's receipt; and how many flips only some clients
// received and none received.
func (ph *phase) latencies(issued int) (lat []time.Duration, partial, none int) {
	for i := range issued {
		switch got := ph.got[i].Load(); {
		case got == ph.clients:
			lat = append(lat, time.Duration(ph.last[i].Load()-ph.t0[i].Load()))
		case got > 0:
			partial++
		default:
			none++
		}
	}
	slices.Sort(lat)
	return lat, partial, none
}

// dist is a latency distribution.
type dist struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
}

func distOf(sorted []time.Duration) dist {
	if len(sorted) == 0 {
		return dist{}
	}
	q := func(f float64) time.Duration {
		// nearest rank
		i := int(f*float64(len(sorted))+0.999999) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	return dist{N: len(sorted), Min: sorted[0], P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: sorted[len(sorted)-1]}
}
