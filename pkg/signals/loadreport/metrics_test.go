package loadreport_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
)

func issued(cluster, addr string, n uint64) *lrs.LoadStatsRequest {
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{ClusterName: cluster,
		UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
			TotalIssuedRequests: n}}}}}}}
}

// TestSpatialMetrics: the counters and the share read the store at each
// scrape; before any report there are no series.
func TestSpatialMetrics(t *testing.T) {
	names := []string{"poise_spatial_requests_total", "poise_spatial_cross_region_share"}
	// the domain the load-report store's own tests use
	set, err := manifest.Load(filepath.Join("testdata", "spatial.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	store := loadreport.NewStore(loadreport.Config{})
	store.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(loadreport.NewSpatialMetrics(store))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), names...); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	eu := store.Open(loadreport.Reporter{ID: "envoy-eu", Region: "eu-west"}, now)
	us := store.Open(loadreport.Reporter{ID: "envoy-us", Region: "us-east"}, now)
	eu.Report(issued("spatial:geo:maps:eu", "10.20.0.1", 30), now)
	eu.Report(issued("spatial-pool:geo:maps:tiles", "10.30.0.1", 10), now)
	us.Report(issued("spatial:geo:maps:us", "10.30.0.1", 60), now)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP poise_spatial_cross_region_share Share (0 to 1) of a SpatialDomain's reported requests over the load-report window (30 s) that a replica outside the client's region served, of the requests of clients with a known region; absent while there are none.
# TYPE poise_spatial_cross_region_share gauge
poise_spatial_cross_region_share{domain="geo/maps"} 0.1
# HELP poise_spatial_requests_total Requests the Envoys of the spatial listener reported (LRS total_issued_requests) to the replica and pool clusters of a SpatialDomain with spec.loadReporting, by domain (namespace/name), the reporting client's locality region and the region of the replica that served them. A client without a region counts as ~none; past 32 client regions a domain counts the rest as ~other. Each control-plane replica counts the reports of its own clients: sum over replicas.
# TYPE poise_spatial_requests_total counter
poise_spatial_requests_total{client_region="eu-west",domain="geo/maps",replica_region="eu-west"} 30
poise_spatial_requests_total{client_region="eu-west",domain="geo/maps",replica_region="us-east"} 10
poise_spatial_requests_total{client_region="us-east",domain="geo/maps",replica_region="us-east"} 60
`), names...); err != nil {
		t.Error(err)
	}
}
