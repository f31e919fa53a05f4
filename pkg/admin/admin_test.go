package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/explain"
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
	m := metrics.New(metrics.Options{})
	m.Source.Revision.Set(1)
	srv := httptest.NewServer(Handler(Sources{
		Ready: func() (bool, string) {
			if !ready {
				return false, "no snapshot published yet"
			}
			return true, ""
		},
		Snapshot: d.Current,
		Clients:  func() []server.Client { return []server.Client{{Stream: 1, NodeID: "n1", Kind: server.KindGRPC}} },
		Metrics:  m.Gatherer(),
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
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: snapshotOf(t, "../../examples/spatial"),
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()
	get := func(query string) (int, string) { return httpGet(t, srv.URL+"/debug/explain-route?"+query) }
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
	m := metrics.New(metrics.Options{})
	m.Source.Revision.Set(7)
	srv := httptest.NewServer(HealthHandler(Sources{
		Ready:    func() (bool, string) { return true, "" },
		Snapshot: topology.NewDirectory().Current,
		Clients:  func() []server.Client { return nil },
		Metrics:  m.Gatherer(),
	}))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200,
		"/debug/explain": 404, "/debug/clients": 404, "/debug/pprof/": 404, "/debug/explain-route": 404, "/map": 404} {
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

// /debug/explain?from= is the live twin of explain --from: the class of one
// client zone, divided by the demand the plane applies, else by the demand
// parameter (docs/weights.md, worked example 6).
func TestExplainFrom(t *testing.T) {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy(),
		Affinity: &topology.Affinity{Mode: affinity.Balanced}})
	for i, zone := range []string{"a", "b"} {
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-" + zone}, Upstream: "web",
			Locality: weights.Locality{Region: "eu", Zone: zone}, Endpoints: []topology.Endpoint{{Address: "10.0.0." + string(rune('1'+i)), Port: 80, Weight: 1}}})
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(b); err != nil {
		t.Fatal(err)
	}
	// apply applies a demand to shop/web, as the live plane's demand signal does
	apply := func(a topology.AppliedDemand) {
		var b topology.Batch
		b.PutDemand(topology.Key{Namespace: "shop", Name: "web"}, a)
		if _, err := d.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: d.Current,
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()
	get := func(query string) (int, string) { return httpGet(t, srv.URL+"/debug/explain?"+query) }
	class := func(query string) (explain.Report, *explain.Class) {
		t.Helper()
		code, body := get(query)
		var rep explain.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK || len(rep.Upstreams) != 1 {
			t.Fatalf("%s: %d %s: %v", query, code, body, err)
		}
		return rep, rep.Upstreams[0].Class
	}
	traffic := func(c *explain.Class) []uint64 {
		var out []uint64
		for _, l := range c.Split.Priorities[0].Localities {
			out = append(out, l.Traffic)
		}
		return out
	}

	rep, c := class("from=eu/a/rack-1&demand=eu/b=1,eu/a=3&upstream=shop/web")
	if *rep.From != (explain.From{Region: "eu", Zone: "a", SubZone: "rack-1"}) || len(rep.Demand) != 2 || rep.Demand[0].Zone != "a" {
		t.Errorf("from %+v, demand %+v", rep.From, rep.Demand)
	}
	if c.Balanced.DemandSource != explain.DemandGiven || !slices.Equal(traffic(c), []uint64{666_667, 333_333}) {
		t.Errorf("given demand: %s, traffic %v", c.Balanced.DemandSource, traffic(c))
	}
	if _, c = class("from=eu/a"); !c.ReceivesNone || c.Reason != "no client declares demand" {
		t.Errorf("no demand: %+v", c)
	}

	// the applied demand wins over the parameter
	apply(topology.AppliedDemand{Zones: []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 3}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: 1}}})
	for _, q := range []string{"from=eu/b", "from=eu/b&demand=eu/b=5,eu/a=1"} {
		if _, c = class(q); c.Balanced.DemandSource != explain.DemandClients || !c.Balanced.KeepsAll || !slices.Equal(traffic(c), []uint64{0, 1_000_000}) {
			t.Errorf("%s: %s, traffic %v", q, c.Balanced.DemandSource, traffic(c))
		}
	}
	if _, c = class("from=us/x"); !c.ReceivesNone || c.Reason != "no demand is counted for us/x yet" {
		t.Errorf("a zone without applied demand: %+v", c)
	}
	if code, body := get(""); code != http.StatusOK || strings.Contains(body, `"from": {`) || strings.Contains(body, `"demand": [`) || strings.Contains(body, `"class"`) {
		t.Errorf("without from: %d %s", code, body)
	}
	// from load reports: the source, the requests and the window say so
	apply(topology.AppliedDemand{Zones: []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 750}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: 250}},
		LoadReports: true, Requests: 400, Window: 30 * time.Second})
	if _, c = class("from=eu/a"); c.Balanced.DemandSource != explain.DemandLoadReports || c.Balanced.DemandRequests != 400 ||
		c.Balanced.DemandWindowSeconds != 30 || c.Balanced.Demand != 1000 || !slices.Equal(traffic(c), []uint64{666_667, 333_333}) {
		t.Errorf("load reports: %+v, traffic %v", c.Balanced, traffic(c))
	}
	apply(topology.AppliedDemand{})

	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"from=eu", http.StatusBadRequest, `from \"eu\": want REGION/ZONE[/SUBZONE]`},
		{"from=", http.StatusBadRequest, `from \"\": want REGION/ZONE[/SUBZONE]`},
		{"from=eu/a&from=eu/b", http.StatusBadRequest, "from is given 2 times, at most once"},
		{"demand=eu/a=1", http.StatusBadRequest, "demand needs from=REGION/ZONE"},
		{"from=eu/a&demand=eu/a=0", http.StatusBadRequest, `weight \"0\": want an integer 1..1000000`},
		{"from=eu/a&demand=", http.StatusBadRequest, "demand empty"},
		{"from=eu/a&demand=" + strings.Repeat("eu/a=1,", 64) + "eu/b=1", http.StatusBadRequest, "demand 65 zones, at most 64"},
		{"from=eu/" + strings.Repeat("z", 129), http.StatusBadRequest, "the zone is 129 bytes, at most 128"},
		{"from=eu/c&demand=eu/a=1", http.StatusBadRequest, "demand: upstream shop/web: localityAffinity Balanced: the demand has no entry for eu/c"},
		// (revisions 2 to 4: the demand applied, moved and withdrawn)
		{"from=eu/a&upstream=shop/nope", http.StatusNotFound, "not found in revision 4"},
	} {
		if code, body := get(tc.query); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d containing %q", tc.query, code, body, tc.code, tc.want)
		}
	}
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// /debug/clusters and /debug/crds list what Sources.Clusters and
// Sources.CRDs return, and an empty list without them (the files source has
// no remote clusters and reads no CRD).
func TestDebugLists(t *testing.T) {
	for _, tc := range []struct {
		path     string
		clusters func() any
		crds     func() any
		want     string
	}{
		{"/debug/clusters", nil, nil, `{"clusters":[]}`},
		{"/debug/clusters", func() any { return []map[string]string{{"name": "eu-2", "state": "Stale"}} }, nil, `{"clusters":[{"name":"eu-2","state":"Stale"}]}`},
		{"/debug/crds", nil, nil, `{"crds":[]}`},
		{"/debug/crds", nil, func() any { return []map[string]string{{"name": "upstreams.poise.dev", "state": "Outdated"}} },
			`{"crds":[{"name":"upstreams.poise.dev","state":"Outdated"}]}`},
	} {
		srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Clusters: tc.clusters, CRDs: tc.crds}))
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != 200 || strings.Join(strings.Fields(string(body)), "") != tc.want {
			t.Errorf("GET %s = %d %s, want %s", tc.path, resp.StatusCode, body, tc.want)
		}
	}
}

// TestExplainKeyEndpoint: /debug/explain-key answers as explain --key
// does, on the live snapshot, and names what is wrong with a question.
func TestExplainKeyEndpoint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: snapshotOf(t, "../../cmd/controlplane/testdata/keys"),
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()
	get := func(query string) (int, string) { return httpGet(t, srv.URL+"/debug/explain-key?"+query) }
	code, body := get("upstream=keys/keyed-ring&key=42&key=Bearer%2042")
	var rep explain.KeyReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if len(rep.Requests) != 2 || len(rep.Clients) != 3 {
		t.Fatalf("%d requests, %d clients: %s", len(rep.Requests), len(rep.Clients), body)
	}
	for _, a := range rep.Requests {
		for i, p := range a.Picks {
			// the rewrite makes the two requests one key, in every client
			if p.Key != "42" || p.Endpoint == "" || p.Endpoint != rep.Requests[0].Picks[i].Endpoint {
				t.Errorf("request %s, %s: %+v", a.Request, p.Client, p)
			}
		}
	}
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"upstream=keys/nope&key=1", http.StatusNotFound, "not found in revision"},
		{"upstream=keys/plain-ring&key=1", http.StatusBadRequest, "no requestAffinity"},
		{"upstream=keys/keyed-ring&header=x-user", http.StatusBadRequest, "want NAME=VALUE"},
		{"upstream=keys/keyed-ring&key=1&grpc-ring-cap=8388609", http.StatusBadRequest, "grpc-ring-cap"},
		{"upstream=keys/keyed-ring&kye=1", http.StatusBadRequest, "kye"},
	} {
		if code, body := get(tc.query); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.query, code, body, tc.code, tc.want)
		}
	}
}
