package loadreport

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// spatialManifest is testdata/spatial.yaml: a domain that reports load (maps:
// a replica in eu-west with two endpoints, one in us-east with one, a pool
// over both and a pool over eu-west only) beside one that does not (atlas).
var spatialManifest = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "spatial.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// spatialOff is the manifest without the domain's loadReporting.
func spatialOff(manifestText string) string {
	return strings.Replace(manifestText, "  loadReporting: {interval: 2s}\n", "", 1)
}

const (
	replicaEU = "spatial:geo:maps:eu"
	replicaUS = "spatial:geo:maps:us"
	poolTiles = "spatial-pool:geo:maps:tiles"
	poolEU    = "spatial-pool:geo:maps:eu-only"
)

func spatialSnapshot(t testing.TB, manifestText string) *topology.Snapshot {
	t.Helper()
	set, err := manifest.Decode("spatial.yaml", []byte(manifestText))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func spatialStore(t testing.TB) *Store {
	s := NewStore(Config{})
	s.SetCatalog(NewCatalog(nil, spatialSnapshot(t, spatialManifest), func(*topology.UpstreamState) bool { return false }))
	return s
}

// TestSpatialCatalog: the clusters of a domain with loadReporting are in the
// catalog with their endpoints' replica regions, those of a domain without
// are not, and the domain's interval is theirs.
func TestSpatialCatalog(t *testing.T) {
	snap := spatialSnapshot(t, spatialManifest)
	c := NewCatalog(nil, snap, func(*topology.UpstreamState) bool { return false })
	want := map[string][]string{
		replicaEU: {"10.20.0.1:eu-west", "10.20.0.2:eu-west"},
		replicaUS: {"10.30.0.1:us-east"},
		poolTiles: {"10.20.0.1:eu-west", "10.20.0.2:eu-west", "10.30.0.1:us-east"},
		poolEU:    {"10.20.0.1:eu-west", "10.20.0.2:eu-west"},
	}
	got := map[string][]string{}
	for name, cc := range c.clusters {
		for i, k := range cc.keys {
			got[name] = append(got[name], k.addr+":"+cc.spatial.region[i])
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("clusters:\n got %v\nwant %v", got, want)
	}
	if d := c.Interval([]string{poolTiles}); d != 2*time.Second {
		t.Errorf("interval %v, want 2s", d)
	}
	if c.SpatialChanged(snap) {
		t.Error("SpatialChanged on the snapshot it was built from")
	}
	// the next catalog of the same snapshot shares every cluster
	next := NewCatalog(c, snap, func(*topology.UpstreamState) bool { return false })
	for name, cc := range next.clusters {
		if c.clusters[name] != cc {
			t.Errorf("%s not shared", name)
		}
	}
	// turning load reporting off is a spatial change, and empties the catalog
	off := spatialSnapshot(t, spatialOff(spatialManifest))
	if !c.SpatialChanged(off) {
		t.Error("SpatialChanged misses loadReporting turned off")
	}
	if n := NewCatalog(c, off, func(*topology.UpstreamState) bool { return false }).Len(); n != 0 {
		t.Errorf("%d clusters without loadReporting", n)
	}
}

// sent is one report: a reporter (by region; its id is "client-<region>")
// reports issued requests to one endpoint of a cluster, at t0 + after.
type sent struct {
	region, cluster, addr string
	issued                uint64
	after                 time.Duration
}

func TestSpatialAggregation(t *testing.T) {
	ratio := func(f float64) *float64 { return &f }
	for _, tc := range []struct {
		name   string
		sends  []sent
		totals []SpatialCount // the counters after every report
		window SpatialLoad    // at t0 + 10s
	}{{
		name:   "nothing reported",
		totals: []SpatialCount{},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{}},
	}, {
		name:   "local only",
		sends:  []sent{{"eu-west", replicaEU, "10.20.0.1", 10, 0}},
		totals: []SpatialCount{{"geo/maps", "eu-west", "eu-west", 10}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{"eu-west", "eu-west", 10}},
			Total: 10, CrossRegionShare: ratio(0), Reporters: 1},
	}, {
		name: "the pool sends some across",
		sends: []sent{{"eu-west", poolTiles, "10.20.0.2", 6, 0}, {"eu-west", poolTiles, "10.30.0.1", 4, time.Second},
			{"eu-west", replicaEU, "10.20.0.1", 10, 2 * time.Second}},
		totals: []SpatialCount{{"geo/maps", "eu-west", "eu-west", 16}, {"geo/maps", "eu-west", "us-east", 4}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{"eu-west", "eu-west", 16}, {"eu-west", "us-east", 4}},
			Total: 20, CrossRegion: 4, CrossRegionShare: ratio(0.2), Reporters: 1},
	}, {
		name:  "clients in two regions",
		sends: []sent{{"eu-west", replicaEU, "10.20.0.1", 10, 0}, {"us-east", replicaEU, "10.20.0.2", 5, 0}, {"us-east", replicaUS, "10.30.0.1", 5, 0}},
		totals: []SpatialCount{{"geo/maps", "eu-west", "eu-west", 10}, {"geo/maps", "us-east", "eu-west", 5},
			{"geo/maps", "us-east", "us-east", 5}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{"eu-west", "eu-west", 10}, {"us-east", "eu-west", 5},
			{"us-east", "us-east", 5}}, Total: 20, CrossRegion: 5, CrossRegionShare: ratio(0.25), Reporters: 2},
	}, {
		name:   "a client without region is counted but not in the share",
		sends:  []sent{{"", replicaUS, "10.30.0.1", 7, 0}, {"eu-west", poolTiles, "10.30.0.1", 3, 0}},
		totals: []SpatialCount{{"geo/maps", "eu-west", "us-east", 3}, {"geo/maps", SpatialNoRegion, "us-east", 7}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{"eu-west", "us-east", 3}, {SpatialNoRegion, "us-east", 7}},
			Total: 10, CrossRegion: 3, CrossRegionShare: ratio(1), Reporters: 2},
	}, {
		name:   "only clients without region: no share",
		sends:  []sent{{"", replicaUS, "10.30.0.1", 7, 0}},
		totals: []SpatialCount{{"geo/maps", SpatialNoRegion, "us-east", 7}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{SpatialNoRegion, "us-east", 7}}, Total: 7, Reporters: 1},
	}, {
		name:   "the counter keeps what the window forgot",
		sends:  []sent{{"us-east", replicaEU, "10.20.0.1", 8, -time.Minute}, {"us-east", replicaUS, "10.30.0.1", 2, 0}},
		totals: []SpatialCount{{"geo/maps", "us-east", "eu-west", 8}, {"geo/maps", "us-east", "us-east", 2}},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{{"us-east", "us-east", 2}}, Total: 2,
			CrossRegionShare: ratio(0), Reporters: 1},
	}, {
		name:   "a domain without loadReporting and unknown endpoints count nothing",
		sends:  []sent{{"us-east", "spatial:geo:atlas:us", "10.30.0.1", 8, 0}, {"us-east", replicaUS, "10.99.0.1", 8, 0}},
		totals: []SpatialCount{},
		window: SpatialLoad{Domain: "geo/maps", Requests: []SpatialRequests{}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := spatialStore(t)
			streams := map[string]*Stream{}
			start := t0.Add(-time.Minute)
			for _, m := range tc.sends {
				st := streams[m.region]
				if st == nil {
					st = s.Open(Reporter{ID: "client-" + m.region, Region: m.region, Zone: "a"}, start)
					streams[m.region] = st
				}
				st.Report(report(envoyStats(m.cluster, m.addr, m.issued, m.issued, 0)), t0.Add(m.after))
			}
			if got := s.SpatialTotals(); !reflect.DeepEqual(got, tc.totals) {
				t.Errorf("totals:\n got %+v\nwant %+v", got, tc.totals)
			}
			got := s.Spatial(t0.Add(10 * time.Second))
			if len(got) != 1 {
				t.Fatalf("%d domains, want geo/maps alone: %+v", len(got), got)
			}
			if !reflect.DeepEqual(got[0], tc.window) {
				t.Errorf("window:\n got %s\nwant %s", show(got[0]), show(tc.window))
			}
		})
	}
}

func show(l SpatialLoad) string {
	share := "none"
	if l.CrossRegionShare != nil {
		share = fmt.Sprint(*l.CrossRegionShare)
	}
	return fmt.Sprintf("%+v share %s", l, share)
}

// TestSpatialClientRegionsBounded: past MaxSpatialClientRegions client
// regions, the counters name the first ones and count the rest as
// ~other; the window names the busiest ones. The share stays exact.
func TestSpatialClientRegionsBounded(t *testing.T) {
	s := spatialStore(t)
	n := MaxSpatialClientRegions + 8
	for i := range n {
		region := fmt.Sprintf("r%02d", i)
		st := s.Open(Reporter{ID: "client-" + region, Region: region}, t0)
		// later regions send more: r39 is the busiest
		st.Report(report(envoyStats(replicaEU, "10.20.0.1", uint64(i+1), uint64(i+1), 0)), t0)
	}
	totals := s.SpatialTotals()
	if len(totals) != MaxSpatialClientRegions+1 || totals[0].ClientRegion != "r00" || totals[len(totals)-1].ClientRegion != SpatialOtherRegion {
		t.Fatalf("%d counters, first %+v, last %+v", len(totals), totals[0], totals[len(totals)-1])
	}
	// r32..r39 sent 33..40
	if other := totals[len(totals)-1].Requests; other != 33+34+35+36+37+38+39+40 {
		t.Errorf("~other = %d", other)
	}
	w := s.Spatial(t0)[0]
	if len(w.Requests) != MaxSpatialClientRegions+1 || w.Requests[0].ClientRegion != "r08" {
		t.Fatalf("window rows %d, first %+v", len(w.Requests), w.Requests[0])
	}
	if o := w.Requests[len(w.Requests)-1]; o.ClientRegion != SpatialOtherRegion || o.Requests != 1+2+3+4+5+6+7+8 {
		t.Errorf("window ~other = %+v", o)
	}
	if w.Total != uint64(n*(n+1)/2) || w.CrossRegion != w.Total || *w.CrossRegionShare != 1 || w.Reporters != n {
		t.Errorf("window %s", show(w))
	}
}

// TestSpatialCountersFollowTheCatalog: a counter survives a catalog change
// that keeps its domain reporting (a replica's endpoint changes) and is
// forgotten when the domain stops reporting.
func TestSpatialCountersFollowTheCatalog(t *testing.T) {
	s := spatialStore(t)
	st := s.Open(Reporter{ID: "c", Region: "us-east"}, t0)
	st.Report(report(envoyStats(replicaEU, "10.20.0.1", 5, 5, 0)), t0)
	more := strings.Replace(spatialManifest, "{address: 10.30.0.1, port: 8080}", "{address: 10.30.0.1, port: 8080}, {address: 10.30.0.2, port: 8080}", 1)
	none := func(*topology.UpstreamState) bool { return false }
	s.SetCatalog(NewCatalog(s.Catalog(), spatialSnapshot(t, more), none))
	st.Report(report(envoyStats(replicaUS, "10.30.0.2", 1, 1, 0)), t0.Add(time.Second))
	want := []SpatialCount{{"geo/maps", "us-east", "eu-west", 5}, {"geo/maps", "us-east", "us-east", 1}}
	if got := s.SpatialTotals(); !reflect.DeepEqual(got, want) {
		t.Errorf("after an endpoint change: %+v, want %+v", got, want)
	}
	if w := s.Spatial(t0.Add(time.Second))[0]; w.Total != 6 {
		t.Errorf("window after an endpoint change: %s", show(w))
	}
	s.SetCatalog(NewCatalog(s.Catalog(), spatialSnapshot(t, spatialOff(more)), none))
	if got := s.SpatialTotals(); len(got) != 0 {
		t.Errorf("after loadReporting is removed: %+v", got)
	}
	if got := s.Spatial(t0.Add(time.Second)); len(got) != 0 {
		t.Errorf("window after loadReporting is removed: %+v", got)
	}
}

// TestSpatialLeavesUpstreamClustersOut: an Upstream's own cluster (here
// with the same endpoints as a replica) is not the domain's traffic, however
// many clusters a client reports on; SpatialDomain answers one domain.
func TestSpatialLeavesUpstreamClustersOut(t *testing.T) {
	s := NewStore(Config{})
	s.SetCatalog(NewCatalog(nil, spatialSnapshot(t, spatialManifest), nil)) // the Upstreams' clusters too
	st := s.Open(Reporter{ID: "c", Region: "eu-west"}, t0)
	// six blocks, more than the domain's four clusters: read by name
	st.Report(report(envoyStats("geo/maps-eu", "10.20.0.1", 50, 50, 0), envoyStats("geo/maps-us", "10.30.0.1", 50, 50, 0),
		envoyStats(replicaEU, "10.20.0.1", 3, 3, 0), envoyStats(replicaUS, "10.30.0.1", 3, 3, 0),
		envoyStats(poolTiles, "10.30.0.1", 3, 3, 0), envoyStats(poolEU, "10.20.0.2", 3, 3, 0)), t0)
	want := []SpatialCount{{"geo/maps", "eu-west", "eu-west", 6}, {"geo/maps", "eu-west", "us-east", 6}}
	if got := s.SpatialTotals(); !reflect.DeepEqual(got, want) {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	l, ok := s.SpatialDomain("geo/maps", t0)
	if !ok || l.Total != 12 || l.CrossRegion != 6 || *l.CrossRegionShare != 0.5 || !reflect.DeepEqual(s.Spatial(t0), []SpatialLoad{l}) {
		t.Errorf("geo/maps: %s (%v)", show(l), ok)
	}
	if _, ok := s.SpatialDomain("geo/atlas", t0); ok {
		t.Error("geo/atlas, without loadReporting, has loads")
	}
}

// TestSpatialSeriesBounded: 5 domains of 64 replicas in 64 regions, and
// clients in 33 regions reporting on every replica, would need 10,560
// counters: MaxSpatialSeries are kept, the rest counted in SpatialOverCap,
// and the window still has every request.
func TestSpatialSeriesBounded(t *testing.T) {
	const domains, replicas, clients = 5, 64, MaxSpatialClientRegions + 1
	var b topology.Batch
	for i := range replicas {
		name := fmt.Sprintf("up-%02d", i)
		b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "geo", Name: name}, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane})
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "geo", Name: name}, Upstream: name,
			Endpoints: []topology.Endpoint{{Address: fmt.Sprintf("10.1.0.%d", i), Port: 8080, Weight: 1}}})
	}
	var stats []*endpoint.ClusterStats
	for d := range domains {
		dom := partitionmap.Domain{Name: fmt.Sprintf("d%d", d), GridDeg: 5, MaxCells: 256, CapPercent: partitionmap.NoCap,
			Products: []partitionmap.Product{{Name: "p", PathPrefix: "/p", AllowedRegions: []string{"r-00"}}}}
		for i := range replicas {
			dom.Replicas = append(dom.Replicas, partitionmap.Replica{Name: fmt.Sprintf("x%02d", i), Upstream: fmt.Sprintf("up-%02d", i), Region: fmt.Sprintf("r-%02d", i)})
			stats = append(stats, envoyStats(fmt.Sprintf("spatial:geo:d%d:x%02d", d, i), fmt.Sprintf("10.1.0.%d", i), 1, 1, 0))
		}
		b.PutSpatialDomain(topology.SpatialDomain{Key: topology.Key{Namespace: "geo", Name: dom.Name}, Domain: dom, LoadReportInterval: time.Second})
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(Config{})
	s.SetCatalog(NewCatalog(nil, snap, func(*topology.UpstreamState) bool { return false }))
	for c := range clients {
		s.Open(Reporter{ID: fmt.Sprintf("c%02d", c), Region: fmt.Sprintf("client-%02d", c)}, t0).Report(report(stats...), t0)
	}
	const all = domains * replicas * clients
	if n := len(s.SpatialTotals()); n != MaxSpatialSeries {
		t.Errorf("%d counters, want %d", n, MaxSpatialSeries)
	}
	if d := s.Drops().SpatialOverCap; d != all-MaxSpatialSeries {
		t.Errorf("SpatialOverCap %d, want %d", d, all-MaxSpatialSeries)
	}
	var total uint64
	for _, l := range s.Spatial(t0) {
		total += l.Total
	}
	if total != all {
		t.Errorf("the window has %d requests, want %d", total, all)
	}
}
