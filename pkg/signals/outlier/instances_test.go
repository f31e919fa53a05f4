package outlier

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
)

// MaxInstances is the largest minReporters the API allows.
func TestMaxInstancesIsTheLargestMinReporters(t *testing.T) {
	t.Parallel()
	if MaxInstances != v1alpha1.MaxOutlierMinReporters {
		t.Fatalf("MaxInstances %d, the API's largest minReporters %d", MaxInstances, v1alpha1.MaxOutlierMinReporters)
	}
}

// TestBottomSetsCountDistinctInstances: instances (any hashes) failing on
// any replicas, each replica keeping its m smallest, united in any order
// with the union cut at any k ≥ m: the union holds at least m exactly when
// all the replicas' instances together are at least m, and never more than
// them (the equality proved in "Counting failing instances over replicas").
func TestBottomSetsCountDistinctInstances(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.IntRange(1, 40).Draw(t, "m")
		k := rapid.IntRange(m, 2*m).Draw(t, "k")
		universe := rapid.SliceOfNDistinct(rapid.Uint64(), 0, 120, rapid.ID[uint64]).Draw(t, "instances")
		replicas := rapid.IntRange(1, 8).Draw(t, "replicas")
		truth := map[uint64]bool{}
		var sets []InstanceSet
		for r := range replicas {
			on := rapid.SliceOfN(rapid.Bool(), len(universe), len(universe)).Draw(t, fmt.Sprintf("fails on replica %d", r))
			var hs []uint64
			for i, h := range universe {
				if on[i] {
					hs = append(hs, h)
					truth[h] = true
				}
			}
			s := bottom(hs, m)
			if len(s) > m || !slices.IsSorted(s) {
				t.Fatalf("replica %d's set %v: over %d or not sorted", r, s, m)
			}
			sets = append(sets, s)
		}
		order := rapid.Permutation(sets).Draw(t, "order")
		var u InstanceSet
		for _, s := range order {
			u = union(u, s, k)
		}
		got, want := len(u), len(truth)
		if got > want || (got >= m) != (want >= m) || min(got, m) != min(want, m) {
			t.Fatalf("union of bottom-%d sets (cut at %d) counts %d, the instances are %d", m, k, got, want)
		}
	})
}

// report is a replica's load reports from the given instances on two
// endpoints: a failing one errs on every request to 10.0.0.0, a healthy
// one succeeds; both succeed on 10.0.0.1, so neither is the failing party.
func report(failing, healthy []string) loadreport.ClusterReports {
	r := loadreport.ClusterReports{Endpoints: []loadreport.Endpoint{{Address: addr(0), Port: 8080}, {Address: addr(1), Port: 8080}}}
	for _, id := range failing {
		r.Reporters = append(r.Reporters, loadreport.ReporterLoads{ID: id, Loads: []loadreport.Load{{Issued: 10, Errors: 10}, {Issued: 10, Successes: 10}}})
	}
	for _, id := range healthy {
		r.Reporters = append(r.Reporters, loadreport.ReporterLoads{ID: id, Loads: []loadreport.Load{{Issued: 10, Successes: 10}, {Issued: 10, Successes: 10}}})
	}
	return r
}

// previousShare is a share as the previous version wrote it: "failing",
// and no instances.
func previousShare(t *rapid.T, up string, a Aggregate) []byte {
	type endpoint struct {
		Address   string `json:"address"`
		Port      uint32 `json:"port"`
		Requests  uint64 `json:"requests"`
		Errors    uint64 `json:"errors"`
		Reporters uint64 `json:"reporters"`
		Failing   uint64 `json:"failing"`
	}
	type aggregate struct {
		Reporters uint64     `json:"reporters"`
		Untrusted uint64     `json:"untrusted"`
		Endpoints []endpoint `json:"endpoints"`
	}
	old := aggregate{Reporters: a.Reporters, Untrusted: a.Untrusted, Endpoints: []endpoint{}}
	for _, e := range a.Endpoints {
		old.Endpoints = append(old.Endpoints, endpoint{e.Address, e.Port, e.Requests, e.Errors, e.Reporters, e.Failing})
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(map[string]map[string]aggregate{"upstreams": {up: old}}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// previousLeaderFailing is what a leader of the previous version adds up
// as failing reporters on an endpoint from a share.
func previousLeaderFailing(t *rapid.T, b []byte, up, address string) uint64 {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Upstreams map[string]struct {
			Endpoints []struct {
				Address string `json:"address"`
				Failing uint64 `json:"failing"`
			} `json:"endpoints"`
		} `json:"upstreams"`
	}
	if err := json.NewDecoder(zr).Decode(&s); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, e := range s.Upstreams[up].Endpoints {
		if e.Address == address {
			n += e.Failing
		}
	}
	return n
}

// TestFleetCountsEachInstanceOnce: workload instances (pods, certificates,
// anonymous nodes) report to any of several replicas, failing on one
// endpoint; each replica summarizes, keeps minReporters of its instances
// per endpoint, encodes its share; the leader decodes, merges and decides.
// The endpoint is ejected exactly when at least minReporters distinct
// instances fail on it, however many replicas each reports to, and the
// count of failing instances is never above the truth. A replica of the
// previous version among them (a share without instances) can only lower
// the count, and a leader of the previous version reads no failing
// reporters in this version's shares.
func TestFleetCountsEachInstanceOnce(t *testing.T) {
	t.Parallel()
	const share = "ns/svc"
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.IntRange(1, 6).Draw(t, "minReporters")
		n := rapid.IntRange(0, 14).Draw(t, "instances")
		replicas := rapid.IntRange(1, 4).Draw(t, "replicas")
		previous := rapid.Bool().Draw(t, "replica 0 runs the previous version")
		ids := make([]string, n)
		for i := range ids {
			ids[i] = [...]string{"pod:%d-uid", "cert:%x", "sa:ns/sa-%d", "node-%d"}[i%4]
			ids[i] = fmt.Sprintf(ids[i], i)
		}
		// each instance fails, succeeds or is absent on each replica
		failingOn := make([][]string, replicas)
		healthyOn := make([][]string, replicas)
		truth := map[string]bool{}
		for i, id := range ids {
			for r := range replicas {
				switch rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("%s on replica %d", ids[i], r)) {
				case 1:
					failingOn[r] = append(failingOn[r], id)
					truth[id] = true
				case 2:
					healthyOn[r] = append(healthyOn[r], id)
				}
			}
		}
		c := topology.OutlierDetection{ErrorPercent: 1, MinRequestVolume: 1, MinReporters: uint32(m),
			BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 50}
		var aggs []Aggregate
		var ownMax uint64 // the most failing instances one replica saw
		for r := range replicas {
			a := Summarize(report(failingOn[r], healthyOn[r]), c.ErrorPercent)
			ownMax = max(ownMax, uint64(len(failingOn[r])))
			var b []byte
			if r == 0 && previous {
				b = previousShare(t, share, a)
			} else {
				var err error
				if b, err = EncodeShare(map[string]Aggregate{share: a.KeepInstances(c.MinReporters)}, 512<<10); err != nil {
					t.Fatal(err)
				}
				if got := previousLeaderFailing(t, b, share, addr(0)); got != 0 {
					t.Fatalf("a leader of the previous version reads %d failing reporters in replica %d's share", got, r)
				}
			}
			sh, err := DecodeShared(b)
			if err != nil {
				t.Fatal(err)
			}
			aggs = append(aggs, sh.Upstreams[share])
		}
		merged := Merge(aggs...)
		var got uint64
		if i := slices.IndexFunc(merged.Endpoints, func(e EndpointSummary) bool { return e.Address == addr(0) }); i >= 0 {
			got = merged.Endpoints[i].FailingInstances()
		}
		want := uint64(len(truth))
		if got > want || got < ownMax {
			t.Fatalf("%d failing instances counted: %d in truth, %d on one replica", got, want, ownMax)
		}
		if !previous && min(got, uint64(m)) != min(want, uint64(m)) {
			t.Fatalf("%d failing instances counted, %d in truth, minReporters %d", got, want, m)
		}
		ejected := slices.Contains(ejected(NewDecider(time.Second).Decide(up, c, merged, endpoints(2), t0)), addr(0))
		switch {
		case ejected && want < uint64(m):
			t.Fatalf("ejected with %d failing instances, minReporters %d", want, m)
		case !ejected && want >= uint64(m) && !previous:
			t.Fatalf("not ejected with %d failing instances, minReporters %d (counted %d)", want, m, got)
		}
	})
}

// TestEncodeShareBound: a replica's share stays within the ConfigMap's
// 512 KiB (shares.MaxPayload) however many endpoints fail and
// however many instances fail on each: the endpoints past 40,000 and the
// hashes past the budget are left out, the most telling kept (past 40,000
// endpoints alone, TestCompactBound). What is kept of a set is its smallest
// hashes, so the leader's count can only fall.
func TestEncodeShareBound(t *testing.T) {
	t.Parallel()
	const maxBytes = 512 << 10
	rng := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name                string
		upstreams, per, ins int
		wantWhole           bool
	}{
		{"a few failing endpoints, whole", 10, 100, 3, true},
		{"40,000 endpoints, three instances failing on each", 40, 1000, 3, false},
		{"100 endpoints, 1,000 instances failing on each", 1, 100, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aggs := map[string]Aggregate{}
			sets := map[string]InstanceSet{}
			total, hashes := 0, 0
			for u := range tc.upstreams {
				var a Aggregate
				for i := range tc.per {
					e := EndpointSummary{Address: fmt.Sprintf("10.%d.%d.%d", u, i/256, i%256), Port: uint32(8000 + rng.IntN(100)),
						Requests: 1000 + rng.Uint64N(100000), Reporters: uint64(tc.ins) + rng.Uint64N(50)}
					e.Errors = rng.Uint64N(e.Requests)
					hs := make([]uint64, tc.ins)
					for j := range hs {
						hs[j] = rng.Uint64()
					}
					e.Instances = bottom(hs, MaxInstances)
					e.Failing, e.FailingFloor = uint64(len(e.Instances)), uint64(len(e.Instances))
					sets[fmt.Sprintf("%s:%d", e.Address, e.Port)] = e.Instances
					a.Endpoints = append(a.Endpoints, e)
					total++
					hashes += len(e.Instances)
				}
				slices.SortFunc(a.Endpoints, compareSummary)
				a.Endpoints = mergeSorted(a.Endpoints)
				aggs[fmt.Sprintf("ns/up-%d", u)] = a
			}
			start := time.Now()
			b, err := EncodeShare(aggs, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if len(b) > maxBytes {
				t.Fatalf("share of %d bytes, over %d", len(b), maxBytes)
			}
			s, err := DecodeShared(b)
			if err != nil {
				t.Fatal(err)
			}
			kept, keptHashes, cut := 0, 0, 0
			var truncated uint64
			for _, a := range s.Upstreams {
				truncated += a.Truncated
				for _, e := range a.Endpoints {
					kept++
					keptHashes += len(e.Instances)
					full := sets[fmt.Sprintf("%s:%d", e.Address, e.Port)]
					if !slices.Equal(e.Instances, full[:len(e.Instances)]) {
						t.Fatalf("%s:%d kept %d hashes that are not the smallest of its %d", e.Address, e.Port, len(e.Instances), len(full))
					}
					if len(e.Instances) < len(full) {
						cut++
					}
					if e.FailingInstances() != uint64(len(full)) {
						t.Fatalf("%s:%d: its replica's own count %d, want %d", e.Address, e.Port, e.FailingInstances(), len(full))
					}
				}
			}
			t.Logf("%d endpoints with %d hashes: %d bytes in %v; kept %d endpoints (%d truncated), %d hashes, %d sets cut",
				total, hashes, len(b), took.Round(time.Millisecond), kept, truncated, keptHashes, cut)
			if uint64(kept)+truncated != uint64(total) || kept > MaxSharedEndpoints || keptHashes > MaxSharedInstances {
				t.Fatalf("kept %d + truncated %d of %d endpoints, %d hashes", kept, truncated, total, keptHashes)
			}
			if whole := kept == total && keptHashes == hashes; whole != tc.wantWhole {
				t.Fatalf("whole: %v, want %v", whole, tc.wantWhole)
			}
		})
	}
}
