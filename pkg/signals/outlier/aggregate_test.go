package outlier

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"poise.dev/poise/pkg/signals/loadreport"
)

// reports builds ClusterReports over n endpoints 10.0.0.i:8080; each
// reporter is a list of (successes, errors) per endpoint.
func reports(n int, reporters map[string][][2]uint64) loadreport.ClusterReports {
	r := loadreport.ClusterReports{}
	for i := range n {
		r.Endpoints = append(r.Endpoints, loadreport.Endpoint{Address: addr(i), Port: 8080})
	}
	for id, per := range reporters {
		rl := loadreport.ReporterLoads{ID: id, Loads: make([]loadreport.Load, n)}
		for i, se := range per {
			rl.Loads[i] = loadreport.Load{Issued: se[0] + se[1], Successes: se[0], Errors: se[1]}
		}
		r.Reporters = append(r.Reporters, rl)
	}
	return r
}

func addr(i int) string { return "10.0.0." + string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// summary is an endpoint's summary as one replica makes it: failing names
// the failing reporters, counted and kept as their InstanceSet.
func summary(address string, port uint32, requests, errors, reporters uint64, failing ...string) EndpointSummary {
	e := EndpointSummary{Address: address, Port: port, Requests: requests, Errors: errors, Reporters: reporters,
		Failing: uint64(len(failing)), FailingFloor: uint64(len(failing))}
	var hs []uint64
	for _, id := range failing {
		hs = append(hs, InstanceHash(id))
	}
	e.Instances = bottom(hs, MaxInstances)
	return e
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		n         int
		reporters map[string][][2]uint64
		want      Aggregate
	}{
		{"nothing reported", 3, nil, Aggregate{}},
		{"one bad endpoint of four, three clients", 4, map[string][][2]uint64{
			"a": {{50, 50}, {100, 0}, {100, 0}, {100, 0}},
			"b": {{40, 60}, {100, 0}, {100, 0}, {100, 0}},
			"c": {{90, 10}, {100, 0}, {100, 0}, {0, 0}},
		}, Aggregate{Reporters: 3, Endpoints: []EndpointSummary{
			summary(addr(0), 8080, 300, 120, 3, "a", "b"),
			summary(addr(1), 8080, 300, 0, 3),
			summary(addr(2), 8080, 300, 0, 3),
			summary(addr(3), 8080, 200, 0, 2),
		}}},
		{"a client failing everywhere is left out", 2, map[string][][2]uint64{
			"bad":  {{0, 10}, {0, 10}},
			"good": {{10, 0}, {10, 0}},
		}, Aggregate{Reporters: 1, Untrusted: 1, Endpoints: []EndpointSummary{
			summary(addr(0), 8080, 10, 0, 1), summary(addr(1), 8080, 10, 0, 1),
		}}},
		{"failing on exactly half is trusted", 4, map[string][][2]uint64{
			"a": {{0, 10}, {0, 10}, {10, 0}, {10, 0}},
		}, Aggregate{Reporters: 1, Endpoints: []EndpointSummary{
			summary(addr(0), 8080, 10, 10, 1, "a"), summary(addr(1), 8080, 10, 10, 1, "a"), summary(addr(2), 8080, 10, 0, 1), summary(addr(3), 8080, 10, 0, 1),
		}}},
		{"a client of one endpoint that fails is the failing party", 3, map[string][][2]uint64{
			"a": {{0, 5}},
		}, Aggregate{Untrusted: 1}},
		{"the threshold is inclusive: 20 of 100 is 20 %", 1, map[string][][2]uint64{
			"a": {{80, 20}}, "b": {{81, 19}}, "c": {{100, 0}},
		}, Aggregate{Reporters: 2, Untrusted: 1, Endpoints: []EndpointSummary{summary(addr(0), 8080, 200, 19, 2)}}},
		{"huge counts saturate", 1, map[string][][2]uint64{
			"a": {{1<<64 - 1, 0}}, "b": {{1 << 63, 0}},
		}, Aggregate{Reporters: 2, Endpoints: []EndpointSummary{summary(addr(0), 8080, 1<<64-1, 0, 2)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(reports(tc.n, tc.reporters), 20)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestSummarizeIgnoresReporterOrderAndExtraLoads: the reporters' order does
// not matter, and loads past the endpoints are not read.
func TestSummarizeIgnoresReporterOrderAndExtraLoads(t *testing.T) {
	t.Parallel()
	r := reports(3, map[string][][2]uint64{"a": {{1, 2}, {3, 0}}, "b": {{5, 5}, {0, 0}, {9, 1}}, "c": {{7, 0}}})
	want := Summarize(r, 30)
	slices.Reverse(r.Reporters)
	for i := range r.Reporters {
		r.Reporters[i].Loads = append(r.Reporters[i].Loads, loadreport.Load{Errors: 100})
	}
	if got := Summarize(r, 30); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestMerge: counts add up; the failing instances unite, so one instance
// failing on two replicas is two failing reporters but one instance.
func TestMerge(t *testing.T) {
	t.Parallel()
	a := Aggregate{Reporters: 2, Untrusted: 1, Endpoints: []EndpointSummary{summary("10.0.0.1", 80, 10, 5, 2, "x"), summary("10.0.0.2", 80, 4, 0, 1)}}
	b := Aggregate{Reporters: 3, Endpoints: []EndpointSummary{summary("10.0.0.1", 80, 1, 1, 1, "x"), summary("10.0.0.1", 81, 2, 0, 1)}}
	one := summary("10.0.0.1", 80, 11, 6, 3, "x")
	one.Failing = 2
	want := Aggregate{Reporters: 5, Untrusted: 1, Endpoints: []EndpointSummary{
		one, summary("10.0.0.1", 81, 2, 0, 1), summary("10.0.0.2", 80, 4, 0, 1)}}
	if got := Merge(a, b); !reflect.DeepEqual(got, want) {
		t.Errorf("Merge(a, b) = %+v\nwant %+v", got, want)
	}
	if got := Merge(b, a); !reflect.DeepEqual(got, want) {
		t.Errorf("Merge(b, a) = %+v", got)
	}
	if got := Merge(a, b).Endpoints[0].FailingInstances(); got != 1 {
		t.Errorf("one instance failing on two replicas: %d failing instances", got)
	}
	c := Aggregate{Reporters: 1, Endpoints: []EndpointSummary{summary("10.0.0.1", 80, 5, 5, 1, "y")}}
	if got := Merge(a, b, c).Endpoints[0]; got.Failing != 3 || got.FailingInstances() != 2 {
		t.Errorf("x on two replicas and y: %d failing, %d instances", got.Failing, got.FailingInstances())
	}
	if got := Merge(); got.Reporters != 0 || len(got.Endpoints) != 0 {
		t.Errorf("Merge() = %+v", got)
	}
	// the JSON shape a replica writes and the leader reads
	js, err := json.Marshal(Merge(a))
	if err != nil {
		t.Fatal(err)
	}
	hx := sha256.Sum256([]byte("x"))
	shape := `{"reporters":2,"untrusted":1,"endpoints":[{"address":"10.0.0.1","port":80,"requests":10,"errors":5,"reporters":2,"failingInstances":1,` +
		`"instances":"` + base64.StdEncoding.EncodeToString(hx[:8]) + `"},{"address":"10.0.0.2","port":80,"requests":4,"errors":0,"reporters":1,"failingInstances":0}]}`
	if string(js) != shape {
		t.Errorf("JSON\n got %s\nwant %s", js, shape)
	}
	back, err := decodeSharedJSON([]byte(`{"upstreams":{"ns/a":` + string(js) + `}}`))
	if err != nil || !reflect.DeepEqual(back.Upstreams["ns/a"], Merge(a)) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	// a leader of the previous version reads no "failing" in it
	var previous struct {
		Endpoints []struct {
			Failing *uint64 `json:"failing"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(js, &previous); err != nil || previous.Endpoints[0].Failing != nil {
		t.Errorf("the previous version reads %+v, %v: want no failing reporters", previous, err)
	}
}

func TestMergeIsBounded(t *testing.T) {
	t.Parallel()
	big := Aggregate{}
	for i := range MaxEndpoints + 5 {
		big.Endpoints = append(big.Endpoints, EndpointSummary{Address: "10.0.0.1", Port: uint32(i), Requests: 1})
	}
	got := Merge(big)
	if len(got.Endpoints) != MaxEndpoints || got.Truncated != 5 {
		t.Errorf("%d endpoints, %d truncated", len(got.Endpoints), got.Truncated)
	}
}

// FuzzSummarizeMerge: arbitrary reports, counts and splits into replicas
// never crash, the sums of Merge do not depend on how the reporters are
// split over replicas or ordered, and no endpoint counts more failing
// reporters than reporters or more errors than requests.
func FuzzSummarizeMerge(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint8(3), uint8(20), uint64(1000))
	f.Add(uint64(7), uint8(1), uint8(9), uint8(100), uint64(1<<64-1))
	f.Add(uint64(9), uint8(0), uint8(0), uint8(1), uint64(0))
	f.Fuzz(func(t *testing.T, seed uint64, nEndpoints, nReporters, pct uint8, scale uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := int(nEndpoints % 16)
		r := loadreport.ClusterReports{}
		for range n {
			r.Endpoints = append(r.Endpoints, loadreport.Endpoint{Address: addr(rng.IntN(n + 1)), Port: uint32(rng.IntN(3))})
		}
		for i := range int(nReporters % 12) {
			rl := loadreport.ReporterLoads{ID: string(rune('a' + i))}
			for range rng.IntN(n + 2) {
				s, e := rng.Uint64N(scale|1), rng.Uint64N(scale|1)
				rl.Loads = append(rl.Loads, loadreport.Load{Issued: s + e, Successes: s, Errors: e})
			}
			r.Reporters = append(r.Reporters, rl)
		}
		percent := uint32(pct%100) + 1
		whole := Summarize(r, percent)
		// split the reporters over two "replicas", shuffled
		rng.Shuffle(len(r.Reporters), func(i, j int) { r.Reporters[i], r.Reporters[j] = r.Reporters[j], r.Reporters[i] })
		cut := 0
		if len(r.Reporters) > 0 {
			cut = rng.IntN(len(r.Reporters) + 1)
		}
		x, y := r, r
		x.Reporters, y.Reporters = r.Reporters[:cut], r.Reporters[cut:]
		merged := Merge(Summarize(y, percent), Summarize(x, percent))
		// a replica's own count of failing instances is the most one
		// replica saw; with the sets whole, the count is the same
		w := Merge(whole)
		for i := range min(len(w.Endpoints), len(merged.Endpoints)) {
			if a, b := w.Endpoints[i].FailingInstances(), merged.Endpoints[i].FailingInstances(); a != b || a != w.Endpoints[i].Failing {
				t.Fatalf("%s: %d failing instances whole, %d split, %d failing", w.Endpoints[i].Address, a, b, w.Endpoints[i].Failing)
			}
			w.Endpoints[i].FailingFloor, merged.Endpoints[i].FailingFloor = 0, 0
		}
		if !reflect.DeepEqual(w, merged) {
			t.Fatalf("split over replicas:\n%+v\nwhole:\n%+v", merged, whole)
		}
		for _, e := range merged.Endpoints {
			if e.Failing > e.Reporters || e.Errors > e.Requests || e.Requests == 0 || uint64(len(e.Instances)) > e.Failing {
				t.Fatalf("endpoint %+v", e)
			}
		}
	})
}
