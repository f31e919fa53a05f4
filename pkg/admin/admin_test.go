package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/server"
)

func TestAdminEndpoints(t *testing.T) {
	d := topology.NewDirectory()
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy()})
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-a"}, Upstream: "web",
		Endpoints: []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1}}})
	if _, err := d.Apply(b); err != nil {
		t.Fatal(err)
	}
	ready := false
	m := metrics.New()
	m.Revision.Set(1)
	srv := httptest.NewServer(Handler(Sources{
		Ready: func() (bool, string) {
			if !ready {
				return false, "no snapshot published yet"
			}
			return true, ""
		},
		Snapshot: d.Current,
		Clients:  func() []server.Client { return []server.Client{{Stream: 1, NodeID: "n1", Kind: server.KindGRPC}} },
		Metrics:  m,
	}))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 503, "no snapshot published yet"},
		{"/metrics", 200, "poise_topology_revision 1"},
		{"/debug/explain?upstream=shop/web", 200, `"name": "web"`},
		{"/debug/explain?upstream=shop/nope", 404, "not found in revision 1"},
		{"/debug/explain?upstream=a/b/c", 400, "want NAMESPACE/NAME"},
		{"/debug/clients", 200, `"nodeId": "n1"`},
		{"/debug/pprof/", 200, "goroutine"},
	} {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	ready = true
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz = %d once ready", code)
	}
	_, body := get("/debug/explain")
	var rep explain.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil || len(rep.Upstreams) != 1 || rep.Upstreams[0].Priorities[0].Load != weights.Million {
		t.Errorf("explain JSON: %v %+v", err, rep)
	}
}

func TestExplainRouteEndpoint(t *testing.T) {
	set, err := manifest.Load("../../examples/spatial")
	if err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(set.Batch); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: d.Current,
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()
	get := func(query string) (int, string) {
		resp, err := http.Get(srv.URL + "/debug/explain-route?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("domain=cadastre&product=parcels&bbox=8,48,9,49")
	var rep explain.RouteReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if rep.Result.Status != 200 || rep.Result.Reason != "locality" || rep.Result.Replica != "eu-central" || rep.Namespace != "geo" {
		t.Errorf("result %+v", rep.Result)
	}
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"domain=cadastre", http.StatusBadRequest, "domain and product are required"},
		{"domain=roads&product=parcels", http.StatusNotFound, "no SpatialDomain of that name"},
		{"domain=geo/roads&product=parcels", http.StatusNotFound, "no such SpatialDomain"},
	} {
		if code, body := get(tc.query); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s", tc.query, code, body)
		}
	}
}

// The health handler serves probes and scrapers and none of the debug
// endpoints, which show every endpoint address and profiles.
func TestHealthHandlerServesNoDebug(t *testing.T) {
	m := metrics.New()
	m.Revision.Set(7)
	srv := httptest.NewServer(HealthHandler(Sources{
		Ready:    func() (bool, string) { return true, "" },
		Snapshot: topology.NewDirectory().Current,
		Clients:  func() []server.Client { return nil },
		Metrics:  m,
	}))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200,
		"/debug/explain": 404, "/debug/clients": 404, "/debug/pprof/": 404, "/debug/explain-route": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// /readyz stays 200 while the last good snapshot serves, and says what an
// operator must look at below "ok".
func TestReadyzShowsWarnings(t *testing.T) {
	warnings := []string{"the latest manifest change is refused; revision 3 keeps serving: read manifest x.yaml: not a regular file"}
	srv := httptest.NewServer(HealthHandler(Sources{
		Ready:    func() (bool, string) { return true, "" },
		Warnings: func() []string { return warnings },
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\nwarning: "+warnings[0]+"\n" {
		t.Fatalf("GET /readyz = %d %q", resp.StatusCode, body)
	}
}
