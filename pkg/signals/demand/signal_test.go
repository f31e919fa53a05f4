package demand

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
)

var web = topology.Key{Namespace: "shop", Name: "web"}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// census is the xDS cache's census as the wiring hands it over.
type census struct{ *xdscache.Cache }

func (c census) Demand(cluster string) map[string]uint64 {
	return c.Cache.Demand(resource.EndpointType, cluster)
}

// world is web under a localityAffinity mode in a Directory, a real xDS
// cache whose streams are the clients, and the signal on a clock the test
// moves.
type world struct {
	t     *testing.T
	dir   *topology.Directory
	cache *xdscache.Cache
	clk   *clock
	sig   *Signal
}

func newWorld(t *testing.T, mode affinity.Mode, loads LoadReports) *world {
	t.Helper()
	w := &world{t: t, dir: topology.NewDirectory(), clk: &clock{t: time.Unix(1000, 0)},
		cache: xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })}
	w.sig = New(w.dir, Config{Census: census{w.cache}, Views: int(translate.NumRenderings), Loads: loads, Now: w.clk.now})
	w.apply(topologytest.Zoned(web, mode))
	return w
}

func (w *world) apply(b topology.Batch) *topology.Snapshot {
	w.t.Helper()
	s, err := w.dir.Apply(b)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// client connects a client of region/zone (an Envoy, or gRPC in the
// per-endpoint view) that the server weighs at weight, subscribed to web's
// endpoints; its census change is recorded as Run records it.
func (w *world) client(region, zone, agent string, weight uint64) *xdscache.Stream {
	w.t.Helper()
	n := &core.Node{Id: region + zone, UserAgentName: agent, Locality: &core.Locality{Region: region, Zone: zone}}
	if agent == "grpc-go" {
		n.ClientFeatures = []string{translate.FeatureNoOverprovisioning}
	}
	s := w.cache.NewStream(false)
	s.WeighDemand(func(*core.Node) uint64 { return weight }, "")
	s.SetNode(n)
	names := []string{xdsname.Cluster(web)}
	if err := s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, NamesHash: w.cache.HashNames(names), Names: func() []string { return names }}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(s.Close)
	w.sig.censusAt = w.clk.t
	return s
}

// applied is the demand web's state carries now.
func (w *world) applied() topology.AppliedDemand { return w.dir.Current().Upstream(web).Demand }

// The classes with clients reach the snapshot, per view, as clients of a
// class connect and the last one leaves; the classes alone resolve no
// upstream again.
func TestClassesFollowTheClients(t *testing.T) {
	w := newWorld(t, affinity.PreferSameZone, LoadReports{})
	before := w.dir.Current()
	a := w.client("eu", "a", "envoy", 1)
	w.client("us", "c", "grpc-go", 1)
	w.client("eu", "", "envoy", 1) // a region-level class
	w.client("", "", "envoy", 1)   // no locality: no class
	w.sig.step()
	s := w.dir.Current()
	if got := s.ClientClasses().Of(int(translate.Weighted)); !slices.Equal(got, []string{"eu", "eu/a"}) {
		t.Errorf("Envoy's view: %v", got)
	}
	if got := s.ClientClasses().Of(int(translate.PerEndpoint)); !slices.Equal(got, []string{"us/c"}) {
		t.Errorf("gRPC's view: %v", got)
	}
	if keys, ok := s.ChangedSince(before.Revision); !ok || len(keys) != 0 || s.Revision != before.Revision+1 {
		t.Errorf("the classes took revision %d and changed %v (%v)", s.Revision, keys, ok)
	}
	w.sig.step()
	if w.dir.Current() != s {
		t.Error("nothing moved, yet a new snapshot")
	}
	a.Close()
	w.sig.step()
	if got := w.dir.Current().ClientClasses().Of(int(translate.Weighted)); !slices.Equal(got, []string{"eu"}) {
		t.Errorf("after eu/a's client left, Envoy's view: %v", got)
	}
}

// Balanced follows the demand of the connected clients with hysteresis:
// capacity eu/a, eu/b, us/c one third each; clients 3 in eu/a (one of
// weight 2), 1 in us/c.
func TestBalancedFollowsDemandWithHysteresis(t *testing.T) {
	w := newWorld(t, affinity.Balanced, LoadReports{})
	w.client("eu", "a", "envoy", 2)
	w.client("eu", "a", "envoy", 1)
	w.client("us", "c", "envoy", 1)
	if due := w.sig.step(); due != Quiet {
		t.Fatalf("a new demand is due in %v, want %v", due, Quiet)
	}
	if got := w.applied(); !got.None() {
		t.Fatalf("demand applied before it was quiet: %v", got)
	}
	w.clk.t = w.clk.t.Add(Quiet)
	rev := w.dir.Current().Revision
	w.sig.step()
	want := demandIn("eu/a", 3, "us/c", 1)
	if got := w.applied(); !slices.Equal(got.Zones, want) || got.LoadReports {
		t.Fatalf("applied demand %+v, want %v", got, want)
	}
	if keys, _ := w.dir.Current().ChangedSince(rev); !slices.Equal(keys, []topology.Key{web}) || w.dir.Current().Revision != rev+1 {
		t.Errorf("the demand took revisions %d to %d and changed %v", rev, w.dir.Current().Revision, keys)
	}
	// Churn: demand moves and moves again; nothing is applied until it has
	// held for Quiet, or MaxDelay after it first moved.
	for i := range 6 {
		w.client("eu", "b", "envoy", 1)
		w.sig.step()
		w.clk.t = w.clk.t.Add(Quiet - time.Millisecond)
		if got := w.applied(); i < 5 && !slices.Equal(got.Zones, want) {
			t.Fatalf("churn step %d: demand applied while it kept moving: %v", i, got)
		}
	}
	w.sig.step()
	if got := w.applied(); !slices.Equal(got.Zones, demandIn("eu/a", 3, "eu/b", 6, "us/c", 1)) {
		t.Fatalf("after %v of churn the demand is %v, want eu/b counted (6)", MaxDelay, got)
	}
}

// An upstream that becomes Balanced among clients whose census has been
// quiet for Quiet follows their demand at once; one that stops being
// Balanced has its demand taken back, and starts afresh when Balanced again.
func TestBalancedAmongSettledClientsAppliesAtOnce(t *testing.T) {
	w := newWorld(t, affinity.PreferSameZone, LoadReports{})
	w.client("eu", "a", "envoy", 3)
	w.client("us", "c", "envoy", 1)
	w.sig.step()
	w.clk.t = w.clk.t.Add(time.Minute)
	w.apply(topologytest.Zoned(web, affinity.Balanced))
	if due := w.sig.step(); due != 0 {
		t.Fatalf("the demand waits %v", due)
	}
	if got := w.applied(); !slices.Equal(got.Zones, demandIn("eu/a", 3, "us/c", 1)) {
		t.Fatalf("applied demand %v", got)
	}
	w.apply(topologytest.Zoned(web, affinity.PreferSameZone))
	w.sig.step()
	w.client("eu", "b", "envoy", 5) // moves the demand while the upstream is not Balanced
	w.clk.t = w.clk.t.Add(time.Minute)
	w.apply(topologytest.Zoned(web, affinity.Balanced))
	if got := w.applied(); !got.None() {
		t.Fatalf("Balanced again before the signal looked: it carries %v, want none (taken back)", got)
	}
	w.sig.step()
	if got := w.applied(); !slices.Equal(got.Zones, demandIn("eu/a", 3, "eu/b", 5, "us/c", 1)) {
		t.Fatalf("Balanced again: %v", got)
	}
}

// fakeLoads is a LoadReports whose reports the test sets.
type fakeLoads struct {
	requests map[string]uint64
	reads    int
}

func (f *fakeLoads) reports() LoadReports {
	return LoadReports{Bucket: 5 * time.Second, Window: 30 * time.Second,
		Requests: func(cluster string, _ time.Time) (map[string]uint64, bool) {
			f.reads++
			return maps.Clone(f.requests), cluster == xdsname.Cluster(web)
		}}
}

// localOf is what the clients of zone from send to each zone, divided by
// the demand web's state carries.
func localOf(t *testing.T, s *topology.Snapshot, from string) map[string]uint64 {
	t.Helper()
	u := s.Upstream(web)
	cs, err := u.ForClass(topology.ClassZone(from), u.Demand.Zones)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, l := range cs.State.Result.Localities {
		if l.Traffic > 0 {
			out[affinity.ZoneOf(l.Locality).String()] += l.Traffic
		}
	}
	return out
}

// A Balanced upstream whose clients report load follows the reported
// request rates, with the same hysteresis as the census; noise within the
// band moves nothing, and without enough reports the census is back.
func TestBalancedFollowsLoadReportsWithHysteresis(t *testing.T) {
	loads := &fakeLoads{}
	w := newWorld(t, affinity.Balanced, loads.reports())
	// the census says 1:1 (one client each) ...
	w.client("eu", "a", "envoy", 1)
	w.client("eu", "b", "envoy", 1)
	w.sig.step()
	w.clk.t = w.clk.t.Add(Quiet)
	w.sig.step()
	census := demandIn("eu/a", 1, "eu/b", 1)
	if got := w.applied(); !slices.Equal(got.Zones, census) || got.LoadReports {
		t.Fatalf("applied %+v, want the census %v", got, census)
	}
	// ... the reports 3:1, and a zone without clients here counts nothing
	loads.requests = map[string]uint64{"eu/a": 300, "eu/b": 100, "us/c": 1000}
	w.clk.t = w.clk.t.Add(5 * time.Second) // the next bucket
	w.sig.step()
	if got := w.applied(); !slices.Equal(got.Zones, census) {
		t.Fatalf("load demand applied before Quiet: %v", got)
	}
	w.clk.t = w.clk.t.Add(Quiet)
	reads := loads.reads
	w.sig.step()
	if loads.reads != reads {
		t.Errorf("read the reports again within one bucket")
	}
	want := demandIn("eu/a", 750, "eu/b", 250)
	if got := w.applied(); !slices.Equal(got.Zones, want) || !got.LoadReports || got.Requests != 400 || got.Window != 30*time.Second {
		t.Fatalf("applied %+v, want %v from load reports", got, want)
	}
	// eu/a: (1/3)/(3/4) = 4/9 local, the rest to eu/b and us/c by their
	// surpluses 1/12 and 1/3 (us/c has no demand here)
	if got := localOf(t, w.dir.Current(), "eu/a"); !maps.Equal(got, map[string]uint64{"eu/a": 444_445, "eu/b": 111_111, "us/c": 444_444}) {
		t.Errorf("eu/a: %v", got)
	}
	rev := w.dir.Current().Revision
	// noise, bucket after bucket: nothing moves
	for i, r := range [][2]uint64{{310, 95}, {290, 105}, {305, 100}, {2900, 1050}} {
		loads.requests = map[string]uint64{"eu/a": r[0], "eu/b": r[1]}
		w.clk.t = w.clk.t.Add(5 * time.Second)
		if due := w.sig.step(); due <= 0 || due > 5*time.Second {
			t.Errorf("noise %d: next look in %v, want within a bucket", i, due)
		}
		if got := w.applied(); !slices.Equal(got.Zones, want) {
			t.Fatalf("noise %d moved the demand to %v", i, got)
		}
	}
	if got := w.dir.Current().Revision; got != rev {
		t.Fatalf("noise published revisions %d to %d", rev, got)
	}
	// a real move (1:1) is applied after Quiet
	loads.requests = map[string]uint64{"eu/a": 200, "eu/b": 200}
	w.clk.t = w.clk.t.Add(5 * time.Second)
	w.sig.step()
	w.clk.t = w.clk.t.Add(Quiet)
	w.sig.step()
	if got := w.applied(); !slices.Equal(got.Zones, demandIn("eu/a", 500, "eu/b", 500)) {
		t.Fatalf("after a move: %v", got)
	}
	// the reports fade below KeepRequests: the census again
	loads.requests = map[string]uint64{"eu/a": 20, "eu/b": 20}
	w.clk.t = w.clk.t.Add(5 * time.Second)
	w.sig.step()
	w.clk.t = w.clk.t.Add(Quiet)
	w.sig.step()
	if got := w.applied(); !slices.Equal(got.Zones, census) || got.LoadReports {
		t.Fatalf("without reports: %+v, want the census", got)
	}
}

// issuedTo is a load report of web: issued (and as many successful)
// requests to each endpoint named "10.0.Z.E" (port 80).
func issuedTo(issued map[string]uint64) *lrs.LoadStatsRequest {
	loc := &endpoint.UpstreamLocalityStats{}
	for _, addr := range slices.Sorted(maps.Keys(issued)) {
		loc.UpstreamEndpointStats = append(loc.UpstreamEndpointStats, &endpoint.UpstreamEndpointStats{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 80}}}},
			TotalIssuedRequests: issued[addr], TotalSuccessfulRequests: issued[addr],
		})
	}
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{ClusterName: xdsname.Cluster(web),
		UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{loc}}}}
}

// One workload instance claiming a huge request count moves its zone's
// load demand only as far as its cap allows. Three instances of eu/a and
// one of eu/b report maxReq requests each (750 : 250); a fifth, in eu/b,
// claims 10^12. The load-report store keeps it at maxReq, so the applied
// demand is the shares of 3 × maxReq : 2 × maxReq, within the bound one
// capped instance can reach; the shares of what it claimed would have
// given eu/b all but 1 per mille.
func TestLoadDemandOfOneInstanceIsCapped(t *testing.T) {
	const maxReq, claimed = 1000, 1_000_000_000_000
	store := loadreport.NewStore(loadreport.Config{MaxRequests: maxReq})
	w := newWorld(t, affinity.Balanced, LoadReports{Bucket: store.Window() / loadreport.Buckets, Window: store.Window(), Requests: store.ClassRequests})
	store.SetCatalog(loadreport.NewCatalog(nil, w.dir.Current(), nil))
	w.client("eu", "a", "envoy", 1)
	w.client("eu", "b", "envoy", 1)
	honest := map[string]uint64{"eu/a": 0, "eu/b": 0}
	for i, zone := range []string{"a", "a", "a", "b"} {
		st := store.Open(loadreport.Reporter{ID: fmt.Sprintf("pod:%d", i), Region: "eu", Zone: zone}, w.clk.t)
		defer st.Close(w.clk.t)
		st.Report(issuedTo(map[string]uint64{"10.0.0.0": maxReq / 2, "10.0.1.0": maxReq / 2}), w.clk.t)
		honest["eu/"+zone] += maxReq
	}
	flood := store.Open(loadreport.Reporter{ID: "cert:flood", Region: "eu", Zone: "b"}, w.clk.t)
	defer flood.Close(w.clk.t)
	flood.Report(issuedTo(map[string]uint64{"10.0.1.0": claimed}), w.clk.t)

	w.sig.step()
	w.clk.t = w.clk.t.Add(Quiet)
	w.sig.step()
	got := w.applied()
	capped, total := loadShares(map[string]uint64{"eu/a": honest["eu/a"], "eu/b": honest["eu/b"] + maxReq})
	if !got.LoadReports || got.Requests != total || !slices.Equal(got.Zones, capped) {
		t.Fatalf("applied %+v, want %v from load reports of %d requests", got, capped, total)
	}
	// the most one capped instance can give its zone: ⌈1000 × (b + cap) / (all + cap)⌉
	all := honest["eu/a"] + honest["eu/b"]
	bound := (Scale*(honest["eu/b"]+maxReq) + all + maxReq - 1) / (all + maxReq)
	alone, _ := loadShares(honest)
	uncapped, _ := loadShares(map[string]uint64{"eu/a": honest["eu/a"], "eu/b": honest["eu/b"] + claimed})
	b := affinity.Zone{Region: "eu", Zone: "b"}
	share := func(d []affinity.Demand) uint64 {
		i := slices.IndexFunc(d, func(x affinity.Demand) bool { return x.Zone == b })
		if i < 0 {
			t.Fatalf("no eu/b in %v", d)
		}
		return d[i].Weight
	}
	if share(got.Zones) > bound || share(got.Zones) <= share(alone) {
		t.Errorf("eu/b's share %d per mille: want above the honest %d and at most the capped bound %d", share(got.Zones), share(alone), bound)
	}
	if share(uncapped) <= bound {
		t.Errorf("uncapped, eu/b would have %d per mille, within the bound %d: the test shows nothing", share(uncapped), bound)
	}
	if d := store.Drops(); d.Capped != claimed-maxReq || d.CappedReports != 1 {
		t.Errorf("drops = %+v, want the flood's excess counted", d)
	}
}

// Run, on the real clock: a client's class reaches the Directory after it
// connects, and an upstream that becomes Balanced among settled clients
// takes their demand, each an event the test waits for on the Directory.
func TestRunFollowsClientsAndTheDirectory(t *testing.T) {
	dir := topology.NewDirectory()
	if _, err := dir.Apply(topologytest.Zoned(web, affinity.PreferSameZone)); err != nil {
		t.Fatal(err)
	}
	cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	sig := New(dir, Config{Census: census{cache}, Views: int(translate.NumRenderings)})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sig.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// waitFor waits for the snapshot that holds ok, event by event
	waitFor := func(what string, ok func(*topology.Snapshot) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			changed := dir.Changed()
			if ok(dir.Current()) {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: not in revision %d", what, dir.Current().Revision)
			}
		}
	}
	s := cache.NewStream(false)
	s.WeighDemand(func(*core.Node) uint64 { return 4 }, "")
	s.SetNode(&core.Node{Id: "a", UserAgentName: "envoy", Locality: &core.Locality{Region: "eu", Zone: "a"}})
	names := []string{xdsname.Cluster(web)}
	if err := s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, NamesHash: cache.HashNames(names), Names: func() []string { return names }}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor("the client's class", func(s *topology.Snapshot) bool { return s.ClientClasses().Has("eu/a") })
	if _, err := dir.Apply(topologytest.Zoned(web, affinity.Balanced)); err != nil {
		t.Fatal(err)
	}
	waitFor("the demand of the client, once web is Balanced", func(s *topology.Snapshot) bool {
		return slices.Equal(s.Upstream(web).Demand.Zones, demandIn("eu/a", 4))
	})
}
