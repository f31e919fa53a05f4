package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/test/testkit"
)

// TestLoadReports: an Upstream with spec.loadReporting is published with
// lrs_server self; a client's LRS stream is answered with that cluster
// (not one without load reporting) and the Upstream's interval, and the
// report it sends for one endpoint shows in /debug/loads.
func TestLoadReports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := write(t, dir, "shop.yaml", upstream("web")+"spec:\n  loadReporting: {interval: 2s}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.1.0.1, port: 8080}, {address: 10.1.0.2, port: 8080}]")+"---\n"+
		upstream("quiet")+"---\n"+endpointSet("quiet-a", "quiet", "a", "[{address: 10.2.0.1, port: 8080}]"))
	a := startPlaneOn(t, path)

	// the Cluster names the control plane as its LRS server
	lrsOf := lrsServers(t, a.XDS, &core.Node{Id: "envoy-lrs-1"})
	if !lrsOf["shop/web"] || lrsOf["shop/quiet"] || len(lrsOf) != 2 {
		t.Fatalf("lrs_server self by cluster: %v", lrsOf)
	}

	stream := lrsStream(t, a.XDS)
	if err := stream.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "envoy-lrs-1", Locality: &core.Locality{Region: "eu", Zone: "a"}},
		ClusterStats: []*endpoint.ClusterStats{{ClusterName: "shop/web"}, {ClusterName: "shop/quiet"}}}); err != nil {
		t.Fatal(err)
	}
	answer, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(answer.Clusters, []string{"shop/web"}) || answer.GetLoadReportingInterval().AsDuration() != 2*time.Second ||
		!answer.ReportEndpointGranularity {
		t.Fatalf("answer = %v", answer)
	}
	if err := stream.Send(endpointReport("shop/web", "10.1.0.2", 9, 6, 3)); err != nil {
		t.Fatal(err)
	}

	// the report is stored asynchronously: wait for the admin view to show it
	var got admin.Loads
	testkit.Eventually(t, 10*time.Second, "the report shows in /debug/loads", func() (bool, string) {
		r, err := http.Get("http://" + a.Admin + "/debug/loads?cluster=shop/web")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("/debug/loads: %d %s", r.StatusCode, body)
		}
		got = admin.Loads{}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		return len(got.Endpoints) == 2 && got.Endpoints[1].Issued > 0, string(body)
	})
	if e := got.Endpoints[1]; e.Address != "10.1.0.2" || e.Port != 8080 || e.Issued != 9 || e.Successes != 6 || e.Errors != 3 || e.Reporters != 1 {
		t.Errorf("10.1.0.2: %+v", e)
	}
	if e := got.Endpoints[0]; e.Address != "10.1.0.1" || e.Issued != 0 || e.Reporters != 0 {
		t.Errorf("10.1.0.1, not reported on: %+v", e)
	}
	// shop/quiet, named in the first request, is not published with load reporting
	if got.Drops.UnknownCluster != 1 {
		t.Errorf("drops = %+v", got.Drops)
	}
}
