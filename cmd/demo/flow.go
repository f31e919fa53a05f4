package main

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/pkg/topology"
)

// Outcomes of a call that are not an endpoint.
const (
	dropped = "(dropped)" // the client dropped it, as the published drop overload says
	failed  = "(failed)"  // it failed: no endpoint served it
)

// flow is the calls of the clients of one zone to one upstream: the split
// explain computes for them, and the window of their last calls.
type flow struct {
	upstream topology.Key
	from     explain.From
	nodes    []string

	mu sync.Mutex
	// split is explain's split for these clients, at revision; moved is
	// when the demo saw it move.
	split    grpctraffic.Split
	revision uint64
	moved    time.Time
	// settling: the split moved and the clients have not all ACKed its
	// revision yet; warm counts the calls still to leave out after they
	// have, while they connect to new endpoints.
	settling bool
	warm     int
	// ring holds the outcomes of the last calls (an endpoint, dropped or
	// failed), counts how many of each it holds; since counts the calls of
	// the window since it began.
	ring   []string
	next   int
	counts map[string]int
	since  int
	// verdict is the check of the window when it first held a full ring.
	verdict *verdict
	lastErr string
}

// verdict is the check of one full window.
type verdict struct {
	revision uint64
	calls    int
	worst    float64
	worstAt  string
	ok       bool
}

func newFlow(upstream topology.Key, from explain.From, window int) *flow {
	return &flow{upstream: upstream, from: from, ring: make([]string, 0, window), counts: map[string]int{}, settling: true}
}

// add counts one call's outcome.
func (f *flow) add(backend string, err error) {
	outcome := backend
	switch {
	case err == nil:
	case errors.Is(err, grpctraffic.ErrDropped):
		outcome = dropped
	default:
		outcome = failed
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settling {
		return
	}
	if f.warm > 0 {
		f.warm--
		return
	}
	if len(f.ring) < cap(f.ring) {
		f.ring = append(f.ring, outcome)
	} else {
		f.counts[f.ring[f.next]]--
		f.ring[f.next] = outcome
		f.next = (f.next + 1) % cap(f.ring)
	}
	f.counts[outcome]++
	f.since++
	if f.since == cap(f.ring) && f.verdict == nil {
		f.verdict = f.judge()
	}
}

// judge checks the window against the split: every endpoint's count
// within Limit standard deviations of its binomial expectation, nothing
// served by an endpoint of share 0, no call failed. Called with mu held.
func (f *flow) judge() *verdict {
	v := &verdict{revision: f.revision, calls: len(f.ring), ok: true}
	for _, r := range f.rows() {
		if a := math.Abs(r.z); a > v.worst || v.worstAt == "" {
			v.worst, v.worstAt = a, r.name
		}
	}
	v.ok = v.worst <= grpctraffic.Limit
	return v
}

// row is one line of a flow's table.
type row struct {
	name     string
	share    uint64 // explain's, millionths
	observed int
	z        float64
}

// rows are the endpoints of the split, then any outcome the split has no
// share for, with their deviation. Called with mu held.
func (f *flow) rows() []row {
	n := len(f.ring)
	var out []row
	names := slices.Sorted(maps.Keys(f.split.Share))
	names = append(names, dropped)
	for _, name := range slices.Sorted(maps.Keys(f.counts)) {
		if _, ok := f.split.Share[name]; !ok && name != dropped && f.counts[name] > 0 {
			names = append(names, name)
		}
	}
	for _, name := range names {
		share := f.split.Share[name]
		if name == dropped {
			share = f.split.Dropped
			if share == 0 && f.counts[dropped] == 0 {
				continue
			}
		}
		out = append(out, row{name: name, share: share, observed: f.counts[name], z: grpctraffic.Binomial(f.counts[name], n, share)})
	}
	return out
}

// follow takes explain's split at revision; when it differs from the one
// the window is of, the window waits for the clients to ACK it, and the
// line to print says so.
func (f *flow) follow(split grpctraffic.Split, revision uint64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if maps.Equal(split.Share, f.split.Share) && split.Dropped == f.split.Dropped {
		return ""
	}
	first := f.split.Share == nil
	old := f.split
	f.split, f.revision, f.moved, f.settling = split, revision, time.Now(), true
	if first {
		return ""
	}
	var moved []string
	for _, addr := range slices.Sorted(maps.Keys(split.Share)) {
		if o := old.Share[addr]; o != split.Share[addr] {
			moved = append(moved, fmt.Sprintf("%s %s → %s", addr, explain.Percent(o), explain.Percent(split.Share[addr])))
		}
	}
	if old.Dropped != split.Dropped {
		moved = append(moved, fmt.Sprintf("dropped %s → %s", explain.Percent(old.Dropped), explain.Percent(split.Dropped)))
	}
	return fmt.Sprintf("revision %d: explain moves %s for clients in %s: %s", revision, f.upstream, f.from, strings.Join(moved, ", "))
}

func (f *flow) isSettling() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settling
}

// ackedBy ends the settling once every client of the flow has ACKed an
// EDS version of the split's revision or later: the window starts again,
// after warm calls.
func (f *flow) ackedBy(acked map[string]string, warm int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.settling {
		return ""
	}
	for _, n := range f.nodes {
		if r, ok := grpctraffic.ParseVersion(acked[n]); !ok || r < f.revision {
			return ""
		}
	}
	f.settling, f.warm = false, warm
	f.ring, f.next, f.since, f.verdict = f.ring[:0], 0, 0, nil
	clear(f.counts)
	who := fmt.Sprintf("the %d clients in %s hold", len(f.nodes), f.from)
	if len(f.nodes) == 1 {
		who = fmt.Sprintf("the client in %s holds", f.from)
	}
	return fmt.Sprintf("revision %d: %s %s's split %v after explain moved; counting their calls after the next %d",
		f.revision, who, f.upstream, time.Since(f.moved).Round(time.Millisecond), warm)
}

// judged is the verdict of the window, nil while it is not full.
func (f *flow) judged() *verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verdict
}

// noteError prints an error of the flow once, until it changes.
func (f *flow) noteError(d *demo, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	f.mu.Lock()
	changed := msg != f.lastErr
	f.lastErr = msg
	f.mu.Unlock()
	if changed && msg != "" {
		d.screen.event("%s from %s: %s", f.upstream, f.from, msg)
	}
}

// state says where the window stands.
func (f *flow) state() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stateLocked()
}

func (f *flow) stateLocked() string {
	switch {
	case f.settling:
		return fmt.Sprintf("waiting for the clients to ACK revision %d (%v since explain moved)", f.revision, time.Since(f.moved).Round(100*time.Millisecond))
	case f.warm > 0:
		return fmt.Sprintf("warming up: %d calls still left out", f.warm)
	case f.verdict == nil:
		return fmt.Sprintf("%d of %d calls", f.since, cap(f.ring))
	}
	return fmt.Sprintf("the last %d calls", len(f.ring))
}

// table writes the flow's table: each endpoint's share by explain and
// observed, with the deviation, and the verdict.
func (f *flow) table(b *strings.Builder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(b, "%s · clients in %s (%d) · explain at revision %d · %s\n", f.upstream, f.from, len(f.nodes), f.revision, f.stateLocked())
	fmt.Fprintf(b, "  %-24s %10s %10s %8s\n", "endpoint", "explain", "observed", "σ")
	n := len(f.ring)
	for _, r := range f.rows() {
		obs := "—"
		z := ""
		if n > 0 {
			obs = fmt.Sprintf("%.4f%%", 100*float64(r.observed)/float64(n))
			z = sigma(r.z)
		}
		fmt.Fprintf(b, "  %-24s %10s %10s %8s\n", r.name, explain.Percent(r.share), obs, z)
	}
	if v := f.verdict; v != nil {
		word := "OK"
		if !v.ok {
			word = "OFF"
		}
		fmt.Fprintf(b, "check %s from %s at revision %d: %d calls, largest |σ| %.2f (%s): %s\n", f.upstream, f.from, v.revision, v.calls, v.worst, v.worstAt, word)
	}
}

// sigma prints a deviation.
func sigma(z float64) string {
	if math.IsInf(z, 0) {
		return fmt.Sprintf("%+.0f", z)
	}
	return fmt.Sprintf("%+.2f", z)
}
