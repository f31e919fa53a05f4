package outlier

import (
	"testing"
	"time"

	"poise.dev/poise/pkg/signals/loadreport"
)

// withGen is endpoints(n) with endpoint i's generation set to gen.
func withGen(n, i int, gen string) []Endpoint {
	eps := endpoints(n)
	eps[i].Generation = gen
	return eps
}

// tagged is agg with endpoint i's summary marked as generation gen's.
func tagged(agg Aggregate, i int, gen string) Aggregate {
	agg.Endpoints[i].Generation = gen
	return agg
}

// A new generation at an ejected address: the old one's ejection is
// withdrawn at once, the new one starts with no count, and evidence
// summarized for the old generation does not eject the new one.
func TestNewGenerationStartsWithNoEjection(t *testing.T) {
	t.Parallel()
	d := NewDecider(window)
	vs := d.Decide(up, cfg, tagged(bad(10, 50, 3), 3, "old"), withGen(10, 3, "old"), t0)
	if len(vs) != 1 || !vs[0].Ejected || vs[0].Generation != "old" {
		t.Fatalf("first evaluation: %+v, want generation old of %s ejected", vs, addr(3))
	}
	// eject it again later so its count is 2
	later := t0.Add(cfg.BaseEjectionTime)
	d.Decide(up, cfg, tagged(bad(10, 0), 3, "old"), withGen(10, 3, "old"), later)
	later = later.Add(window)
	d.Decide(up, cfg, tagged(bad(10, 50, 3), 3, "old"), withGen(10, 3, "old"), later)
	if es := d.Ejections(up); len(es) != 1 || es[0].Count != 2 || es[0].Generation != "old" {
		t.Fatalf("ejections = %+v, want the old generation's second", es)
	}

	// the new backend: the window still holds the old one's failures
	now := later.Add(time.Second)
	vs = d.Decide(up, cfg, tagged(bad(10, 50, 3), 3, "old"), withGen(10, 3, "new"), now)
	if len(vs) != 1 || vs[0].Ejected || vs[0].Address != addr(3) || vs[0].Generation != "old" {
		t.Fatalf("at the new generation: %+v, want only the old one's ejection withdrawn", vs)
	}
	if es := d.Ejections(up); len(es) != 0 {
		t.Fatalf("ejections = %+v, want none", es)
	}

	// its own failures eject it, as a first ejection
	now = now.Add(window)
	vs = d.Decide(up, cfg, tagged(bad(10, 50, 3), 3, "new"), withGen(10, 3, "new"), now)
	if len(vs) != 1 || !vs[0].Ejected || vs[0].Generation != "new" {
		t.Fatalf("the new generation failing: %+v", vs)
	}
	if es := d.Ejections(up); len(es) != 1 || es[0].Count != 1 || !es[0].Until.Equal(now.Add(cfg.BaseEjectionTime)) {
		t.Errorf("ejections = %+v, want a first ejection of one base time: no count carried over", es)
	}
}

// An address that changes generation in the evaluation it is ejected at
// again: the old generation's withdrawal comes before the new one's
// ejection, so whoever applies the verdicts in order ends with the new.
func TestWithdrawalBeforeNewGenerationEjection(t *testing.T) {
	t.Parallel()
	d := NewDecider(window)
	d.Decide(up, cfg, bad(10, 50, 3), endpoints(10), t0)
	now := t0.Add(time.Second)
	vs := d.Decide(up, cfg, tagged(bad(10, 50, 3), 3, "new"), withGen(10, 3, "new"), now)
	if len(vs) != 2 || vs[0].Ejected || vs[0].Generation != "" || !vs[1].Ejected || vs[1].Generation != "new" {
		t.Fatalf("verdicts = %+v, want the old generation's withdrawal, then the new one's ejection", vs)
	}
}

// Summaries of two generations of one address stay apart through Merge
// and a share's JSON, and Summarize tags each with its report's generation.
func TestSummariesKeepGenerations(t *testing.T) {
	t.Parallel()
	a := Aggregate{Reporters: 1, Endpoints: []EndpointSummary{summary(addr(1), 8080, 100, 50, 1, "c0")}}
	a.Endpoints[0].Generation = "old"
	b := Aggregate{Reporters: 1, Endpoints: []EndpointSummary{summary(addr(1), 8080, 10, 0, 1)}}
	b.Endpoints[0].Generation = "new"
	m := Merge(a, b)
	if len(m.Endpoints) != 2 || m.Endpoints[0].Generation != "new" || m.Endpoints[0].Requests != 10 || m.Endpoints[1].Requests != 100 {
		t.Fatalf("merged = %+v, want the two generations apart", m.Endpoints)
	}
	enc, err := Shared{Upstreams: map[string]Aggregate{"ns/svc": m}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeShared(enc)
	if err != nil || len(back.Upstreams["ns/svc"].Endpoints) != 2 || back.Upstreams["ns/svc"].Endpoints[1].Generation != "old" {
		t.Errorf("decoded %+v (%v), want the generations kept", back.Upstreams, err)
	}
	r := loadreport.ClusterReports{Endpoints: []loadreport.Endpoint{{Address: addr(1), Port: 8080, Generation: "pod-b"}},
		Reporters: []loadreport.ReporterLoads{{ID: "c0", Loads: []loadreport.Load{{Issued: 10, Successes: 10}}}}}
	if s := Summarize(r, 20); len(s.Endpoints) != 1 || s.Endpoints[0].Generation != "pod-b" {
		t.Errorf("Summarize = %+v, want the report's generation", s.Endpoints)
	}
}
