package loadreport

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
)

// BenchmarkStoreMemory measures the store's memory at 1,000 reporting
// clients × 5,000 upstreams (20 endpoints each, 100,000 endpoints), every
// client reporting every endpoint of the upstreams it calls: 20 upstreams
// each (400 cells a client), or all 5,000 (100,000 cells a client, a
// hundred million in all, far past the cap: the default cap holds).
// It reports the heap the store holds (heap-bytes), the bound's estimate
// (bound-bytes), the cells kept and the reporters evicted; ns/op is one
// round of a report from every client (the worst case takes about 30 s a
// round on 2 cores, most of it evicting: run it with -benchtime 1x).
func BenchmarkStoreMemory(b *testing.B) {
	const clients, upstreams = 1000, 5000
	snap := snapshot(b, upstreams)
	cat := NewCatalog(nil, snap, nil)
	for _, calls := range []int{20, upstreams} {
		b.Run(fmt.Sprintf("calls=%d", calls), func(b *testing.B) {
			// Client c calls upstreams c*calls … (mod 5,000): each of
			// them reports endpoint-granular stats for all 20 endpoints.
			reqs := make([]*lrs.LoadStatsRequest, clients)
			if calls == upstreams {
				r := fullReport(snap.Upstreams()[:upstreams])
				for c := range reqs {
					reqs[c] = r
				}
			} else {
				ups := snap.Upstreams()
				for c := range reqs {
					r := &lrs.LoadStatsRequest{}
					for i := range calls {
						r.ClusterStats = append(r.ClusterStats, fullReport(ups[(c*calls+i)%upstreams:][:1]).ClusterStats...)
					}
					reqs[c] = r
				}
			}
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := NewStore(Config{})
			s.SetCatalog(cat)
			streams := make([]*Stream, clients)
			for c := range streams {
				streams[c] = s.Open(Reporter{ID: fmt.Sprintf("client-%04d", c), Region: topologytest.Regions[c%3], Zone: "a"}, t0)
			}
			b.ResetTimer()
			now := t0
			for range b.N {
				for c, st := range streams {
					st.Report(reqs[c], now)
				}
				now = now.Add(time.Second)
			}
			b.StopTimer()
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			u := s.Usage()
			b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "heap-bytes")
			b.ReportMetric(float64(u.Bytes), "bound-bytes")
			b.ReportMetric(float64(u.Cells), "cells")
			b.ReportMetric(float64(u.Drops.Evicted), "evicted")
			runtime.KeepAlive(s)
			runtime.KeepAlive(reqs)
		})
	}
}

// fullReport is an endpoint-granular report for every endpoint of ups.
func fullReport(ups []*topology.UpstreamState) *lrs.LoadStatsRequest {
	r := &lrs.LoadStatsRequest{}
	for _, u := range ups {
		cs := &endpoint.ClusterStats{ClusterName: u.Upstream.Key.String()}
		loc := &endpoint.UpstreamLocalityStats{}
		for _, e := range u.Endpoints {
			loc.UpstreamEndpointStats = append(loc.UpstreamEndpointStats, envoyStats("", e.Address, 10, 9, 1).UpstreamLocalityStats[0].UpstreamEndpointStats[0])
		}
		cs.UpstreamLocalityStats = []*endpoint.UpstreamLocalityStats{loc}
		r.ClusterStats = append(r.ClusterStats, cs)
	}
	return r
}

// BenchmarkReport is one Envoy's steady report for 20 upstreams of 20
// endpoints each: no allocation once its cells exist.
func BenchmarkReport(b *testing.B) {
	snap := snapshot(b, 20)
	s := NewStore(Config{})
	s.SetCatalog(NewCatalog(nil, snap, nil))
	st := s.Open(Reporter{ID: "envoy"}, t0)
	r := fullReport(snap.Upstreams())
	st.Report(r, t0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		st.Report(r, t0.Add(time.Duration(i)*time.Millisecond))
	}
}

// reportingSnapshot is n upstreams with spec.loadReporting, each with
// perUpstream endpoints in one locality.
func reportingSnapshot(t testing.TB, n, perUpstream int) *topology.Snapshot {
	t.Helper()
	var b topology.Batch
	for u := range n {
		up := topologytest.Upstream(u)
		up.LoadReportInterval = 10 * time.Second
		b.PutUpstream(up)
		r := u % len(topologytest.Regions)
		set := topology.EndpointSet{Key: topology.Key{Namespace: "bench", Name: up.Key.Name}, Upstream: up.Key.Name,
			Locality: weights.Locality{Region: topologytest.Regions[r]}}
		for i := range perUpstream {
			set.Endpoints = append(set.Endpoints, topology.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", u/250, u%250, i), Port: 8080, Weight: 1})
		}
		b.PutEndpointSet(set)
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// boundBytes is the Store's documented bound at its caps, for clusters of
// perCluster endpoints each: MaxCells cells, as many blocks as they fill,
// and the reporters.
func boundBytes(cfg Config, reporters, perCluster int) int {
	return cfg.MaxCells*CellBytes + cfg.MaxCells/perCluster*blockBytes + min(reporters, cfg.MaxReporters)*reporterBytes
}

// fleet is a store that clients reporters, each reporting every endpoint
// of every upstream of snap, fill rounds times; check runs after every
// report. It returns the store and the heap it holds (after GC).
func fleet(t testing.TB, snap *topology.Snapshot, cfg Config, clients, rounds int, check func(*Store)) (*Store, int64, time.Duration) {
	req := fullReport(snap.Upstreams())
	cat := NewCatalog(nil, snap, func(u *topology.UpstreamState) bool { return u.Upstream.LoadReportInterval > 0 })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewStore(cfg)
	s.SetCatalog(cat)
	streams := make([]*Stream, clients)
	for c := range streams {
		streams[c] = s.Open(Reporter{ID: fmt.Sprintf("client-%04d", c), Region: topologytest.Regions[c%3], Zone: "a"}, t0)
	}
	start := time.Now()
	now := t0
	for range rounds {
		for _, st := range streams {
			st.Report(req, now)
			if check != nil {
				check(s)
			}
		}
		now = now.Add(time.Second)
	}
	took := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	runtime.KeepAlive(req)
	return s, int64(after.HeapAlloc) - int64(before.HeapAlloc), took
}

// BenchmarkStoreMemory1000Clients5000Upstreams is the memory bound:
// 5,000 published upstreams with loadReporting (4 endpoints each, 20,000
// endpoints) and 1,000 reporting clients each reporting on all of them —
// 20 million cells asked for, ten times the default cap of 2,000,000. It
// reports the heap the store holds (heap-MB), the documented bound at the
// cap (bound-MB), the cells kept and the reporters evicted; ns/op is one
// round of a report from every client. Run it with -benchtime 1x: a round
// takes seconds. TestStoreMemoryWithinBound checks the same at a smaller
// scale after every report.
func BenchmarkStoreMemory1000Clients5000Upstreams(b *testing.B) {
	const clients, upstreams, perUpstream = 1000, 5000, 4
	snap := reportingSnapshot(b, upstreams, perUpstream)
	cfg := Config{MaxCells: DefaultMaxCells, MaxReporters: DefaultMaxReporters}
	b.ResetTimer()
	s, heap, _ := fleet(b, snap, cfg, clients, b.N, nil)
	b.StopTimer()
	u := s.Usage()
	bound := boundBytes(cfg, clients, perUpstream)
	if u.Cells > cfg.MaxCells || u.Bytes > bound || heap > int64(bound) {
		b.Fatalf("over the cap: %d cells (cap %d), estimate %d B, heap %d B, bound %d B", u.Cells, cfg.MaxCells, u.Bytes, heap, bound)
	}
	b.ReportMetric(float64(heap)/1e6, "heap-MB")
	b.ReportMetric(float64(bound)/1e6, "bound-MB")
	b.ReportMetric(float64(u.Cells), "cells")
	b.ReportMetric(float64(u.Reporters), "reporters")
	b.ReportMetric(float64(u.Drops.Evicted), "evicted")
}

// TestStoreMemoryWithinBound is the benchmark's check at a tenth of its
// scale (100 clients × 500 upstreams of 4 endpoints, a cap of 50,000
// cells: 200,000 asked for): after every report the cells stay within
// MaxCells and the estimate within the documented bound, the heap the
// store holds stays within it too, and the reporters dropped to make room
// are counted. A single client asking for more than the whole cap keeps
// what fits and counts the rest in OverCap.
func TestStoreMemoryWithinBound(t *testing.T) {
	const clients, upstreams, perUpstream = 100, 500, 4
	snap := reportingSnapshot(t, upstreams, perUpstream)
	cfg := Config{MaxCells: 50_000, MaxReporters: DefaultMaxReporters}
	bound := boundBytes(cfg, clients, perUpstream)
	maxCells := 0
	s, heap, _ := fleet(t, snap, cfg, clients, 3, func(s *Store) {
		u := s.Usage()
		if u.Cells > cfg.MaxCells || u.Bytes > bound {
			t.Fatalf("over the cap: %d cells (cap %d), estimate %d B (bound %d B)", u.Cells, cfg.MaxCells, u.Bytes, bound)
		}
		maxCells = max(maxCells, u.Cells)
	})
	u := s.Usage()
	if heap > int64(bound) {
		t.Errorf("the store holds %d B of heap, over the bound %d B", heap, bound)
	}
	fit := cfg.MaxCells / (upstreams * perUpstream) // 25 clients' cells fit
	if maxCells != fit*upstreams*perUpstream || u.Reporters != fit {
		t.Errorf("kept at most %d cells, %d reporters at the end; want %d cells of %d reporters", maxCells, u.Reporters, fit*upstreams*perUpstream, fit)
	}
	// every report of a client not kept since its last one evicted the oldest
	if want := uint64(3*clients - fit); u.Drops.Evicted != want || u.Drops.OverCap != 0 {
		t.Errorf("drops %+v, want %d evicted", u.Drops, want)
	}

	cfg.MaxCells = 1000 // less than one client's 2,000 cells
	s, _, _ = fleet(t, snap, cfg, 1, 1, nil)
	if u := s.Usage(); u.Cells != 1000 || u.Drops.OverCap != upstreams-1000/perUpstream || u.Drops.Evicted != 0 {
		t.Errorf("one client over the whole cap: %+v", u)
	}
}
