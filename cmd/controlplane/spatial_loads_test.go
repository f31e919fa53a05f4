package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/testkit"
)

// spatialLoads is a domain with loadReporting (interval 2s): a replica in
// eu-west and one in us-east, a product either may serve (tiles), beside a
// domain without.
var spatialLoads = filepath.Join("..", "..", "pkg", "signals", "loadreport", "testdata", "spatial.yaml")

func endpointIssued(cluster, addr string, issued uint64) *endpoint.ClusterStats {
	return &endpoint.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{
		UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
			TotalIssuedRequests: issued, TotalSuccessfulRequests: issued}}}}}
}

// TestSpatialLoads: the replica and pool clusters of a SpatialDomain with
// loadReporting carry lrs_server self; Envoys in eu-west and us-east report
// on them over LRS; /metrics counts the requests by client and replica
// region with the cross-region share, and /debug/explain-route shows them.
func TestSpatialLoads(t *testing.T) {
	t.Parallel()
	manifest, err := os.ReadFile(spatialLoads)
	if err != nil {
		t.Fatal(err)
	}
	path := write(t, t.TempDir(), "maps.yaml", string(manifest))
	a := startPlaneOn(t, path)

	// an Envoy's CDS: the domain's clusters report load, the Upstreams' own do not
	lrsOf := lrsServers(t, a.XDS, &core.Node{Id: "envoy-eu", UserAgentName: "envoy"})
	want := map[string]bool{"geo/maps-eu": false, "geo/maps-us": false,
		"spatial:geo:maps:eu": true, "spatial:geo:maps:us": true, "spatial-pool:geo:maps:tiles": true}
	for name, w := range want {
		if got, ok := lrsOf[name]; !ok || got != w {
			t.Errorf("cluster %s: lrs_server self %v (published %v), want %v", name, got, ok, w)
		}
	}

	conn, err := grpc.NewClient(a.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clusters := []*endpoint.ClusterStats{{ClusterName: "spatial:geo:maps:eu"}, {ClusterName: "spatial:geo:maps:us"},
		{ClusterName: "spatial-pool:geo:maps:tiles"}}
	report := func(id, region string, stats ...*endpoint.ClusterStats) {
		t.Helper()
		st, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: id, Locality: &core.Locality{Region: region, Zone: region + "-1a"}},
			ClusterStats: clusters}); err != nil {
			t.Fatal(err)
		}
		answer, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if names := []string{"spatial-pool:geo:maps:tiles", "spatial:geo:maps:eu", "spatial:geo:maps:us"}; !slices.Equal(answer.Clusters, names) ||
			answer.GetLoadReportingInterval().AsDuration() != 2*time.Second {
			t.Fatalf("answer = %v", answer)
		}
		if err := st.Send(&lrs.LoadStatsRequest{ClusterStats: stats}); err != nil {
			t.Fatal(err)
		}
	}
	// eu-west: 30 to its own replica, 10 through the pool to us-east;
	// us-east: 45 to its own, 15 to eu-west's
	report("envoy-eu", "eu-west", endpointIssued("spatial:geo:maps:eu", "10.20.0.1", 30), endpointIssued("spatial-pool:geo:maps:tiles", "10.30.0.1", 10))
	report("envoy-us", "us-east", endpointIssued("spatial:geo:maps:us", "10.30.0.1", 45), endpointIssued("spatial:geo:maps:eu", "10.20.0.1", 15))

	// reports are stored asynchronously: wait for /metrics to show them
	wantMetrics := []string{
		`poise_spatial_requests_total{client_region="eu-west",domain="geo/maps",replica_region="eu-west"} 30`,
		`poise_spatial_requests_total{client_region="eu-west",domain="geo/maps",replica_region="us-east"} 10`,
		`poise_spatial_requests_total{client_region="us-east",domain="geo/maps",replica_region="eu-west"} 15`,
		`poise_spatial_requests_total{client_region="us-east",domain="geo/maps",replica_region="us-east"} 45`,
		`poise_spatial_cross_region_share{domain="geo/maps"} 0.25`,
	}
	testkit.Eventually(t, 10*time.Second, "the spatial series on /metrics", func() (bool, string) {
		body := get(t, "http://"+a.Admin+"/metrics")
		missing := slices.DeleteFunc(slices.Clone(wantMetrics), func(line string) bool { return strings.Contains(body, line+"\n") })
		if len(missing) == 0 {
			return true, ""
		}
		var got []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "poise_spatial_") {
				got = append(got, line)
			}
		}
		return false, fmt.Sprintf("/metrics lacks %q; has:\n%s", missing, strings.Join(got, "\n"))
	})

	var rep explain.RouteReport
	if err := json.Unmarshal([]byte(get(t, "http://"+a.Admin+"/debug/explain-route?domain=maps&product=tiles&bbox=8,48,9,49")), &rep); err != nil {
		t.Fatal(err)
	}
	l := rep.Loads
	if l == nil || !l.Reporting || l.Total != 100 || l.CrossRegion != 25 || l.CrossRegionShare == nil || *l.CrossRegionShare != 0.25 ||
		l.Reporters != 2 || len(l.Requests) != 4 || l.Requests[1].ClientRegion != "eu-west" || l.Requests[1].ReplicaRegion != "us-east" ||
		l.Requests[1].Requests != 10 {
		t.Fatalf("explain-route loads = %+v", l)
	}
	wantStep := "loads: last 30s, 2 client(s), 100 requests by client→replica region: eu-west→eu-west 30, eu-west→us-east 10, " +
		"us-east→eu-west 15, us-east→us-east 45; cross-region 25.0 % (25)"
	if last := rep.Steps[len(rep.Steps)-1]; last != wantStep {
		t.Errorf("last step %q, want %q", last, wantStep)
	}

	// loadReporting removed: no upstream changes, yet the domain's clusters
	// leave the catalog and its counters go
	write(t, filepath.Dir(path), "maps.yaml", strings.Replace(string(manifest), "  loadReporting: {interval: 2s}\n", "", 1))
	testkit.Eventually(t, 10*time.Second, "loadReporting removed: no more reporting", func() (bool, string) {
		body := get(t, "http://"+a.Admin+"/metrics")
		var rep explain.RouteReport
		if err := json.Unmarshal([]byte(get(t, "http://"+a.Admin+"/debug/explain-route?domain=maps&product=tiles")), &rep); err != nil {
			t.Fatal(err)
		}
		return !strings.Contains(body, "poise_spatial_") && rep.Loads != nil && !rep.Loads.Reporting, fmt.Sprintf("still reporting: loads %+v", rep.Loads)
	})
}

// lrsServers is the CDS a new ADS stream of node receives: whether each
// cluster names the control plane as its lrs_server.
func lrsServers(t *testing.T, xds string, node *core.Node) map[string]bool {
	t.Helper()
	ads := adsStream(t, xds)
	if err := ads.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range resp.Resources {
		var c cluster.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out[c.Name] = c.GetLrsServer().GetSelf() != nil
	}
	return out
}

func get(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", url, r.StatusCode, body, err)
	}
	return string(body)
}
