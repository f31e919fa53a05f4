package outlier

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestCompactKeepsEveryDecision: within its bound, deciding on the merged shares of
// three replicas gives, evaluation after evaluation, exactly the verdicts
// and ejections that deciding on their full aggregates gives.
func TestCompactKeepsEveryDecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 15))
	for trial := range 300 {
		full, compact := NewDecider(window), NewDecider(window)
		n := 2 + rng.IntN(12)
		eps := endpoints(n)
		c := cfg
		c.MinReporters = uint32(1 + rng.IntN(3))
		c.MaxEjectionPercent = uint32(rng.IntN(101))
		now := t0
		for step := range 20 {
			var replicas []Aggregate
			var shared []Aggregate
			for range 3 {
				var a Aggregate
				for i := range n {
					if rng.IntN(3) == 0 {
						continue
					}
					req := uint64(rng.IntN(400))
					errs := uint64(0)
					if rng.IntN(3) == 0 {
						errs = uint64(rng.IntN(int(req) + 1))
					}
					failing := uint64(0)
					if errs > 0 {
						failing = uint64(rng.IntN(3))
					}
					a.Endpoints = append(a.Endpoints, EndpointSummary{Address: addr(i), Port: 8080, Requests: req, Errors: errs, Reporters: 2 + failing, Failing: failing})
					a.Reporters = 3
				}
				replicas = append(replicas, a)
				shared = append(shared, Compact(map[string]Aggregate{"ns/svc": a}, MaxSharedEndpoints).Upstreams["ns/svc"])
			}
			vf := full.Decide(up, c, Merge(replicas...), eps, now)
			vc := compact.Decide(up, c, Merge(shared...), eps, now)
			if !reflect.DeepEqual(vf, vc) || !reflect.DeepEqual(full.Ejections(up), compact.Ejections(up)) {
				t.Fatalf("trial %d step %d: full %+v / %+v, compact %+v / %+v", trial, step, vf, full.Ejections(up), vc, compact.Ejections(up))
			}
			now = now.Add(time.Duration(1+rng.IntN(20)) * time.Second)
		}
	}
}

// TestCompactBound: past its bound the endpoints with the most errors,
// then the most requests, are kept, the rest counted as truncated, per
// upstream.
func TestCompactBound(t *testing.T) {
	const max = 100
	aggs := map[string]Aggregate{}
	for u, up := range []string{"ns/a", "ns/b"} {
		var a Aggregate
		for i := range max {
			a.Endpoints = append(a.Endpoints, EndpointSummary{Address: addr(i), Port: uint32(8000 + u), Requests: 100, Errors: uint64(1 + i%50 + 50*u), Failing: 1, Reporters: 1})
		}
		aggs[up] = a
	}
	aggs["ns/c"] = Aggregate{Endpoints: []EndpointSummary{{Address: "10.9.9.9", Port: 1, Requests: 100, Reporters: 1}}}
	s := Compact(aggs, max)
	a, b, c := s.Upstreams["ns/a"], s.Upstreams["ns/b"], s.Upstreams["ns/c"]
	// b's endpoints all have more errors than a's: b is kept whole; c has none
	if len(b.Endpoints) != max || b.Truncated != 0 || a.Truncated != max || len(a.Endpoints) != 0 || c.Truncated != 1 || len(c.Endpoints) != 0 {
		t.Fatalf("a %d kept %d truncated, b %d kept %d truncated, c %+v", len(a.Endpoints), a.Truncated, len(b.Endpoints), b.Truncated, c)
	}
	for i := 1; i < len(b.Endpoints); i++ {
		if compareSummary(b.Endpoints[i-1], b.Endpoints[i]) >= 0 {
			t.Fatal("not sorted")
		}
	}
	// within the bound, all of it
	if s := Compact(aggs, 2*max+1); len(s.Upstreams["ns/a"].Endpoints) != max || len(s.Upstreams["ns/c"].Endpoints) != 1 {
		t.Fatalf("within the bound: %d, %d", len(s.Upstreams["ns/a"].Endpoints), len(s.Upstreams["ns/c"].Endpoints))
	}
}

// TestRestoreContinuesTheEjection: a decider restored from another's
// ejections keeps them until their end, returns the endpoint then, and its
// next ejection counts on from the restored count.
func TestRestoreContinuesTheEjection(t *testing.T) {
	eps := endpoints(10)
	first := NewDecider(window)
	if got := ejected(first.Decide(up, cfg, bad(10, 50, 3), eps, t0)); !reflect.DeepEqual(got, []string{addr(3)}) {
		t.Fatalf("first decider ejected %v", got)
	}
	es := first.Ejections(up)
	next := NewDecider(window)
	at := t0.Add(5 * time.Second)
	next.Restore(up, es, at)
	if !reflect.DeepEqual(next.Ejections(up), es) {
		t.Fatalf("restored %+v, want %+v", next.Ejections(up), es)
	}
	if vs := next.Decide(up, cfg, bad(10, 0), eps, at); len(vs) != 0 {
		t.Fatalf("a restored ejection changed before its end: %+v", vs)
	}
	vs := next.Decide(up, cfg, bad(10, 0), eps, es[0].Until)
	if len(vs) != 1 || vs[0].Ejected || vs[0].Address != addr(3) {
		t.Fatalf("at its end: %+v", vs)
	}
	// failing again at once: the count goes on from the restored one
	again := es[0].Until.Add(window)
	if got := ejected(next.Decide(up, cfg, bad(10, 50, 3), eps, again)); len(got) != 1 {
		t.Fatalf("ejected again: %v", got)
	}
	if e := next.Ejections(up)[0]; e.Count != 2 || e.Until != again.Add(2*cfg.BaseEjectionTime) {
		t.Fatalf("second ejection %+v, want count 2 for %v", e, 2*cfg.BaseEjectionTime)
	}
	// a restore of ended ejections leaves nothing
	other := NewDecider(window)
	other.Restore(up, es, es[0].Until)
	if len(other.Upstreams()) != 0 {
		t.Fatal("an ended ejection was restored")
	}
}

// TestSharedRoundTrip: a share decodes to what was encoded; a share whose
// endpoints are out of order or over the bound is refused.
func TestSharedRoundTrip(t *testing.T) {
	in := Compact(map[string]Aggregate{"ns/a": bad(5, 40, 2), "ns/b": {Reporters: 1}}, MaxSharedEndpoints)
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeShared(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n %+v\n %+v", in, out)
	}
	unsorted := Shared{Upstreams: map[string]Aggregate{"ns/a": {Endpoints: []EndpointSummary{{Address: "10.0.0.2", Port: 1}, {Address: "10.0.0.1", Port: 1}}}}}
	if b, _ := unsorted.Encode(); b != nil {
		if _, err := DecodeShared(b); err == nil {
			t.Error("an unsorted share was accepted")
		}
	}
	if _, err := DecodeShared([]byte("not gzip")); err == nil {
		t.Error("garbage was accepted")
	}
}

// FuzzDecodeShared: any bytes decode to a share within the bounds, or to an
// error; never a panic.
func FuzzDecodeShared(f *testing.F) {
	good, _ := Compact(map[string]Aggregate{"ns/a": bad(3, 50, 1)}, MaxSharedEndpoints).Encode()
	f.Add(good)
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeShared(b)
		if err != nil {
			return
		}
		n := 0
		for _, a := range s.Upstreams {
			n += len(a.Endpoints)
		}
		if n > MaxSharedEndpoints {
			t.Fatalf("%d endpoints accepted", n)
		}
		Merge(slices.Collect(maps.Values(s.Upstreams))...)
	})
}
