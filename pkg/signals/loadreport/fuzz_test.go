package loadreport

import (
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzLoadStats feeds arbitrary LoadStatsRequest bytes to a store: bad
// localities, unknown clusters and endpoints, huge counts and anything
// else a client may send are dropped or kept, never a crash, and the store
// stays within its bounds: no reporter weighs more than its cap in a
// cluster's window.
func FuzzLoadStats(f *testing.F) {
	seeds := []*lrs.LoadStatsRequest{
		report(envoyStats("bench/svc-0000", "10.0.0.0", 10, 8, 2)),
		report(grpcStats("bench/svc-0001", "~ep~10.0.1.3:8080", 1<<63, 1<<62, 1<<64-1)),
		report(grpcStats("bench/svc-0000", "x~ep~[fd00::1]:8080", 1, 1, 0), grpcStats("bench/svc-0000", "~ep~", 1, 0, 1)),
		report(envoyStats("bench/unknown", "10.0.0.0", 1, 1, 0), envoyStats("", "", 0, 0, 0)),
		{Node: &core.Node{Id: "n", Locality: &core.Locality{Region: "eu-west", Zone: "a"}}, ClusterStats: []*endpoint.ClusterStats{{
			ClusterName: "bench/svc-0000", UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{}, {Locality: &core.Locality{}}},
			TotalDroppedRequests: 5,
		}}},
	}
	for i, r := range seeds {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i))
	}
	snap := snapshot(f, 3)
	cat := NewCatalog(nil, snap, nil)
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		req := &lrs.LoadStatsRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		const maxReq = 1000
		s := NewStore(Config{Bucket: time.Second, MaxCells: 50, MaxReporters: 2, MaxRequests: maxReq})
		s.SetCatalog(cat)
		now := t0
		for i := range 3 {
			st := s.Open(Reporter{ID: string(rune('a' + i)), Region: req.GetNode().GetLocality().GetRegion()}, now)
			st.Report(req, now)
			now = now.Add(time.Duration(step) * 100 * time.Millisecond)
		}
		u := s.Usage()
		if u.Cells > 50 || u.Reporters > 2 || u.Cells != u.Blocks*20 {
			t.Fatalf("usage %+v past the bounds", u)
		}
		for name := range cat.clusters {
			for _, e := range s.Cluster(name, now) {
				if e.Reporters > 2 || (e.Reporters == 0) != e.Load.zero() {
					t.Fatalf("%s %+v", name, e)
				}
			}
			// the per-reporter view adds up to the per-endpoint one
			rs, ok := s.Reports(name, now)
			sum := s.Cluster(name, now)
			if !ok || len(rs.Reporters) > 2 || len(rs.Endpoints) != len(sum) {
				t.Fatalf("%s: reports %+v", name, rs)
			}
			for _, r := range rs.Reporters {
				var w uint64
				for _, l := range r.Loads {
					w += l.Weight()
				}
				if w > maxReq {
					t.Fatalf("%s: reporter %s weighs %d, over the cap %d", name, r.ID, w, maxReq)
				}
			}
			for i := range sum {
				var l Load
				for _, r := range rs.Reporters {
					l.plus(r.Loads[i])
				}
				if l != sum[i].Load {
					t.Fatalf("%s endpoint %d: reporters add up to %+v, the cluster says %+v", name, i, l, sum[i].Load)
				}
			}
		}
	})
}
