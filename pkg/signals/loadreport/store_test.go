package loadreport

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
)

// snapshot is n synthetic upstreams ("bench/svc-0000", …; 20 endpoints each,
// the first at 10.0.0.0:8080).
func snapshot(t testing.TB, n int) *topology.Snapshot {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(topologytest.Batch(n))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func storeOf(t testing.TB, n int, cfg Config) *Store {
	s := NewStore(cfg)
	s.SetCatalog(NewCatalog(nil, snapshot(t, n), nil))
	return s
}

// envoyStats is an Envoy's endpoint-granular report for one endpoint.
func envoyStats(cluster, addr string, issued, ok, errs uint64) *endpoint.ClusterStats {
	return &endpoint.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{
		Locality: &core.Locality{Region: "eu-west"},
		UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
			TotalIssuedRequests: issued, TotalSuccessfulRequests: ok, TotalErrorRequests: errs,
		}},
	}}}
}

// grpcStats is a gRPC client's per-locality report, one locality per endpoint.
func grpcStats(cluster, subZone string, issued, ok, errs uint64) *endpoint.ClusterStats {
	return &endpoint.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{
		Locality:            &core.Locality{Region: "eu-west", SubZone: subZone},
		TotalIssuedRequests: issued, TotalSuccessfulRequests: ok, TotalErrorRequests: errs,
	}}}
}

func report(cs ...*endpoint.ClusterStats) *lrs.LoadStatsRequest {
	return &lrs.LoadStatsRequest{ClusterStats: cs}
}

var t0 = time.Unix(1_700_000_000, 0)

// at is the load of the endpoint at addr (port 8080) in loads.
func at(t testing.TB, loads []EndpointLoad, addr string) EndpointLoad {
	t.Helper()
	for _, e := range loads {
		if e.Address == addr && e.Port == 8080 {
			return e
		}
	}
	t.Fatalf("no endpoint %s in %d", addr, len(loads))
	return EndpointLoad{}
}

func TestAggregatesAcrossReportersAndKinds(t *testing.T) {
	s := storeOf(t, 2, Config{})
	envoy := s.Open(Reporter{ID: "envoy-1", Region: "eu-west", Zone: "a"}, t0)
	grpc := s.Open(Reporter{ID: "grpc-1", Region: "us-east"}, t0)
	envoy.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 10, 8, 2)), t0)
	grpc.Report(report(grpcStats("bench/svc-0000", "~ep~10.0.0.0:8080", 5, 5, 0), grpcStats("bench/svc-0000", "~ep~10.0.0.1:8080", 3, 1, 2)), t0.Add(time.Second))
	envoy.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 10, 9, 1)), t0.Add(6*time.Second))

	got := s.Cluster("bench/svc-0000", t0.Add(7*time.Second))
	if len(got) != 20 {
		t.Fatalf("%d endpoints, want every one of the 20", len(got))
	}
	e := at(t, got, "10.0.0.0")
	if e.Issued != 25 || e.Successes != 22 || e.Errors != 3 || e.Reporters != 2 {
		t.Errorf("endpoint 0 = %+v", e)
	}
	if len(e.Classes) != 2 || e.Classes[0].Class != "eu-west/a" || e.Classes[0].Issued != 20 || e.Classes[1].Class != "us-east" || e.Classes[1].Issued != 5 {
		t.Errorf("endpoint 0 classes = %+v", e.Classes)
	}
	if e := at(t, got, "10.0.0.1"); e.Issued != 3 || e.Errors != 2 || e.Reporters != 1 {
		t.Errorf("endpoint 1 = %+v", e)
	}
	if e := at(t, got, "10.0.0.2"); e.Reporters != 0 || !e.Load.zero() {
		t.Errorf("endpoint 2 = %+v, want no load", e)
	}
	if d := s.Drops(); d != (Drops{}) {
		t.Errorf("drops = %+v, want none", d)
	}
	if s.Cluster("bench/nope", t0) != nil {
		t.Error("an unknown cluster has a load")
	}
}

func TestDropsWhatIsNotPublished(t *testing.T) {
	s := storeOf(t, 1, Config{})
	st := s.Open(Reporter{ID: "n"}, t0)
	st.Report(report(
		envoyStats("bench/other", "10.0.0.0", 1, 1, 0),          // unknown cluster
		envoyStats("bench/svc-0000", "10.9.9.9", 1, 1, 0),       // unknown endpoint
		grpcStats("bench/svc-0000", "eu-west", 1, 1, 0),         // a locality naming no endpoint
		grpcStats("bench/svc-0000", "~ep~10.9.9.9:80", 1, 0, 1), // a per-endpoint locality of no endpoint
		grpcStats("bench/svc-0000", "~ep~10.0.0.0:x", 1, 0, 1),  // a bad one
		&endpoint.ClusterStats{ClusterName: "bench/svc-0000", UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{
			UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{TotalIssuedRequests: 1}}, // no address
		}}},
	), t0)
	want := Drops{UnknownCluster: 1, UnknownEndpoint: 3, NoEndpoint: 2}
	if d := s.Drops(); d != want {
		t.Errorf("drops = %+v, want %+v", d, want)
	}
	for _, e := range s.Cluster("bench/svc-0000", t0) {
		if e.Reporters != 0 {
			t.Errorf("%s has load %+v", e.Address, e)
		}
	}
}

func TestEndpointOfSubZone(t *testing.T) {
	for _, c := range []struct {
		in   string
		want endpointKey
		ok   bool
	}{
		{"~ep~10.0.0.1:80", endpointKey{"10.0.0.1", 80}, true},
		{"rack-1~p1~ep~10.0.0.1:80", endpointKey{"10.0.0.1", 80}, true},
		{"a~ep~b~ep~[fd00::1]:443", endpointKey{"fd00::1", 443}, true},
		{"~ep~fd00::1:443", endpointKey{}, false},
		{"~ep~[fd00::1:443", endpointKey{}, false},
		{"~ep~:80", endpointKey{}, false},
		{"~ep~10.0.0.1:99999999999", endpointKey{}, false},
		{"~ep~10.0.0.1", endpointKey{}, false},
		{"zone-a", endpointKey{}, false},
	} {
		got, ok := endpointOfSubZone(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("endpointOfSubZone(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestWindowSlides(t *testing.T) {
	s := storeOf(t, 1, Config{Bucket: time.Second}) // a 6 s window
	st := s.Open(Reporter{ID: "n"}, t0)
	for i := range 10 {
		st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0.Add(time.Duration(i)*time.Second))
	}
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(9*time.Second)), "10.0.0.0"); e.Issued != 6 {
		t.Errorf("issued over the window at 9 s = %d, want the last 6 seconds' 6", e.Issued)
	}
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(14*time.Second)), "10.0.0.0"); e.Issued != 1 {
		t.Errorf("issued at 14 s = %d, want the 9 s report's 1", e.Issued)
	}
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(15*time.Second)), "10.0.0.0"); e.Issued != 0 || e.Reporters != 0 {
		t.Errorf("at 15 s = %+v, want nothing left", e)
	}
	// A report stamped in the past counts now: buckets never go back.
	st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 4, 4, 0)), t0)
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(9*time.Second)), "10.0.0.0"); e.Issued != 10 {
		t.Errorf("after a late report = %d, want 10", e.Issued)
	}
}

func TestCapEvictsOldestReporter(t *testing.T) {
	s := storeOf(t, 3, Config{MaxCells: 40}) // two clusters' worth
	a, b, c := s.Open(Reporter{ID: "a"}, t0), s.Open(Reporter{ID: "b"}, t0), s.Open(Reporter{ID: "c"}, t0)
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0)
	b.Report(report(envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0.Add(time.Second))
	c.Report(report(envoyStats("bench/svc-0002", "10.0.2.0", 1, 1, 0)), t0.Add(2*time.Second))
	u := s.Usage()
	if u.Cells != 40 || u.Reporters != 2 || u.Drops.Evicted != 1 {
		t.Fatalf("usage = %+v, want a evicted", u)
	}
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(2*time.Second)), "10.0.0.0"); e.Reporters != 0 {
		t.Errorf("a's report survived its eviction: %+v", e)
	}
	// The evicted stream's next report registers it anew, evicting b.
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0.Add(3*time.Second))
	if u := s.Usage(); u.Reporters != 2 || u.Drops.Evicted != 2 || u.Cells != 40 {
		t.Errorf("usage = %+v", u)
	}
	// One reporter too big for the cap alone keeps what fits.
	s2 := storeOf(t, 3, Config{MaxCells: 30})
	d := s2.Open(Reporter{ID: "d"}, t0)
	d.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0), envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0)
	if u := s2.Usage(); u.Cells != 20 || u.Drops.OverCap != 1 {
		t.Errorf("usage = %+v, want one cluster kept and one over the cap", u)
	}
}

func TestMaxReporters(t *testing.T) {
	s := storeOf(t, 1, Config{MaxReporters: 3})
	for i := range 5 {
		st := s.Open(Reporter{ID: fmt.Sprint(i)}, t0.Add(time.Duration(i)*time.Second))
		st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0.Add(time.Duration(i)*time.Second))
	}
	if u := s.Usage(); u.Reporters != 3 || u.Drops.Evicted != 2 {
		t.Errorf("usage = %+v", u)
	}
	if e := at(t, s.Cluster("bench/svc-0000", t0.Add(5*time.Second)), "10.0.0.0"); e.Reporters != 3 || e.Issued != 3 {
		t.Errorf("endpoint = %+v, want the 3 newest reporters", e)
	}
}

func TestClosedReporterFreedAfterWindow(t *testing.T) {
	s := storeOf(t, 2, Config{Bucket: time.Second})
	gone, stays := s.Open(Reporter{ID: "gone"}, t0), s.Open(Reporter{ID: "stays"}, t0)
	gone.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0)
	gone.Close(t0.Add(time.Second))
	stays.Report(report(envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0.Add(6*time.Second))
	if u := s.Usage(); u.Reporters != 2 {
		t.Fatalf("reporters = %d before the window ended", u.Reporters)
	}
	stays.Report(report(envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0.Add(7*time.Second))
	if u := s.Usage(); u.Reporters != 1 || u.Cells != 20 || u.Blocks != 1 {
		t.Errorf("usage = %+v, want the closed reporter freed", u)
	}
	gone.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1, 1, 0)), t0.Add(8*time.Second))
	if u := s.Usage(); u.Reporters != 1 {
		t.Errorf("a closed stream's report was kept: %+v", u)
	}
	// A node that reconnects before the window ends keeps its history.
	again := s.Open(Reporter{ID: "stays"}, t0.Add(8*time.Second))
	stays.Close(t0.Add(8 * time.Second))
	again.Report(report(envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0.Add(20*time.Second))
	if e := at(t, s.Cluster("bench/svc-0001", t0.Add(20*time.Second)), "10.0.1.0"); e.Reporters != 1 || e.Issued != 1 {
		t.Errorf("endpoint = %+v", e)
	}
}

func TestCatalogChangeFollowsEndpoints(t *testing.T) {
	dir := topology.NewDirectory()
	snap, err := dir.Apply(topologytest.Batch(2))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(Config{})
	cat := NewCatalog(nil, snap, nil)
	s.SetCatalog(cat)
	st := s.Open(Reporter{ID: "n"}, t0)
	st.Report(report(envoyStats("bench/svc-0000", "10.0.0.1", 7, 7, 0), envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0)

	// svc-0000 loses its first endpoint; svc-0001 goes away.
	set := topologytest.Set(0, 0, nil)
	set.Endpoints = set.Endpoints[1:]
	var b topology.Batch
	b.PutEndpointSet(set)
	b.DeleteUpstream(topology.Key{Namespace: "bench", Name: topologytest.UpstreamName(1)})
	for r := range topologytest.Regions {
		b.DeleteEndpointSet(topologytest.Set(1, r, nil).Key)
	}
	snap, err = dir.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	next := NewCatalog(cat, snap, nil)
	s.SetCatalog(next)
	got := s.Cluster("bench/svc-0000", t0)
	if e := at(t, got, "10.0.0.1"); len(got) != 19 || e.Issued != 7 {
		t.Errorf("after the change: %d endpoints, 10.0.0.1 %+v", len(got), e)
	}
	if u := s.Usage(); u.Cells != 19 || u.Blocks != 1 {
		t.Errorf("usage = %+v", u)
	}
	// Unchanged upstreams keep their catalog entry.
	if again := NewCatalog(next, snap, nil); again.clusters["bench/svc-0000"] != next.clusters["bench/svc-0000"] {
		t.Error("an unchanged upstream's entry was rebuilt")
	}
}

// intervalSnapshot has svc-0000 reporting every 3 s, svc-0001 every 7 s
// and svc-0002 without load reporting.
func intervalSnapshot(t testing.TB) *topology.Snapshot {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(topologytest.ReportingBatch(3, 3*time.Second, 7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// The catalog of the upstreams with load reporting answers, for the
// clusters a client reports on, the shortest of their intervals; clusters
// it does not have, or none, answer zero. Shortest counts only the clusters
// the client may read.
func TestCatalogInterval(t *testing.T) {
	cat := NewCatalog(nil, intervalSnapshot(t), func(u *topology.UpstreamState) bool { return u.Upstream.LoadReportInterval > 0 })
	if cat.Len() != 2 {
		t.Fatalf("catalog of %d clusters, want the 2 with load reporting", cat.Len())
	}
	for _, tc := range []struct {
		names []string
		want  time.Duration
	}{
		{nil, 0},
		{[]string{"bench/svc-0002"}, 0},
		{[]string{"bench/svc-0001"}, 7 * time.Second},
		{[]string{"bench/svc-0001", "bench/svc-0000", "bench/svc-0002"}, 3 * time.Second},
	} {
		if got := cat.Interval(tc.names); got != tc.want {
			t.Errorf("Interval(%q) = %v, want %v", tc.names, got, tc.want)
		}
	}
	if got := cat.Shortest(nil); got != 3*time.Second {
		t.Errorf("Shortest(nil) = %v, want 3s", got)
	}
	// a client that may not read bench/svc-0000 is asked for the shortest
	// interval of those it may read
	notFirst := func(cluster string) bool { return cluster != "bench/svc-0000" }
	if got := cat.Shortest(notFirst); got != 7*time.Second {
		t.Errorf("Shortest without bench/svc-0000 = %v, want 7s", got)
	}
	if got := cat.Shortest(func(string) bool { return false }); got != 0 {
		t.Errorf("Shortest of no readable cluster = %v, want 0", got)
	}
	if got := NewCatalog(nil, snapshot(t, 2), nil).Shortest(nil); got != 0 {
		t.Errorf("Shortest(nil) of a catalog without intervals = %v", got)
	}
}

// TestReportsPerReporter: Reports gives each reporter's own counts per
// endpoint, in the catalog's order, reporters sorted by id, only those with
// load in the window; an unknown cluster is not ok.
func TestReportsPerReporter(t *testing.T) {
	s := storeOf(t, 2, Config{})
	old := s.Open(Reporter{ID: "old"}, t0.Add(-time.Minute))
	old.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 5, 0, 5)), t0.Add(-time.Minute))
	b := s.Open(Reporter{ID: "b"}, t0)
	a := s.Open(Reporter{ID: "a"}, t0)
	idle := s.Open(Reporter{ID: "idle"}, t0)
	b.Report(report(grpcStats("bench/svc-0000", "~ep~10.0.0.1:8080", 4, 1, 3)), t0)
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 10, 8, 2)), t0)
	idle.Report(report(envoyStats("bench/svc-0001", "10.0.1.0", 1, 1, 0)), t0)

	got, ok := s.Reports("bench/svc-0000", t0.Add(time.Second))
	if !ok || len(got.Endpoints) != 20 {
		t.Fatalf("reports = %+v, %v", got, ok)
	}
	if len(got.Reporters) != 2 || got.Reporters[0].ID != "a" || got.Reporters[1].ID != "b" {
		t.Fatalf("reporters = %+v, want a and b only", got.Reporters)
	}
	i0 := slices.Index(got.Endpoints, Endpoint{Address: "10.0.0.0", Port: 8080})
	i := slices.Index(got.Endpoints, Endpoint{Address: "10.0.0.1", Port: 8080})
	if l := got.Reporters[0].Loads[i0]; l != (Load{10, 8, 2}) || !got.Reporters[0].Loads[i].zero() {
		t.Errorf("a = %+v", got.Reporters[0].Loads)
	}
	if l := got.Reporters[1].Loads[i]; l != (Load{4, 1, 3}) {
		t.Errorf("b on 10.0.0.1 = %+v", l)
	}
	if _, ok := s.Reports("bench/nope", t0); ok {
		t.Error("an unknown cluster has reports")
	}
}

func TestClassRequests(t *testing.T) {
	if got, ok := classRequests(nil); ok || got != nil {
		t.Errorf("a cluster the store does not know: %v %v", got, ok)
	}
	if got, ok := classRequests([]EndpointLoad{}); !ok || len(got) != 0 {
		t.Errorf("a known cluster without endpoints: %v %v", got, ok)
	}
	cl := func(class string, issued uint64) ClassLoad {
		return ClassLoad{Class: class, Load: Load{Issued: issued, Successes: 1}}
	}
	got, ok := classRequests([]EndpointLoad{
		{Classes: []ClassLoad{cl("eu/a", 30), cl("eu/b", 10), cl("", 5)}},
		{},
		{Classes: []ClassLoad{cl("eu/a", 270), cl("eu/b", 1<<64-5)}},
	})
	want := map[string]uint64{"eu/a": 300, "eu/b": 1<<64 - 1, "": 5}
	if !ok || !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}

	// from the store: each class's issued requests over its endpoints
	s := storeOf(t, 1, Config{})
	a := s.Open(Reporter{ID: "a", Region: "eu", Zone: "a"}, t0)
	b := s.Open(Reporter{ID: "b", Region: "eu"}, t0)
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 10, 10, 0), envoyStats("bench/svc-0000", "10.0.0.1", 5, 5, 0)), t0)
	b.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 7, 7, 0)), t0)
	if got, ok := s.ClassRequests("bench/svc-0000", t0); !ok || !maps.Equal(got, map[string]uint64{"eu/a": 15, "eu": 7}) {
		t.Errorf("store: %v %v", got, ok)
	}
	if _, ok := s.ClassRequests("bench/nope", t0); ok {
		t.Error("a cluster not in the catalog has class requests")
	}
}
