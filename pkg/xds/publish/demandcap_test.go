package publish

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/loadreport"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xdsname"
)

// issuedTo is a load report of web: issued (and as many successful)
// requests to each endpoint named "10.0.Z.E" (port 80).
func issuedTo(issued map[string]uint64) *lrs.LoadStatsRequest {
	loc := &endpoint.UpstreamLocalityStats{}
	for _, addr := range slices.Sorted(maps.Keys(issued)) {
		loc.UpstreamEndpointStats = append(loc.UpstreamEndpointStats, &endpoint.UpstreamEndpointStats{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 80}}}},
			TotalIssuedRequests: issued[addr], TotalSuccessfulRequests: issued[addr],
		})
	}
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{ClusterName: xdsname.Cluster(web),
		UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{loc}}}}
}

// One workload instance claiming a huge request count moves its zone's
// load demand only as far as its cap allows. Three instances of eu/a and
// one of eu/b report maxReq requests each (750 : 250); a fifth, in eu/b,
// claims 10^12. The load-report store keeps it at maxReq, so the applied
// demand is the shares of 3 × maxReq : 2 × maxReq, within the bound one
// capped instance can reach; the shares of what it claimed would have
// given eu/b all but 1 per mille.
func TestLoadDemandOfOneInstanceIsCapped(t *testing.T) {
	const maxReq, claimed = 1000, 1_000_000_000_000
	c, p, clk, snap := balancedOnClock(t)
	store := loadreport.NewStore(loadreport.Config{MaxRequests: maxReq})
	store.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	p.SetLoadDemand(LoadDemand{Bucket: store.Window() / loadreport.Buckets, Window: store.Window(), Requests: store.ClassRequests})
	for _, s := range []*xdscache.Stream{client(t, c, "eu", "a", 0), client(t, c, "eu", "b", 0)} {
		defer s.Close()
	}
	honest := map[string]uint64{"eu/a": 0, "eu/b": 0}
	for i, zone := range []string{"a", "a", "a", "b"} {
		st := store.Open(loadreport.Reporter{ID: fmt.Sprintf("pod:%d", i), Region: "eu", Zone: zone}, clk.t)
		defer st.Close(clk.t)
		st.Report(issuedTo(map[string]uint64{"10.0.0.0": maxReq / 2, "10.0.1.0": maxReq / 2}), clk.t)
		honest["eu/"+zone] += maxReq
	}
	flood := store.Open(loadreport.Reporter{ID: "cert:flood", Region: "eu", Zone: "b"}, clk.t)
	defer flood.Close(clk.t)
	flood.Report(issuedTo(map[string]uint64{"10.0.1.0": claimed}), clk.t)

	p.cls.censusAt = clk.t
	p.refreshClasses()
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	got, from := p.AppliedDemandFrom(web)
	capped, total := loadShares(map[string]uint64{"eu/a": honest["eu/a"], "eu/b": honest["eu/b"] + maxReq})
	if !from.LoadReports || from.Requests != total || !slices.Equal(got, capped) {
		t.Fatalf("applied %v from %+v, want %v from load reports of %d requests", got, from, capped, total)
	}
	// the most one capped instance can give its zone: ⌈1000 × (b + cap) / (all + cap)⌉
	all := honest["eu/a"] + honest["eu/b"]
	bound := (DemandScale*(honest["eu/b"]+maxReq) + all + maxReq - 1) / (all + maxReq)
	alone, _ := loadShares(honest)
	uncapped, _ := loadShares(map[string]uint64{"eu/a": honest["eu/a"], "eu/b": honest["eu/b"] + claimed})
	b := affinity.Zone{Region: "eu", Zone: "b"}
	share := func(d []affinity.Demand) uint64 {
		i := slices.IndexFunc(d, func(x affinity.Demand) bool { return x.Zone == b })
		if i < 0 {
			t.Fatalf("no eu/b in %v", d)
		}
		return d[i].Weight
	}
	if share(got) > bound || share(got) <= share(alone) {
		t.Errorf("eu/b's share %d per mille: want above the honest %d and at most the capped bound %d", share(got), share(alone), bound)
	}
	if share(uncapped) <= bound {
		t.Errorf("uncapped, eu/b would have %d per mille, within the bound %d: the test shows nothing", share(uncapped), bound)
	}
	if d := store.Drops(); d.Capped != claimed-maxReq || d.CappedReports != 1 {
		t.Errorf("drops = %+v, want the flood's excess counted", d)
	}
}
