package planelog

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// maxMoved is how many localities a summary line names, those whose share
// moved most; the others are counted.
const maxMoved = 3

// maxPanicPriorities is how many priorities in panic a line names.
const maxPanicPriorities = 8

// The kinds of lines, each bounded on its own.
const (
	kindSummary = iota
	kindState
	kindEndpoint
	kinds
)

// writer writes one look's lines: at most maxLines of each kind, the
// rest counted on one line of the kind.
type writer struct {
	l       *Log
	rev     uint64
	now     time.Time
	written [kinds]int
	rest    [kinds]rest
}

// rest is the lines of a kind one look did not write one by one.
type rest struct {
	n, out, back int
	first        string
}

// take says whether a line of kind may be written; if not, it is counted
// under first's name (the first counted is named). A key counted so keeps
// its own bucket as it was: the keys kept are those with lines of their
// own, however large a change.
func (w *writer) take(kind int, name string) bool {
	if w.written[kind] < maxLines {
		w.written[kind]++
		return true
	}
	if r := &w.rest[kind]; r.n == 0 {
		r.first = name
	}
	w.rest[kind].n++
	return false
}

// summary offers the shares an upstream's change moved.
func (w *writer) summary(k topology.Key, old, cur *topology.UpstreamState) {
	b := &w.l.summaries
	d := diffShares(old, cur)
	if d.empty() {
		if b.holding(k) {
			b.follow(k, cur)
		}
		return
	}
	if b.offer(k, old, cur, w.now) {
		w.writeSummary(k, old, cur, 1, d)
	}
}

func (w *writer) writeSummary(k topology.Key, from, to *topology.UpstreamState, n int, d shareDiff) {
	if d.empty() {
		return // they moved back
	}
	if !w.take(kindSummary, k.String()) {
		return
	}
	w.l.summaries.wrote(k, w.now)
	name, text, more := k.String(), d.text(), max(len(d.localities)-maxMoved, 0)
	switch {
	case from == nil:
		w.l.log.Info("upstream added", "upstream", name, "revision", w.rev, "moved", text, "moreLocalities", more,
			"endpointSharesMoved", d.endpoints, "changes", n)
	case to == nil:
		w.l.log.Info("upstream removed", "upstream", name, "revision", w.rev, "moved", text, "moreLocalities", more,
			"endpointSharesMoved", d.endpoints, "changes", n)
	default:
		w.l.log.Info("upstream shares moved", "upstream", name, "revision", w.rev, "moved", text, "moreLocalities", more,
			"endpointSharesMoved", d.endpoints, "changes", n)
	}
}

// upstreamState is what a warning is written on when it changes: the
// outcome, the panic and whether traffic is dropped (not how much).
type upstreamState struct {
	present bool
	outcome weights.Outcome
	panic   string
	drop    int // 0 none, 1 some, 2 all
	dropped uint64
}

func stateOf(u *topology.UpstreamState) upstreamState {
	if u == nil || u.Result == nil {
		return upstreamState{outcome: weights.Routable, panic: "none"}
	}
	r := u.Result
	s := upstreamState{present: true, outcome: r.Outcome, panic: panicOf(r), dropped: r.DroppedMillionths}
	switch {
	case r.DroppedMillionths >= weights.Million:
		s.drop = 2
	case r.DroppedMillionths > 0:
		s.drop = 1
	}
	return s
}

// same: no warning between s and o.
func (s upstreamState) same(o upstreamState) bool {
	return s.outcome == o.outcome && s.panic == o.panic && s.drop == o.drop
}

func (s upstreamState) String() string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("outcome %s, panic %s, dropped %s", s.outcome, s.panic, explain.Percent(s.dropped))
}

// panicOf says which priorities are in panic: "none", "total", or the
// priorities.
func panicOf(r *weights.Result) string {
	if r.TotalPanic {
		return "total"
	}
	var in []string
	more := 0
	for _, p := range r.Priorities {
		if !p.InPanic {
			continue
		}
		if len(in) == maxPanicPriorities {
			more++
			continue
		}
		in = append(in, strconv.FormatUint(uint64(p.Priority), 10))
	}
	switch {
	case len(in) == 0:
		return "none"
	case more > 0:
		return fmt.Sprintf("priorities %s and %d more", strings.Join(in, ", "), more)
	case len(in) == 1:
		return "priority " + in[0]
	}
	return "priorities " + strings.Join(in, ", ")
}

// upstream offers a change of an upstream's state; a removed upstream's
// line is its summary.
func (w *writer) upstream(k topology.Key, old, cur *topology.UpstreamState) {
	b := &w.l.states
	if cur == nil {
		b.drop(k)
		return
	}
	from, to := stateOf(old), stateOf(cur)
	if from.same(to) {
		if b.holding(k) {
			b.follow(k, to)
		}
		return
	}
	if b.offer(k, from, to, w.now) {
		w.writeState(k, from, to, 1)
	}
}

func (w *writer) writeState(k topology.Key, from, to upstreamState, n int) {
	if !w.take(kindState, k.String()) {
		return
	}
	w.l.states.wrote(k, w.now)
	w.l.log.Warn("upstream outcome, panic or drop changed", "upstream", k.String(), "revision", w.rev,
		"outcome", to.outcome.String(), "panic", to.panic, "dropped", explain.Percent(to.dropped), "before", from.String(), "changes", n)
}

// endpointKey is one signal of one endpoint of an upstream.
type endpointKey struct {
	upstream topology.Key
	address  string
	port     uint32
	signal   weights.Signal
}

func (a endpointKey) compare(b endpointKey) int {
	return cmp.Or(a.upstream.Compare(b.upstream), strings.Compare(a.address, b.address), cmp.Compare(a.port, b.port), cmp.Compare(a.signal, b.signal))
}

func (a endpointKey) String() string {
	return a.upstream.String() + " " + net.JoinHostPort(a.address, strconv.FormatUint(uint64(a.port), 10))
}

// endpointState is whether one signal takes an endpoint out, and who says
// so (explain's reasonFrom).
type endpointState struct {
	out    bool
	origin string
}

// watched are the signals Poise decides itself, whose verdicts come and go
// without an edit: each one's transitions are warnings.
var watched = [...]struct {
	signal weights.Signal
	reason weights.Reason
	out    func(h *topology.Health) bool
}{
	{weights.SignalProbe, weights.ReasonProbeUnhealthy, func(h *topology.Health) bool { return h.Probe == weights.ProbeUnhealthy }},
	{weights.SignalOutlier, weights.ReasonOutlierEjected, func(h *topology.Health) bool { return h.Ejected }},
}

// endpointsOf offers each endpoint of an upstream whose active check or
// outlier ejection turned.
func (w *writer) endpointsOf(k topology.Key, old, cur *topology.UpstreamState) {
	was := make(map[address]topology.Origin, len(old.Endpoints))
	for i, e := range old.Endpoints {
		was[address{e.Address, e.Port}] = old.Origins[i]
	}
	b := &w.l.endpoints
	for i, e := range cur.Endpoints {
		o := cur.Origins[i]
		p, ok := was[address{e.Address, e.Port}]
		if !ok || p.Health == nil || o.Health == nil || p.Health == o.Health {
			continue
		}
		for _, s := range watched {
			from, to := s.out(p.Health), s.out(o.Health)
			key := endpointKey{upstream: k, address: e.Address, port: e.Port, signal: s.signal}
			if from == to && !b.holding(key) {
				continue
			}
			fs := endpointState{out: from, origin: explain.ReasonOrigin(s.reason, p)}
			ts := endpointState{out: to, origin: explain.ReasonOrigin(s.reason, o)}
			if from == to {
				b.follow(key, ts) // the latest origin, no change
				continue
			}
			if b.offer(key, fs, ts, w.now) {
				w.writeEndpoint(key, fs, ts, 1)
			}
		}
	}
}

func (w *writer) writeEndpoint(k endpointKey, from, to endpointState, n int) {
	if !w.take(kindEndpoint, k.String()) {
		if to.out {
			w.rest[kindEndpoint].out++
		} else {
			w.rest[kindEndpoint].back++
		}
		return
	}
	w.l.endpoints.wrote(k, w.now)
	reason := weights.ReasonProbeUnhealthy
	if k.signal == weights.SignalOutlier {
		reason = weights.ReasonOutlierEjected
	}
	// Brought back, a signal no longer reported has no origin of its
	// own: the line says what had taken the endpoint out.
	origin := to.origin
	if origin == "" {
		origin = from.origin
	}
	up, ep := k.upstream.String(), net.JoinHostPort(k.address, strconv.FormatUint(uint64(k.port), 10))
	if to.out {
		w.l.log.Warn("endpoint taken out", "upstream", up, "endpoint", ep, "reason", reason.String(), "reasonFrom", origin, "revision", w.rev, "changes", n)
		return
	}
	w.l.log.Warn("endpoint brought back", "upstream", up, "endpoint", ep, "reason", reason.String(), "reasonFrom", origin, "revision", w.rev, "changes", n)
}

// writeRest writes, for each kind, the line counting what was not written
// one by one.
func (w *writer) writeRest() {
	if r := w.rest[kindSummary]; r.n > 0 {
		w.l.log.Info("upstream shares moved in more upstreams than are logged one by one", "upstreams", r.n, "first", r.first, "revision", w.rev)
	}
	if r := w.rest[kindState]; r.n > 0 {
		w.l.log.Warn("more upstreams changed outcome, panic or drop than are logged one by one", "upstreams", r.n, "first", r.first, "revision", w.rev)
	}
	if r := w.rest[kindEndpoint]; r.n > 0 {
		w.l.log.Warn("more endpoints were taken out or brought back than are logged one by one", "out", r.out, "back", r.back, "first", r.first, "revision", w.rev)
	}
}

// address is an endpoint's address and port.
type address struct {
	address string
	port    uint32
}

// shareDiff is what moved between two states of an upstream: each
// (priority, locality) group whose traffic moved, most first, and how many
// endpoints' shares moved.
type shareDiff struct {
	localities []moved
	endpoints  int
}

type moved struct {
	priority      uint32
	locality      weights.Locality
	before, after uint64 // millionths of all the upstream's traffic
}

func (d shareDiff) empty() bool { return len(d.localities) == 0 && d.endpoints == 0 }

// text names the localities that moved most, before → after.
func (d shareDiff) text() string {
	if len(d.localities) == 0 {
		return "no locality share moved"
	}
	var b strings.Builder
	for i, m := range d.localities[:min(len(d.localities), maxMoved)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(localityName(m.priority, m.locality))
		b.WriteString(" ")
		b.WriteString(explain.Percent(m.before))
		b.WriteString(" → ")
		b.WriteString(explain.Percent(m.after))
	}
	return b.String()
}

// localityName is region/zone/subZone without the empty parts at the end,
// and the priority when it is not 0.
func localityName(priority uint32, l weights.Locality) string {
	name := l.Region
	if l.Zone != "" || l.SubZone != "" {
		name += "/" + l.Zone
	}
	if l.SubZone != "" {
		name += "/" + l.SubZone
	}
	if priority != 0 {
		name += fmt.Sprintf(" (priority %d)", priority)
	}
	return name
}

type group struct {
	priority uint32
	locality weights.Locality
}

// diffShares compares the traffic of each group and endpoint of two states
// of an upstream (nil: absent, all 0).
func diffShares(from, to *topology.UpstreamState) shareDiff {
	var d shareDiff
	before := map[group]uint64{}
	if from != nil && from.Result != nil {
		for _, l := range from.Result.Localities {
			before[group{l.Priority, l.Locality}] = l.Traffic
		}
	}
	if to != nil && to.Result != nil {
		for _, l := range to.Result.Localities {
			g := group{l.Priority, l.Locality}
			b := before[g]
			delete(before, g)
			if b == l.Traffic {
				continue
			}
			d.localities = append(d.localities, moved{priority: l.Priority, locality: l.Locality, before: b, after: l.Traffic})
		}
	}
	for g, b := range before {
		if b > 0 {
			d.localities = append(d.localities, moved{priority: g.priority, locality: g.locality, before: b})
		}
	}
	slices.SortFunc(d.localities, func(a, b moved) int {
		return cmp.Or(cmp.Compare(distance(b), distance(a)), cmp.Compare(a.priority, b.priority), a.locality.Compare(b.locality))
	})
	d.endpoints = endpointsMoved(from, to)
	return d
}

func distance(m moved) uint64 {
	if m.after > m.before {
		return m.after - m.before
	}
	return m.before - m.after
}

// endpointsMoved counts the endpoints whose share differs between two
// states of an upstream.
func endpointsMoved(from, to *topology.UpstreamState) int {
	before := map[address]uint64{}
	if from != nil && from.Result != nil {
		for i := range from.Result.Endpoints {
			er, e, _ := from.EndpointResult(i)
			before[address{e.Address, e.Port}] = er.Share
		}
	}
	n := 0
	if to != nil && to.Result != nil {
		for i := range to.Result.Endpoints {
			er, e, _ := to.EndpointResult(i)
			a := address{e.Address, e.Port}
			if before[a] != er.Share {
				n++
			}
			delete(before, a)
		}
	}
	for _, b := range before {
		if b > 0 {
			n++
		}
	}
	return n
}
