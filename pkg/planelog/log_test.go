package planelog

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

// plane is a Directory whose publications a Log follows on a clock the
// test moves.
type plane struct {
	t    *testing.T
	dir  *topology.Directory
	log  *Log
	logs testkit.Logs
	now  time.Time
	last *topology.Snapshot
}

func newPlane(t *testing.T, b topology.Batch) *plane {
	p := &plane{t: t, dir: topology.NewDirectory(), now: time.Unix(1_700_000_000, 0)}
	p.log = New(Options{Log: slog.New(slog.NewJSONHandler(&p.logs, nil))})
	p.log.now = func() time.Time { return p.now }
	p.last = p.dir.Current()
	p.apply(b)
	return p
}

// apply applies b and queues what it changed, as the publisher would.
func (p *plane) apply(b topology.Batch) {
	p.t.Helper()
	snap, err := p.dir.Apply(b)
	if err != nil {
		p.t.Fatal(err)
	}
	keys, ok := snap.ChangedSince(p.last.Revision)
	if !ok {
		p.t.Fatal("no change set")
	}
	prev := p.last
	p.log.Queue(snap.Revision, func(yield func(old, cur *topology.UpstreamState) bool) {
		for _, k := range keys {
			if !yield(prev.Upstream(k), snap.Upstream(k)) {
				return
			}
		}
	})
	p.last = snap
}

// flush looks at the publications after d.
func (p *plane) flush(d time.Duration) {
	p.now = p.now.Add(d)
	p.log.Flush()
}

// lines are the lines written so far whose message is one of msgs (all
// of them without msgs).
func (p *plane) lines(msgs ...string) []map[string]any {
	p.t.Helper()
	return p.logs.Records(p.t, msgs...)
}

// verdict is a batch putting an active check's verdict on endpoint i of
// synthetic upstream u's first set.
func verdict(u, i int, healthy bool) topology.Batch {
	s := topologytest.Set(u, 0, nil)
	v := topology.CheckVerdict{Address: s.Endpoints[i].Address, Port: s.Endpoints[i].Port, Probe: weights.ProbeHealthy,
		Origin: "active check by test: 1 pass"}
	if !healthy {
		v.Probe, v.Origin = weights.ProbeUnhealthy, "active check by test: 1 failure, last: refused"
	}
	var b topology.Batch
	b.PutCheckVerdicts(topologytest.Upstream(u).Key, []topology.CheckVerdict{v})
	return b
}

// TestStartWritesNoSummary: the first publication is the start, which the
// source sums up; only an upstream that starts degraded (every endpoint
// unhealthy: in total panic) is warned of.
func TestStartWritesNoSummary(t *testing.T) {
	b := topologytest.Batch(3)
	down := topologytest.Set(2, 0, map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true})
	b.PutEndpointSet(down)
	for r := 1; r < 3; r++ {
		s := topologytest.Set(2, r, nil)
		for i := range s.Endpoints {
			s.Endpoints[i].Health.Probe = weights.ProbeUnhealthy
		}
		b.PutEndpointSet(s)
	}
	p := newPlane(t, b)
	p.flush(0)
	all := p.lines()
	if len(all) != 1 || all[0]["msg"] != "upstream outcome, panic or drop changed" || all[0]["upstream"] != "bench/svc-0002" ||
		all[0]["panic"] != "total" || all[0]["before"] != "absent" {
		t.Fatalf("lines at the start: %v", all)
	}
}

// TestSummaryOfAnEdit: an edit that moves shares writes one line naming
// the localities that moved most, with explain's figures before and after.
func TestSummaryOfAnEdit(t *testing.T) {
	p := newPlane(t, topologytest.Batch(2))
	p.flush(0)
	k := topologytest.Upstream(0).Key
	before := p.last.Upstream(k)
	// eu-west loses most of its endpoints: its traffic goes to the others
	p.apply(func() topology.Batch {
		var b topology.Batch
		b.PutEndpointSet(topologytest.Set(0, 0, map[int]bool{0: true, 1: true, 2: true, 3: true}))
		return b
	}())
	p.flush(time.Second)
	after := p.last.Upstream(k)
	lines := p.lines("upstream shares moved")
	if len(lines) != 1 {
		t.Fatalf("summaries: %v", p.lines())
	}
	l := lines[0]
	traffic := func(u *topology.UpstreamState, region string) string {
		for _, loc := range u.Result.Localities {
			if loc.Locality.Region == region {
				return explain.Percent(loc.Traffic)
			}
		}
		t.Fatalf("no locality %s", region)
		return ""
	}
	moved := l["moved"].(string)
	for _, r := range topologytest.Regions {
		want := fmt.Sprintf("%s %s → %s", r, traffic(before, r), traffic(after, r))
		if !strings.Contains(moved, want) {
			t.Errorf("moved %q lacks %q", moved, want)
		}
	}
	if !strings.HasPrefix(moved, "eu-west ") {
		t.Errorf("moved %q: the locality that moved most comes first", moved)
	}
	if l["upstream"] != k.String() || l["moreLocalities"] != 0.0 || l["changes"] != 1.0 || l["level"] != "INFO" {
		t.Errorf("line %v", l)
	}
	if l["endpointSharesMoved"].(float64) < 16 {
		t.Errorf("line %v: every endpoint's share moved", l)
	}
}

// TestFlappingEndpointIsBounded: an endpoint whose check turns every
// second for 100 seconds writes its first two turns at once, then one line
// a period whose changes count the turns it stands for; the last line says
// where it ended.
func TestFlappingEndpointIsBounded(t *testing.T) {
	p := newPlane(t, topologytest.Batch(1))
	p.flush(0)
	const turns = 100
	for i := range turns {
		p.apply(verdict(0, 0, i%2 == 1))
		p.flush(time.Second)
	}
	p.flush(DefaultPeriod) // the line held at the end
	lines := p.lines("endpoint taken out", "endpoint brought back")
	if limit := keyBurst + turns/int(DefaultPeriod/time.Second) + 1; len(lines) > limit {
		t.Fatalf("%d lines for %d turns, want at most %d", len(lines), turns, limit)
	}
	n := 0
	for _, l := range lines {
		n += int(l["changes"].(float64))
		if l["level"] != "WARN" || l["reason"] != "ProbeUnhealthy" || !strings.HasPrefix(l["reasonFrom"].(string), "active check by test") {
			t.Errorf("line %v", l)
		}
	}
	if n != turns {
		t.Errorf("the lines count %d turns, want %d", n, turns)
	}
	if first := lines[0]; first["msg"] != "endpoint taken out" || lines[1]["msg"] != "endpoint brought back" {
		t.Errorf("the first two turns are not written as they happen: %v", lines[:2])
	}
	if last := lines[len(lines)-1]; last["msg"] != "endpoint brought back" || last["reasonFrom"] != "active check by test: 1 pass" {
		t.Errorf("the last line %v does not say the endpoint ended back", last)
	}
	if len(p.log.endpoints.keys) > 1 {
		t.Errorf("%d endpoint keys kept", len(p.log.endpoints.keys))
	}
	p.flush(3 * DefaultPeriod)
	p.flush(DefaultPeriod)
	if len(p.log.endpoints.keys) != 0 {
		t.Errorf("%d endpoint keys kept after quiet periods", len(p.log.endpoints.keys))
	}
}

// TestLargeChangeIsBounded: fifty upstreams each losing an endpoint at once
// write ten lines and one line counting the rest, and as many summaries.
func TestLargeChangeIsBounded(t *testing.T) {
	const n = 50
	p := newPlane(t, topologytest.Batch(n))
	p.flush(0)
	var b topology.Batch
	for u := range n {
		b.PutEndpointSet(topologytest.Set(u, 0, nil))
		s := topologytest.Set(u, 0, nil)
		v := topology.CheckVerdict{Address: s.Endpoints[0].Address, Port: s.Endpoints[0].Port, Probe: weights.ProbeUnhealthy, Origin: "active check by test: 1 failure"}
		b.PutCheckVerdicts(topologytest.Upstream(u).Key, []topology.CheckVerdict{v})
	}
	p.apply(b)
	p.flush(time.Second)
	if got := len(p.lines("endpoint taken out")); got != maxLines {
		t.Errorf("%d endpoint lines, want %d", got, maxLines)
	}
	rest := p.lines("more endpoints were taken out or brought back than are logged one by one")
	if len(rest) != 1 || rest[0]["out"] != float64(n-maxLines) || rest[0]["first"] != "bench/svc-0010 10.0.10.0:8080" {
		t.Errorf("rest: %v", rest)
	}
	if len(p.log.endpoints.keys) != maxLines {
		t.Errorf("%d endpoint keys kept, want the %d written", len(p.log.endpoints.keys), maxLines)
	}
	if got := len(p.lines("upstream shares moved")); got != maxLines {
		t.Errorf("%d summaries, want %d", got, maxLines)
	}
	if rest := p.lines("upstream shares moved in more upstreams than are logged one by one"); len(rest) != 1 || rest[0]["upstreams"] != float64(n-maxLines) {
		t.Errorf("rest of the summaries: %v", rest)
	}
}

// TestDropWarns: an upstream whose every endpoint goes under FailClosed
// warns once going to 100 % dropped and once coming back.
func TestDropWarns(t *testing.T) {
	u := topologytest.Upstream(0)
	u.Policy.PanicMode = weights.FailClosed
	b := topologytest.Batch(1)
	b.PutUpstream(u)
	p := newPlane(t, b)
	p.flush(0)
	all := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true}
	var down, up topology.Batch
	for r := range topologytest.Regions {
		down.PutEndpointSet(topologytest.Set(0, r, all))
		up.PutEndpointSet(topologytest.Set(0, r, nil))
	}
	p.apply(down)
	p.flush(time.Second)
	p.apply(up)
	p.flush(time.Second)
	lines := p.lines("upstream outcome, panic or drop changed")
	if len(lines) != 2 {
		t.Fatalf("state lines: %v", p.lines())
	}
	if l := lines[0]; l["outcome"] != "PanicRejected" || l["dropped"] != "100.0000%" || l["panic"] != "total" || l["level"] != "WARN" ||
		l["before"] != "outcome Routable, panic none, dropped 0.0000%" {
		t.Errorf("going down: %v", l)
	}
	if l := lines[1]; l["outcome"] != "Routable" || l["dropped"] != "0.0000%" || l["before"] != "outcome PanicRejected, panic total, dropped 100.0000%" {
		t.Errorf("coming back: %v", l)
	}
}

// TestQueueWhileFlushing: the publisher queues while the log's goroutine
// looks, with nothing queued or something (go test -race holds them
// apart), and nothing queued is lost: every upstream edited is summed up.
func TestQueueWhileFlushing(t *testing.T) {
	const upstreams = 20
	dir := topology.NewDirectory()
	var logs testkit.Logs
	l := New(Options{Log: slog.New(slog.NewJSONHandler(&logs, nil)), Period: time.Hour})
	queue := func(b topology.Batch, last *topology.Snapshot) *topology.Snapshot {
		snap, err := dir.Apply(b)
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := snap.ChangedSince(last.Revision)
		l.Queue(snap.Revision, func(yield func(old, cur *topology.UpstreamState) bool) {
			for _, k := range keys {
				if !yield(last.Upstream(k), snap.Upstream(k)) {
					return
				}
			}
		})
		return snap
	}
	last := queue(topologytest.Batch(upstreams), dir.Current())
	l.Flush()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			l.Flush()
		}
	}()
	for u := range upstreams {
		last = queue(verdict(u, 0, false), last)
	}
	<-done
	l.Flush()
	// a look writes so many summaries and counts the rest in one line
	got := len(logs.Records(t, "upstream shares moved"))
	for _, r := range logs.Records(t, "upstream shares moved in more upstreams than are logged one by one") {
		got += int(r["upstreams"].(float64))
	}
	if got != upstreams {
		t.Errorf("%d upstreams edited while the log looked, %d summed up or counted", upstreams, got)
	}
}
