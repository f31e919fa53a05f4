package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/server"
)

// The map is served on the admin port beside /debug/explain: the page, the
// fragment its script swaps in, the version it polls, the assets, with
// bounded queries and a strict content policy.
func TestMapEndpoints(t *testing.T) {
	var b topology.Batch
	for i := range 10 {
		name := fmt.Sprintf("web-%02d", i)
		b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: name}, Policy: weights.DefaultPolicy()})
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: name}, Upstream: name,
			Endpoints: []topology.Endpoint{{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 80, Weight: 1}}})
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(b); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: d.Current,
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/map")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("headers %v", resp.Header)
	}
	for _, tc := range []struct {
		path string
		code int
		want []string
	}{
		{"/map", 200, []string{`<script src="map/assets/map.js">`, `data-name="web-00"`, `data-name="web-07"`, "upstreams 1–8 of 10", `href="map?page=2"`}},
		{"/map?page=2", 200, []string{`data-name="web-08"`, `data-name="web-09"`, "upstreams 9–10 of 10", `href="map"`}},
		{"/map?page=99", 200, []string{"upstreams 9–10 of 10", "page 2 of 2"}},
		{"/map/fragment?page=2", 200, []string{`<div id="map" data-version="1" data-revision="1" data-from="">`}},
		{"/map/version", 200, []string{"1\n"}},
		{"/map/assets/map.js", 200, []string{"map/version"}},
		{"/map/assets/map.css", 200, []string{".spill"}},
		{"/map/assets/map.tmpl", 404, []string{"not found"}},
		{"/map?page=0", 400, []string{"page &#34;0&#34;: want an integer 1..1048576"}},
		{"/map?page=1&page=2", 400, []string{"page is given 2 times"}},
		{"/map/version?page=x", 400, []string{`page "x"`}},
		{"/map?from=eu", 400, []string{"from &#34;eu&#34;: want REGION/ZONE[/SUBZONE]"}},
		{"/map/fragment?from=eu/a", 200, []string{`data-from="eu/a"`, "clients in eu/a receive the upstream&#39;s own split"}},
	} {
		code, body := httpGet(t, srv.URL+tc.path)
		if code != tc.code {
			t.Errorf("GET %s = %d, want %d: %.300s", tc.path, code, tc.code, body)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in %.2000s", tc.path, w, body)
			}
		}
	}
	if _, body := httpGet(t, srv.URL+"/map?page=2"); strings.Contains(body, `data-name="web-07"`) {
		t.Error("page 2 draws an upstream of page 1")
	}
}

// The demand a Balanced class is divided by moves without a new revision:
// with a client locality the version follows it, so the page redraws.
func TestMapVersionFollowsDemand(t *testing.T) {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy(),
		Affinity: &topology.Affinity{Mode: affinity.Balanced}})
	for i, zone := range []string{"a", "b"} {
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-" + zone}, Upstream: "web",
			Locality: weights.Locality{Region: "eu", Zone: zone}, Endpoints: []topology.Endpoint{{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 80, Weight: 1}}})
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(b); err != nil {
		t.Fatal(err)
	}
	apply := func(a, b uint64) {
		var batch topology.Batch
		batch.PutDemand(topology.Key{Namespace: "shop", Name: "web"}, topology.AppliedDemand{Zones: []affinity.Demand{
			{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: a}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: b}}})
		if _, err := d.Apply(batch); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, 1)
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: d.Current,
		Clients: func() []server.Client { return nil }}))
	defer srv.Close()
	_, plain := httpGet(t, srv.URL+"/map/version")
	_, v1 := httpGet(t, srv.URL+"/map/version?from=eu/a")
	apply(3, 1) // the demand applied moves, and with it the revision
	_, v2 := httpGet(t, srv.URL+"/map/version?from=eu/a")
	if plain != "2\n" || v1 != plain || v2 != "3\n" {
		t.Errorf("versions: %q, %q, then %q", plain, v1, v2)
	}
	if _, body := httpGet(t, srv.URL+"/map?from=eu/a"); !strings.Contains(body, `<option value="eu/a" selected>eu/a</option>`) ||
		!strings.Contains(body, `data-split="class"`) || !strings.Contains(body, `data-version="`+strings.TrimSpace(v2)+`"`) {
		t.Errorf("the page for eu/a: %.3000s", body)
	}
}

// Where an upstream's clients report their load, the map draws each
// endpoint's share of the requests they reported beside its computed
// share: every reporter's for the upstream's own split, the reporters of
// the zone picked for its class split. The version then moves with the
// load-report bucket too, so the page redraws what they report.
func TestMapShowsObservedLoads(t *testing.T) {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "web"}, Policy: weights.DefaultPolicy(), LoadReportInterval: time.Second})
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-a"}, Upstream: "web",
		Endpoints: []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1}, {Address: "10.0.0.2", Port: 80, Weight: 1}}})
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "quiet"}, Policy: weights.DefaultPolicy()})
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "quiet-a"}, Upstream: "quiet",
		Endpoints: []topology.Endpoint{{Address: "10.0.1.1", Port: 80, Weight: 1}}})
	snap, store := loadStore(t, b)
	now := time.Now()
	store.Open(loadreport.Reporter{ID: "a-1", Region: "eu", Zone: "a"}, now).Report(endpointReport("shop/web", "10.0.0.1", 80, 30, 30, 0), now)
	b1 := store.Open(loadreport.Reporter{ID: "b-1", Region: "eu", Zone: "b"}, now)
	b1.Report(endpointReport("shop/web", "10.0.0.1", 80, 10, 10, 0), now)
	b1.Report(endpointReport("shop/web", "10.0.0.2", 80, 10, 10, 0), now)
	srv := httptest.NewServer(Handler(Sources{Ready: func() (bool, string) { return true, "" }, Snapshot: func() *topology.Snapshot { return snap },
		Clients: func() []server.Client { return nil }, Loads: store}))
	defer srv.Close()
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/map/fragment", []string{
			`data-name="web" data-split="none"`,
			`data-address="10.0.0.1" data-port="80" data-share="500000" data-observed="800000" data-observed-requests="40"`,
			`data-address="10.0.0.2" data-port="80" data-share="500000" data-observed="200000" data-observed-requests="10"`,
			"observed: 50 requests reported by the clients over the last 30s",
			`data-address="10.0.1.1" data-port="80" data-share="1000000" data-reason`}},
		{"/map/fragment?from=eu/a", []string{
			`data-address="10.0.0.1" data-port="80" data-share="500000" data-observed="1000000" data-observed-requests="30"`,
			`data-address="10.0.0.2" data-port="80" data-share="500000" data-observed="0" data-observed-requests="0"`,
			"observed: 30 requests reported by the clients in eu/a over the last 30s"}},
	} {
		code, body := httpGet(t, srv.URL+tc.path)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", tc.path, code, body)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in %.3000s", tc.path, w, body)
			}
		}
	}
	if _, v := httpGet(t, srv.URL+"/map/version"); !regexp.MustCompile(`^1\.[0-9]+\n$`).MatchString(v) {
		t.Errorf("version %q: want the revision and the load-report bucket", v)
	}
}
