package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/golden"
)

// snapshotOf is the current snapshot of the manifests of paths.
func snapshotOf(t *testing.T, paths ...string) func() *topology.Snapshot {
	t.Helper()
	set, err := manifest.Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(set.Batch); err != nil {
		t.Fatal(err)
	}
	return d.Current
}

// examplesServer serves the admin port on the bundled examples.
func examplesServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: snapshotOf(t, "../../examples", "../../examples/spatial"),
		Clients: func() []server.Client { return []server.Client{{Stream: 1, NodeID: "envoy-eu-1"}} },
		Serving: func(string, int, func(string) bool) []server.ClientServing { return nil },
		Metrics: metrics.New(metrics.Options{}).Gatherer(), Version: "v9.8.7", Instance: "5d1c8e0f2a9b7c31"}))
	t.Cleanup(srv.Close)
	return srv
}

// TestIndex: GET / lists the endpoints of the port, one a line with what
// it is, as text or JSON (by parameter or Accept); the metrics port lists
// its own only.
func TestIndex(t *testing.T) {
	srv := examplesServer(t)
	code, text := httpGet(t, srv.URL+"/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d %s", code, text)
	}
	golden.Check(t, "index", text)

	var body struct {
		Endpoints []listed `json:"endpoints"`
	}
	for _, get := range []func() string{
		func() string { _, b := httpGet(t, srv.URL+"/?format=json"); return b },
		func() string {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
			req.Header.Set("Accept", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		},
	} {
		if err := json.Unmarshal([]byte(get()), &body); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(text, "\n"); len(body.Endpoints) != n || body.Endpoints[0].Path != "/" {
			t.Errorf("JSON lists %d endpoints, text %d lines", len(body.Endpoints), n)
		}
		for _, e := range body.Endpoints {
			if e.Path == "/debug/explain" && strings.Join(e.Params, ",") != "upstream,from,demand" {
				t.Errorf("/debug/explain's params %v", e.Params)
			}
		}
	}
	if code, b := httpGet(t, srv.URL+"/?format=yaml"); code != http.StatusBadRequest || !strings.Contains(b, `format "yaml": want text or json`) {
		t.Errorf("GET /?format=yaml = %d %s", code, b)
	}
	if code, b := httpGet(t, srv.URL+"/nothing-here"); code != http.StatusNotFound {
		t.Errorf("GET /nothing-here = %d %s", code, b)
	}

	health := httptest.NewServer(HealthHandler(Sources{Ready: func() (bool, string) { return true, "" }}))
	defer health.Close()
	if _, b := httpGet(t, health.URL+"/"); strings.Count(b, "\n") != 3 || strings.Contains(b, "/debug") || !strings.Contains(b, "/readyz") {
		t.Errorf("the metrics port's index:\n%s", b)
	}
}

// TestEveryEndpointIsServed: each path of the table is registered on the
// admin port (none is listed that does not exist).
func TestEveryEndpointIsServed(t *testing.T) {
	mux := Handler(Sources{Metrics: metrics.New(metrics.Options{}).Gatherer()}).(*http.ServeMux)
	for _, e := range endpoints {
		path := strings.ReplaceAll(e.path, "{name}", "map.js")
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if _, pattern := mux.Handler(req); pattern == "" || (pattern != "GET /{$}" && !strings.HasSuffix(pattern, e.path)) {
			t.Errorf("%s: served by %q", e.path, pattern)
		}
	}
}

// TestUnknownParameters: every strict endpoint refuses a query parameter it
// does not take with 400, naming it and, for a slip, the one meant; one it
// takes is not refused for its name.
func TestUnknownParameters(t *testing.T) {
	srv := examplesServer(t)
	for _, e := range endpoints {
		if !e.strict {
			continue
		}
		code, body := httpGet(t, srv.URL+e.path+"?bogus=1")
		if code != http.StatusBadRequest || !strings.Contains(body, `unknown query parameter \"bogus\"`) && !strings.Contains(body, `unknown query parameter "bogus"`) {
			t.Errorf("%s?bogus=1 = %d %s", e.path, code, body)
		}
		for _, p := range e.params {
			if code, body := httpGet(t, srv.URL+e.path+"?"+p+"=x"); strings.Contains(body, "unknown query parameter") {
				t.Errorf("%s?%s=x = %d %s: a parameter it takes is refused", e.path, p, code, body)
			}
		}
	}
	for _, tc := range []struct {
		path string
		want string
	}{
		{"/debug/explain?upstrem=shop/checkout", `unknown query parameter \"upstrem\" (did you mean \"upstream\"?): this endpoint takes upstream, from, demand`},
		{"/debug/explain?upstream=shop/checkout&form=eu-west/eu-west-1a", `unknown query parameter \"form\" (did you mean \"from\"?)`},
		{"/debug/explain-route?domain=cadastre&product=parcels&bobx=8,48,9,49", `unknown query parameter \"bobx\" (did you mean \"bbox\"?)`},
		{"/debug/config?node=envoy-eu-1&resrouce=shop/checkout", `unknown query parameter \"resrouce\" (did you mean \"resource\"?)`},
		{"/debug/clients?node=envoy-eu-1", `unknown query parameter \"node\": this endpoint takes none`},
		{"/debug/loads?clusters=shop/checkout", `unknown query parameter \"clusters\" (did you mean \"cluster\"?)`},
		{"/debug/explain?" + strings.Repeat("x", 100) + "=1", `unknown query parameter \"` + strings.Repeat("x", 64) + `…\"`},
		{"/?fromat=json", `unknown query parameter "fromat" (did you mean "format"?)`},
	} {
		if code, body := httpGet(t, srv.URL+tc.path); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s = %d %s, want 400 containing %s", tc.path, code, body, tc.want)
		}
	}
}

// TestDidYouMean: a name that is not there is answered with the one most
// likely meant: an upstream of that name in another namespace, a node id
// one slip away.
func TestDidYouMean(t *testing.T) {
	srv := examplesServer(t)
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/debug/explain?upstream=checkout", http.StatusNotFound, "upstream default/checkout not found in revision 1; did you mean shop/checkout?"},
		{"/debug/explain?upstream=shop/chekout", http.StatusNotFound, "; did you mean shop/checkout?"},
		{"/debug/explain?upstream=shop/zzz", http.StatusNotFound, `not found in revision 1"`},
		{"/debug/explain-route?domain=cadastr&product=parcels", http.StatusNotFound, "no SpatialDomain of that name; did you mean cadastre?"},
		{"/debug/config?node=envoy-eu-2", http.StatusNotFound, `no xDS client with node id \"envoy-eu-2\" is connected to this replica; did you mean envoy-eu-1?`},
	} {
		if code, body := httpGet(t, srv.URL+tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s = %d %s, want %d containing %s", tc.path, code, body, tc.code, tc.want)
		}
	}
}

// TestDebugVersion: the version the replica runs, for controlplane status.
func TestDebugVersion(t *testing.T) {
	srv := examplesServer(t)
	code, body := httpGet(t, srv.URL+"/debug/version")
	var v Version
	if err := json.Unmarshal([]byte(body), &v); err != nil || code != http.StatusOK {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if v != (Version{Version: "v9.8.7", Instance: "5d1c8e0f2a9b7c31", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}) {
		t.Errorf("/debug/version = %+v", v)
	}
}
