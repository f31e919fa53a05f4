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
