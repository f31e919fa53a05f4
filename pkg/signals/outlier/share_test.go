package outlier

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
)

// TestCompactKeepsEveryDecision: within its bounds, deciding on the merged
// shares of three replicas (compacted, encoded, decoded, each failing
// endpoint's instances cut to minReporters) gives, evaluation after
// evaluation, exactly the verdicts and ejections that deciding on their
// full aggregates gives, instances failing on several replicas included;
// only the origins' count of failing instances may be lower, never below
// minReporters.
func TestCompactKeepsEveryDecision(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 15))
	for trial := range 120 {
		full, compact := NewDecider(window), NewDecider(window)
		n := 2 + rng.IntN(12)
		eps := endpoints(n)
		c := cfg
		c.MinReporters = uint32(1 + rng.IntN(4))
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
					var failing []string
					if errs > 0 {
						// instances drawn from five: some fail on several replicas
						for k := range 5 {
							if rng.IntN(3) == 0 {
								failing = append(failing, fmt.Sprintf("cert:%d", k))
							}
						}
					}
					a.Endpoints = append(a.Endpoints, summary(addr(i), 8080, req, errs, 5, failing...))
					a.Reporters = 5
				}
				replicas = append(replicas, a)
				js, err := json.Marshal(Compact(map[string]Aggregate{"ns/svc": a.KeepInstances(c.MinReporters)}, MaxSharedEndpoints, MaxSharedInstances))
				if err != nil {
					t.Fatal(err)
				}
				sh, err := decodeSharedJSON(js) // DecodeShared without the gzip, for speed
				if err != nil {
					t.Fatal(err)
				}
				shared = append(shared, sh.Upstreams["ns/svc"])
			}
			vf := full.Decide(up, c, Merge(replicas...), eps, now)
			vc := compact.Decide(up, c, Merge(shared...), eps, now)
			if !reflect.DeepEqual(withoutFailing(t, c, vf), withoutFailing(t, c, vc)) ||
				!reflect.DeepEqual(withoutFailing(t, c, full.Ejections(up)), withoutFailing(t, c, compact.Ejections(up))) {
				t.Fatalf("trial %d step %d: full %+v / %+v, compact %+v / %+v", trial, step, vf, full.Ejections(up), vc, compact.Ejections(up))
			}
			now = now.Add(time.Duration(1+rng.IntN(20)) * time.Second)
		}
	}
}

// withoutFailing is verdicts or ejections with the origins' count of
// failing instances left out, once checked to be at least minReporters.
func withoutFailing[T Verdict | Ejection](t *testing.T, c topology.OutlierDetection, vs []T) []T {
	t.Helper()
	out := slices.Clone(vs)
	for i := range out {
		o := &out[i]
		origin := reflect.ValueOf(o).Elem().FieldByName("Origin")
		if origin.String() == "" {
			continue
		}
		var clients, failing uint64
		before, after, ok := strings.Cut(origin.String(), " failing, ")
		if _, err := fmt.Sscanf(before, "load reports: %d clients, at least %d", &clients, &failing); !ok || err != nil || failing < uint64(c.MinReporters) {
			t.Fatalf("origin %q: want at least %d failing", origin.String(), c.MinReporters)
		}
		origin.SetString(after)
	}
	return out
}

// TestCompactBound: past its bound the endpoints with the most errors,
// then the most requests, are kept, the rest counted as truncated, per
// upstream.
func TestCompactBound(t *testing.T) {
	t.Parallel()
	const max = 100
	aggs := map[string]Aggregate{}
	for u, up := range []string{"ns/a", "ns/b"} {
		var a Aggregate
		for i := range max {
			a.Endpoints = append(a.Endpoints, summary(addr(i), uint32(8000+u), 100, uint64(1+i%50+50*u), 1, "x"))
		}
		aggs[up] = a
	}
	aggs["ns/c"] = Aggregate{Endpoints: []EndpointSummary{{Address: "10.9.9.9", Port: 1, Requests: 100, Reporters: 1}}}
	s := Compact(aggs, max, MaxSharedInstances)
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
	if s := Compact(aggs, 2*max+1, MaxSharedInstances); len(s.Upstreams["ns/a"].Endpoints) != max || len(s.Upstreams["ns/c"].Endpoints) != 1 {
		t.Fatalf("within the bound: %d, %d", len(s.Upstreams["ns/a"].Endpoints), len(s.Upstreams["ns/c"].Endpoints))
	}
}

// TestInstanceBudget: sets that fit are kept whole; past the budget every
// set is cut to one level, and what is left goes one each to the first
// longer sets, so exactly the budget is kept.
func TestInstanceBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lens   []int
		budget int
		want   []int
	}{
		{[]int{3, 0, 5}, 8, []int{3, 0, 5}},
		{[]int{3, 0, 5}, 7, []int{3, 0, 4}},
		{[]int{10, 10, 10}, 10, []int{4, 3, 3}},
		{[]int{1, 10, 2, 10}, 12, []int{1, 5, 2, 4}},
		{[]int{1000, 1000}, 0, []int{0, 0}},
		{nil, 5, []int{}},
	} {
		got := instanceBudget(tc.lens, tc.budget)
		if !slices.Equal(got, tc.want) {
			t.Errorf("instanceBudget(%v, %d) = %v, want %v", tc.lens, tc.budget, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		lens := make([]int, rng.IntN(20))
		total := 0
		for i := range lens {
			lens[i] = rng.IntN(30)
			total += lens[i]
		}
		budget := rng.IntN(total + 2)
		got := instanceBudget(lens, budget)
		kept := 0
		for i, k := range got {
			if k > lens[i] || k < 0 {
				t.Fatalf("instanceBudget(%v, %d) = %v", lens, budget, got)
			}
			kept += k
		}
		if kept != min(total, budget) {
			t.Fatalf("instanceBudget(%v, %d) = %v keeps %d", lens, budget, got, kept)
		}
	}
}

// TestRestoreContinuesTheEjection: a decider restored from another's
// ejections keeps them until their end, returns the endpoint then, and its
// next ejection counts on from the restored count.
func TestRestoreContinuesTheEjection(t *testing.T) {
	t.Parallel()
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
// endpoints are out of order or over the bound is refused, as is one
// whose instance sets no replica writes; a share of the previous version
// is read.
func TestSharedRoundTrip(t *testing.T) {
	t.Parallel()
	in := Compact(map[string]Aggregate{"ns/a": bad(5, 40, 2), "ns/b": {Reporters: 1}}, MaxSharedEndpoints, MaxSharedInstances)
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
	// a share of the previous version: its failing reporters are its one
	// replica's failing instances
	old, err := DecodeShared(gz(t, `{"upstreams":{"ns/a":{"reporters":3,"untrusted":0,"endpoints":[{"address":"10.0.0.1","port":80,"requests":10,"errors":5,"reporters":3,"failing":2}]}}}`))
	if e := old.Upstreams["ns/a"].Endpoints; err != nil || len(e) != 1 || e[0].Failing != 2 || e[0].Instances != nil || e[0].FailingInstances() != 2 {
		t.Errorf("the previous version's share: %+v, %v", old, err)
	}
	// instance sets that no replica writes
	hashes := func(hs ...uint64) string {
		b, _ := json.Marshal(InstanceSet(hs))
		return string(b)
	}
	many := make([]uint64, MaxInstances+1)
	for i := range many {
		many[i] = uint64(i)
	}
	for why, set := range map[string]string{
		"more instances than failing reporters": hashes(1, 2, 3),
		"not ascending":                         hashes(2, 1),
		"a repeated hash":                       hashes(1, 1),
		"not whole hashes":                      `"AAAA"`,
		"not base64":                            `"!!"`,
		"over MaxInstances":                     hashes(many...),
	} {
		js := `{"upstreams":{"ns/a":{"reporters":3,"untrusted":0,"endpoints":[{"address":"10.0.0.1","port":80,"requests":10,"errors":5,"reporters":3,"failingInstances":2,"instances":` + set + `}]}}}`
		if _, err := DecodeShared(gz(t, js)); err == nil {
			t.Errorf("a share with %s was accepted", why)
		} else {
			t.Logf("%s: %v", why, err)
		}
	}
}

// gz is s gzipped.
func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// FuzzDecodeShared: any bytes decode to a share within the bounds (each
// InstanceSet sorted, distinct, at most MaxInstances and its endpoint's
// failing reporters), or to an error; never a panic.
func FuzzDecodeShared(f *testing.F) {
	good, _ := Compact(map[string]Aggregate{"ns/a": bad(3, 50, 1)}, MaxSharedEndpoints, MaxSharedInstances).Encode()
	f.Add(good)
	f.Add([]byte{0x1f, 0x8b})
	f.Add(gz(f, `{"upstreams":{"ns/a":{"reporters":3,"untrusted":0,"endpoints":[{"address":"10.0.0.1","port":80,"requests":10,"errors":5,"reporters":3,"failing":2}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeShared(b)
		if err != nil {
			return
		}
		n := 0
		for _, a := range s.Upstreams {
			n += len(a.Endpoints)
			for _, e := range a.Endpoints {
				if len(e.Instances) > MaxInstances || uint64(len(e.Instances)) > e.Failing || e.FailingFloor != e.Failing ||
					!slices.IsSorted(e.Instances) || len(slices.Compact(slices.Clone(e.Instances))) != len(e.Instances) {
					t.Fatalf("endpoint accepted: %+v", e)
				}
			}
		}
		if n > MaxSharedEndpoints {
			t.Fatalf("%d endpoints accepted", n)
		}
		Merge(slices.Collect(maps.Values(s.Upstreams))...)
	})
}
