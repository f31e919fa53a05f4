package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// /debug/loads shows per-endpoint totals and reporters of a cluster with
// load reporting, at most maxLoadEndpoints of them; it refuses a missing
// or malformed cluster and names one without load reporting.
func TestLoadsEndpoint(t *testing.T) {
	var b topology.Batch
	big := topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-a"}, Upstream: "web"}
	for i := range maxLoadEndpoints + 3 {
		big.Endpoints = append(big.Endpoints, topology.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Port: 80, Weight: 1})
	}
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy(), LoadReportInterval: time.Second})
	b.PutEndpointSet(big)
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "quiet"}, Policy: weights.DefaultPolicy()})
	snap, store := loadStore(t, b)
	now := time.Now()
	for _, id := range []string{"envoy-1", "envoy-2"} {
		store.Open(loadreport.Reporter{ID: id, Region: "eu", Zone: "a"}, now).Report(endpointReport("shop/web", "10.0.0.1", 80, 5, 4, 1), now)
	}
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: func() *topology.Snapshot { return snap }, Loads: store}))
	defer srv.Close()
	get := func(path string) (int, string) { return httpGet(t, srv.URL+path) }
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/debug/loads", http.StatusBadRequest, "cluster=NS/NAME is required"},
		{"/debug/loads?cluster=a&cluster=b", http.StatusBadRequest, "cluster=NS/NAME is required"},
		{"/debug/loads?cluster=" + strings.Repeat("a", maxConfigParam+1), http.StatusBadRequest, "at most"},
		{"/debug/loads?cluster=shop/web/x", http.StatusBadRequest, "want NAMESPACE/NAME"},
		{"/debug/loads?cluster=shop/quiet", http.StatusNotFound, "not published with loadReporting"},
	} {
		if code, body := get(tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %s, want %d with %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	code, body := get("/debug/loads?cluster=shop/web")
	if code != http.StatusOK {
		t.Fatalf("GET shop/web = %d %s", code, body)
	}
	var got Loads
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Cluster != "shop/web" || got.Window != "30s" || len(got.Endpoints) != maxLoadEndpoints || got.More != 3 {
		t.Fatalf("answer: cluster %q window %q, %d endpoints and %d more", got.Cluster, got.Window, len(got.Endpoints), got.More)
	}
	e := got.Endpoints[1] // 10.0.0.1, in canonical order
	if e.Address != "10.0.0.1" || e.Issued != 10 || e.Successes != 8 || e.Errors != 2 || e.Reporters != 2 ||
		len(e.Classes) != 1 || e.Classes[0].Class != "eu/a" {
		t.Errorf("10.0.0.1: %+v", e)
	}
	if e := got.Endpoints[0]; e.Issued != 0 || e.Reporters != 0 {
		t.Errorf("an endpoint nobody reported on: %+v", e)
	}
}

// loadStore applies b and returns its snapshot and a load-report store
// whose catalog holds the upstreams of the snapshot with loadReporting.
func loadStore(t *testing.T, b topology.Batch) (*topology.Snapshot, *loadreport.Store) {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	store := loadreport.NewStore(loadreport.Config{})
	store.SetCatalog(loadreport.NewCatalog(nil, snap, func(u *topology.UpstreamState) bool { return u.Upstream.LoadReportInterval > 0 }))
	return snap, store
}

// endpointReport is a load report of one endpoint of a cluster: requests
// issued, and finished successfully or in error.
func endpointReport(cluster, addr string, port uint32, issued, ok, errs uint64) *lrs.LoadStatsRequest {
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{
		ClusterName: cluster, UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}},
			TotalIssuedRequests: issued, TotalSuccessfulRequests: ok, TotalErrorRequests: errs}}}}}}}
}

// /debug/loads adds the upstream's last outlier evaluation where this
// replica decides, bounded like the endpoints.
func TestLoadsShowsOutlierEvaluation(t *testing.T) {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy(), LoadReportInterval: time.Second})
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-a"}, Upstream: "web",
		Endpoints: []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1}}})
	snap, store := loadStore(t, b)
	at := time.Unix(1_800_000_000, 0).UTC()
	var many []outlier.Ejection
	for i := range maxLoadEndpoints + 2 {
		many = append(many, outlier.Ejection{Address: "10.0.0.1", Port: uint32(i), Until: at, Count: 1, Origin: "load reports: 3 clients"})
	}
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: func() *topology.Snapshot { return snap }, Loads: store,
		Outliers: func(k topology.Key) (outlier.Status, bool) {
			if k != (topology.Key{Namespace: "shop", Name: "web"}) {
				return outlier.Status{}, false
			}
			return outlier.Status{EvaluatedAt: at, Reporters: 3, Untrusted: 1, Ejections: many}, true
		}}))
	defer srv.Close()
	code, body := httpGet(t, srv.URL+"/debug/loads?cluster=shop/web")
	if code != http.StatusOK {
		t.Fatalf("GET = %d %s", code, body)
	}
	var got Loads
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if o := got.Outlier; o == nil || o.Untrusted != 1 || o.Reporters != 3 || len(o.Ejections) != maxLoadEndpoints || got.MoreEjections != 2 ||
		o.Ejections[0].Origin != "load reports: 3 clients" || !o.Ejections[0].Until.Equal(at) {
		t.Fatalf("outlier part: %+v, %d more", got.Outlier, got.MoreEjections)
	}
}
