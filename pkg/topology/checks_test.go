package topology

import (
	"fmt"
	"testing"

	"poise.dev/poise/pkg/weights"
)

func TestMergeProbe(t *testing.T) {
	const (
		unk = weights.ProbeUnknown
		ok  = weights.ProbeHealthy
		bad = weights.ProbeUnhealthy
	)
	tests := []struct {
		own, check         weights.ProbeHealth
		ownOrigin, chkOrig string
		want               weights.ProbeHealth
		wantOrigin         string
	}{
		{unk, unk, "", "active check by a: 1 pass", unk, ""},
		{unk, ok, "", "check", ok, "check"},
		{unk, bad, "", "check", bad, "check"},
		{ok, unk, "prober", "check", ok, "prober"},
		{ok, ok, "prober", "check", ok, "prober; check"},
		{ok, bad, "prober", "check", bad, "check"},
		{bad, unk, "prober", "check", bad, "prober"},
		{bad, ok, "prober", "check", bad, "prober"},
		{bad, bad, "prober", "check", bad, "prober; check"},
		{bad, bad, "", "check", bad, "check"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v+%v", tc.own, tc.check), func(t *testing.T) {
			h := Health{Probe: tc.own, ProbeOrigin: tc.ownOrigin, CircuitOrigin: "kept"}
			got := mergeProbe(h, CheckVerdict{Probe: tc.check, Origin: tc.chkOrig})
			if got.Probe != tc.want || got.ProbeOrigin != tc.wantOrigin || got.CircuitOrigin != "kept" {
				t.Fatalf("merge(%v %q, %v %q) = %v %q (circuit origin %q), want %v %q",
					tc.own, tc.ownOrigin, tc.check, tc.chkOrig, got.Probe, got.ProbeOrigin, got.CircuitOrigin, tc.want, tc.wantOrigin)
			}
		})
	}
}

// probeOf is the merged probe signal and origin of the endpoint at addr.
func probeOf(t *testing.T, s *Snapshot, up, addr string) (weights.ProbeHealth, string) {
	t.Helper()
	u := s.Upstream(Key{"default", up})
	for i, e := range u.Endpoints {
		if e.Address == addr {
			if u.Origins[i].Health.Probe != e.Probe {
				t.Fatalf("%s: weights input %v, origin health %v", addr, e.Probe, u.Origins[i].Health.Probe)
			}
			return e.Probe, u.Origins[i].Health.ProbeOrigin
		}
	}
	t.Fatalf("%s not in %s", addr, up)
	return 0, ""
}

func TestCheckVerdictsOverlayTheSets(t *testing.T) {
	d := NewDirectory()
	var b Batch
	for _, name := range []string{"a", "b"} {
		b.PutUpstream(upstream(name))
		b.PutEndpointSet(set(name, name, "r1", 3, 1)) // endpoint 0 Unhealthy by "test"
	}
	s0 := mustApply(t, d, b)
	a0, a1, a2 := testAddress("a", 0), testAddress("a", 1), testAddress("a", 2)

	var v Batch
	v.PutCheckVerdicts(Key{"default", "a"}, []CheckVerdict{
		{Address: a0, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "check 0"},
		{Address: a1, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "check 1"},
		{Address: a2, Port: 80, Probe: weights.ProbeHealthy, Origin: "check 2"},
		{Address: a2, Port: 81, Probe: weights.ProbeUnhealthy, Origin: "not an endpoint"},
	})
	s1 := mustApply(t, d, v)
	if s1.Upstream(Key{"default", "b"}) != s0.Upstream(Key{"default", "b"}) {
		t.Fatal("a verdict on a re-resolved b")
	}
	if ua := s1.Upstream(Key{"default", "a"}); ua.Revision != s1.Revision || ua.ClusterRevision != s0.Revision {
		t.Fatalf("a: revision %d cluster revision %d, want %d and %d", ua.Revision, ua.ClusterRevision, s1.Revision, s0.Revision)
	}
	for _, c := range []struct {
		addr   string
		want   weights.ProbeHealth
		origin string
	}{{a0, weights.ProbeUnhealthy, "test; check 0"}, {a1, weights.ProbeUnhealthy, "check 1"}, {a2, weights.ProbeHealthy, "check 2"}} {
		if p, o := probeOf(t, s1, "a", c.addr); p != c.want || o != c.origin {
			t.Errorf("%s: %v %q, want %v %q", c.addr, p, o, c.want, c.origin)
		}
	}
	if got := s1.Upstream(Key{"default", "a"}).Result.Endpoints; len(got) != 3 {
		t.Fatalf("%d endpoints", len(got))
	}

	// the same verdicts again change nothing
	if s := mustApply(t, d, v); s != s1 {
		t.Fatalf("repeated verdicts made revision %d", s.Revision)
	}

	// replacing the set keeps the verdicts
	var r Batch
	r.PutEndpointSet(set("a", "a", "r1", 3, 0))
	s2 := mustApply(t, d, r)
	if p, o := probeOf(t, s2, "a", a1); p != weights.ProbeUnhealthy || o != "check 1" {
		t.Fatalf("after the set's replacement: %v %q", p, o)
	}

	// withdrawal restores the set's own signal
	var w Batch
	w.PutCheckVerdicts(Key{"default", "a"}, []CheckVerdict{{Address: a1, Port: 80}})
	s3 := mustApply(t, d, w)
	if p, o := probeOf(t, s3, "a", a1); p != weights.ProbeUnknown || o != "" {
		t.Fatalf("after withdrawal: %v %q", p, o)
	}
	if s3.Upstream(Key{"default", "b"}) != s0.Upstream(Key{"default", "b"}) {
		t.Fatal("a withdrawal on a re-resolved b")
	}
	// withdrawing what is not there changes nothing
	if s := mustApply(t, d, w); s != s3 {
		t.Fatalf("a repeated withdrawal made revision %d", s.Revision)
	}

	// verdicts outlive their upstream, as the checker that published them
	// may not have seen it go, and wait for one that does not exist yet
	var del Batch
	del.DeleteUpstream(Key{"default", "a"})
	mustApply(t, d, del)
	var early Batch
	early.PutCheckVerdicts(Key{"default", "c"}, []CheckVerdict{{Address: testAddress("c", 0), Port: 80, Probe: weights.ProbeUnhealthy, Origin: "early"}})
	if s := mustApply(t, d, early); s.Revision != d.Current().Revision || len(d.checks) != 2 {
		t.Fatalf("revision %d, verdicts %v", s.Revision, d.checks)
	}
	var back Batch
	back.PutUpstream(upstream("a"))
	back.PutUpstream(upstream("c"))
	back.PutEndpointSet(set("c", "c", "r1", 1, 0))
	s4 := mustApply(t, d, back)
	if p, o := probeOf(t, s4, "a", a0); p != weights.ProbeUnhealthy || o != "check 0" {
		t.Fatalf("a recreated upstream has %v %q", p, o)
	}
	if p, o := probeOf(t, s4, "c", testAddress("c", 0)); p != weights.ProbeUnhealthy || o != "early" {
		t.Fatalf("a new upstream has %v %q", p, o)
	}

	// withdrawn on a missing upstream, they are gone
	var gone Batch
	gone.DeleteUpstream(Key{"default", "a"})
	gone.DeleteUpstream(Key{"default", "c"})
	mustApply(t, d, gone)
	var w2 Batch
	w2.PutCheckVerdicts(Key{"default", "a"}, []CheckVerdict{{Address: a0, Port: 80}, {Address: a2, Port: 80}, {Address: a2, Port: 81}})
	w2.PutCheckVerdicts(Key{"default", "c"}, []CheckVerdict{{Address: testAddress("c", 0), Port: 80}})
	mustApply(t, d, w2)
	if len(d.checks) != 0 {
		t.Fatalf("verdicts kept: %v", d.checks)
	}
}

func TestMergeOutlier(t *testing.T) {
	for _, tc := range []struct {
		own                bool
		ownOrigin, vOrigin string
		v                  bool
		want               bool
		wantOrigin         string
	}{
		{false, "", "lr", false, false, ""},
		{false, "", "lr", true, true, "lr"},
		{true, "status", "lr", false, true, "status"},
		{true, "status", "lr", true, true, "status; lr"},
		{true, "", "lr", true, true, "lr"},
	} {
		h := Health{Ejected: tc.own, OutlierOrigin: tc.ownOrigin, ProbeOrigin: "kept"}
		got := mergeOutlier(h, OutlierVerdict{Ejected: tc.v, Origin: tc.vOrigin})
		if got.Ejected != tc.want || got.OutlierOrigin != tc.wantOrigin || got.ProbeOrigin != "kept" {
			t.Errorf("merge(%v %q, %v %q) = %v %q", tc.own, tc.ownOrigin, tc.v, tc.vOrigin, got.Ejected, got.OutlierOrigin)
		}
	}
}

// outlierOf is the merged outlier signal and origin of the endpoint at addr.
func outlierOf(t *testing.T, s *Snapshot, up, addr string) (bool, string) {
	t.Helper()
	u := s.Upstream(Key{"default", up})
	for i, e := range u.Endpoints {
		if e.Address == addr {
			if u.Origins[i].Health.Ejected != e.Ejected {
				t.Fatalf("%s: weights input %v, origin health %v", addr, e.Ejected, u.Origins[i].Health.Ejected)
			}
			return e.Ejected, u.Origins[i].Health.OutlierOrigin
		}
	}
	t.Fatalf("%s not in %s", addr, up)
	return false, ""
}

// TestOutlierVerdictsOverlayTheSets: an ejection is merged into the
// endpoint's own outlier signal (worse wins, both origins when both eject),
// makes it ineligible, re-resolves only its upstream, survives the set's
// replacement, and its withdrawal restores the set's own signal; check and
// outlier verdicts on one endpoint both apply.
func TestOutlierVerdictsOverlayTheSets(t *testing.T) {
	d := NewDirectory()
	var b Batch
	for _, name := range []string{"a", "b"} {
		b.PutUpstream(upstream(name))
		s := set(name, name, "r1", 4, 0)
		s.Endpoints[0].Health.Ejected, s.Endpoints[0].Health.OutlierOrigin = true, "status"
		b.PutEndpointSet(s)
	}
	s0 := mustApply(t, d, b)
	a0, a1, a2 := testAddress("a", 0), testAddress("a", 1), testAddress("a", 2)
	ua := Key{"default", "a"}

	var v Batch
	v.PutOutlierVerdicts(ua, []OutlierVerdict{
		{Address: a0, Port: 80, Ejected: true, Origin: "load reports 0"},
		{Address: a1, Port: 80, Ejected: true, Origin: "load reports 1"},
	})
	v.PutCheckVerdicts(ua, []CheckVerdict{{Address: a1, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "check 1"}})
	s1 := mustApply(t, d, v)
	if s1.Upstream(Key{"default", "b"}) != s0.Upstream(Key{"default", "b"}) {
		t.Fatal("a verdict on a re-resolved b")
	}
	for _, c := range []struct {
		addr   string
		want   bool
		origin string
	}{{a0, true, "status; load reports 0"}, {a1, true, "load reports 1"}, {a2, false, ""}} {
		if e, o := outlierOf(t, s1, "a", c.addr); e != c.want || o != c.origin {
			t.Errorf("%s: %v %q, want %v %q", c.addr, e, o, c.want, c.origin)
		}
	}
	if p, o := probeOf(t, s1, "a", a1); p != weights.ProbeUnhealthy || o != "check 1" {
		t.Errorf("a1 probe: %v %q", p, o)
	}
	res := s1.Upstream(ua).Result
	for i, e := range s1.Upstream(ua).Endpoints {
		if eligible := res.Endpoints[i].Reason == weights.ReasonNone; eligible == (e.Address == a0 || e.Address == a1) {
			t.Errorf("%s: reason %v", e.Address, res.Endpoints[i].Reason)
		}
	}
	if s := mustApply(t, d, v); s != s1 {
		t.Fatalf("repeated verdicts made revision %d", s.Revision)
	}

	// replacing the set keeps the ejections
	var r Batch
	r.PutEndpointSet(set("a", "a", "r1", 4, 0))
	s2 := mustApply(t, d, r)
	if e, o := outlierOf(t, s2, "a", a0); !e || o != "load reports 0" {
		t.Fatalf("after the set's replacement: %v %q", e, o)
	}

	// withdrawal restores the set's own signal; a withdrawal of nothing is no change
	var w Batch
	w.PutOutlierVerdicts(ua, []OutlierVerdict{{Address: a0, Port: 80}, {Address: a2, Port: 80}})
	s3 := mustApply(t, d, w)
	if e, o := outlierOf(t, s3, "a", a0); e || o != "" {
		t.Fatalf("after withdrawal: %v %q", e, o)
	}
	if e, _ := outlierOf(t, s3, "a", a1); !e {
		t.Fatal("a1's ejection went with a0's withdrawal")
	}
	var none Batch
	none.PutOutlierVerdicts(ua, []OutlierVerdict{{Address: a2, Port: 80}})
	if s := mustApply(t, d, none); s != s3 {
		t.Fatalf("withdrawing nothing made revision %d", s.Revision)
	}
}

// TestReplaceCheckVerdicts: a replacement withdraws the verdicts it does not
// name, keeps those it repeats (no new revision when nothing moves), leaves
// other upstreams alone, and an empty replacement withdraws them all.
func TestReplaceCheckVerdicts(t *testing.T) {
	d := NewDirectory()
	var b Batch
	for _, name := range []string{"a", "b"} {
		b.PutUpstream(upstream(name))
		b.PutEndpointSet(set(name, name, "r1", 3, 0))
	}
	mustApply(t, d, b)
	a0, a1 := testAddress("a", 0), testAddress("a", 1)
	b0 := testAddress("b", 0)
	ka, kb := Key{"default", "a"}, Key{"default", "b"}
	var v Batch
	v.PutCheckVerdicts(ka, []CheckVerdict{
		{Address: a0, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "leader: 3 failures"},
		{Address: a1, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "leader: 3 failures"},
	})
	v.PutCheckVerdicts(kb, []CheckVerdict{{Address: b0, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "leader"}})
	mustApply(t, d, v)

	var r Batch
	keep := []CheckVerdict{{Address: a1, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "leader: 3 failures"}}
	r.ReplaceCheckVerdicts(ka, keep)
	s1 := mustApply(t, d, r)
	if p, o := probeOf(t, s1, "a", a0); p != weights.ProbeUnknown || o != "" {
		t.Errorf("a0 not named: %v %q, want withdrawn", p, o)
	}
	if p, _ := probeOf(t, s1, "a", a1); p != weights.ProbeUnhealthy {
		t.Errorf("a1 named: %v", p)
	}
	if p, _ := probeOf(t, s1, "b", b0); p != weights.ProbeUnhealthy {
		t.Errorf("b0 of another upstream: %v", p)
	}
	if len(r.checks[ka]) != 1 {
		t.Errorf("the batch was changed: %v", r.checks[ka])
	}
	var same Batch
	same.ReplaceCheckVerdicts(ka, keep)
	if s := mustApply(t, d, same); s != s1 {
		t.Errorf("the same replacement made revision %d", s.Revision)
	}
	var none Batch
	none.ReplaceCheckVerdicts(ka, nil)
	s2 := mustApply(t, d, none)
	if p, _ := probeOf(t, s2, "a", a1); p != weights.ProbeUnknown {
		t.Errorf("after an empty replacement: %v", p)
	}
	if s2.Upstream(kb) != s1.Upstream(kb) {
		t.Error("b re-resolved")
	}
}

// TestReplaceOutlierVerdicts: a replacement of an upstream's ejections
// withdraws those it does not name and keeps the check verdicts.
func TestReplaceOutlierVerdicts(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("a"))
	b.PutEndpointSet(set("a", "a", "r1", 3, 0))
	mustApply(t, d, b)
	a0, a1 := testAddress("a", 0), testAddress("a", 1)
	ka := Key{"default", "a"}
	var v Batch
	v.PutOutlierVerdicts(ka, []OutlierVerdict{{Address: a0, Port: 80, Ejected: true, Origin: "lr 0"}, {Address: a1, Port: 80, Ejected: true, Origin: "lr 1"}})
	v.PutCheckVerdicts(ka, []CheckVerdict{{Address: a0, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "check"}})
	mustApply(t, d, v)
	var r Batch
	r.ReplaceOutlierVerdicts(ka, []OutlierVerdict{{Address: a1, Port: 80, Ejected: true, Origin: "lr 1"}})
	s := mustApply(t, d, r)
	if e, _ := outlierOf(t, s, "a", a0); e {
		t.Error("a0 not named is still ejected")
	}
	if e, o := outlierOf(t, s, "a", a1); !e || o != "lr 1" {
		t.Errorf("a1: %v %q", e, o)
	}
	if p, o := probeOf(t, s, "a", a0); p != weights.ProbeUnhealthy || o != "check" {
		t.Errorf("a0's check verdict: %v %q", p, o)
	}
}
