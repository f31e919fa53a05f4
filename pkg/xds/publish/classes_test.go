package publish

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xdsname"
)

var web = topology.Key{Namespace: "shop", Name: "web"}

// zoned is an upstream with two endpoints in each of eu/a, eu/b and us/c.
func zoned(mode affinity.Mode, edit ...func(*topology.Upstream)) topology.Batch {
	var b topology.Batch
	u := topology.Upstream{Key: web, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane,
		LoadBalancing: "RoundRobin", Protocol: "HTTP2"}
	if mode != affinity.None {
		u.Affinity = &topology.Affinity{Mode: mode}
	}
	for _, f := range edit {
		f(&u)
	}
	b.PutUpstream(u)
	for i, z := range []affinity.Zone{{Region: "eu", Zone: "a"}, {Region: "eu", Zone: "b"}, {Region: "us", Zone: "c"}} {
		s := topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-" + z.Zone}, Upstream: "web",
			Locality: weights.Locality{Region: z.Region, Zone: z.Zone}}
		for j := range 2 {
			s.Endpoints = append(s.Endpoints, topology.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i, j), Port: 80, Weight: 1})
		}
		b.PutEndpointSet(s)
	}
	return b
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func client(t *testing.T, c *xdscache.Cache, region, zone string, demand float64) *xdscache.Stream {
	t.Helper()
	n := &core.Node{Id: region + zone, UserAgentName: "envoy", Locality: &core.Locality{Region: region, Zone: zone}}
	if demand > 0 {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{xdscache.DemandWeightKey: structpb.NewNumberValue(demand)}}
	}
	s := c.NewStream(false)
	s.SetNode(n)
	names := []string{xdsname.Cluster(web)}
	if err := s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, NamesHash: c.HashNames(names), Names: func() []string { return names }}); err != nil {
		t.Fatal(err)
	}
	return s
}

// trafficOf is each locality's weight at EDS priority 0 of what a stream of
// class receives in Envoy's view.
func trafficOf(t *testing.T, c *xdscache.Cache, class string) map[string]uint32 {
	t.Helper()
	for _, e := range c.ZoneResources(int(translate.Weighted), class)[resource.EndpointType] {
		if e.Name != xdsname.Cluster(web) {
			continue
		}
		var cla endpoint.ClusterLoadAssignment
		if err := e.Decode(&cla); err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, l := range cla.GetEndpoints() {
			if l.GetPriority() == 0 {
				out[l.GetLocality().GetRegion()+"/"+l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
			}
		}
		return out
	}
	t.Fatalf("class %q: no endpoints of %s", class, web)
	return nil
}

func TestClassesFollowTheCensus(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	p.SetCensus(c)
	d := topology.NewDirectory()
	s, err := d.Apply(zoned(affinity.PreferSameZone))
	if err != nil {
		t.Fatal(err)
	}
	inA, inC := client(t, c, "eu", "a", 0), client(t, c, "us", "c", 0)
	defer inC.Close()
	noLocality := client(t, c, "", "", 0)
	defer noLocality.Close()
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	base := map[string]uint32{"eu/a": 333_334, "eu/b": 333_333, "us/c": 333_333}
	if got := trafficOf(t, c, ""); !maps.Equal(got, base) {
		t.Fatalf("base: %v, want %v", got, base)
	}
	p.refreshClasses()
	for class, want := range map[string]map[string]uint32{
		"eu/a": {"eu/a": 1_000_000},
		"us/c": {"us/c": 1_000_000},
	} {
		if got := trafficOf(t, c, class); !maps.Equal(got, want) {
			t.Errorf("class %s: priority 0 is %v, want %v", class, got, want)
		}
	}
	if got := c.VariantZones(int(translate.Weighted)); !slices.Equal(got, []string{"eu/a", "us/c"}) {
		t.Fatalf("variants for %v", got)
	}
	// The last client of a class leaves: its variant goes.
	inA.Close()
	p.refreshClasses()
	if got := c.VariantZones(int(translate.Weighted)); !slices.Equal(got, []string{"us/c"}) {
		t.Fatalf("after eu/a left, variants for %v", got)
	}
	// Back to None: every variant goes.
	s, err = d.Apply(zoned(affinity.None))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	if got := c.VariantZones(int(translate.Weighted)); len(got) != 0 {
		t.Fatalf("mode None, yet variants for %v", got)
	}
}

// Balanced follows the demand of the connected clients with hysteresis:
// capacity eu/a, eu/b, us/c one third each; clients 3 in eu/a (one of
// weight 2), 1 in us/c.
// balancedOnClock publishes zoned(Balanced) with a census and a clock the
// test moves.
func balancedOnClock(t *testing.T) (*xdscache.Cache, *Publisher, *clock, *topology.Snapshot) {
	t.Helper()
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	clk := &clock{t: time.Unix(1000, 0)}
	p.cls.now = clk.now
	p.SetCensus(c)
	s, err := topology.NewDirectory().Apply(zoned(affinity.Balanced))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	return c, p, clk, s
}

func TestBalancedFollowsDemandWithHysteresis(t *testing.T) {
	c, p, clk, s := balancedOnClock(t)
	for _, s := range []*xdscache.Stream{client(t, c, "eu", "a", 2), client(t, c, "eu", "a", 0), client(t, c, "us", "c", 0)} {
		defer s.Close()
	}
	p.cls.censusAt = clk.t // as RunClasses records each census change
	if due := p.refreshClasses(); due != DemandQuiet {
		t.Fatalf("a new demand is due in %v, want %v", due, DemandQuiet)
	}
	if got, _ := p.AppliedDemand(web); got != nil {
		t.Fatalf("demand applied before it was quiet: %v", got)
	}
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	want := []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 3}, {Zone: affinity.Zone{Region: "us", Zone: "c"}, Weight: 1}}
	if got, _ := p.AppliedDemand(web); !slices.Equal(got, want) {
		t.Fatalf("applied demand %v, want %v", got, want)
	}
	// U = 1,000,000, D = 4: eu/a keeps (1/3)/(3/4) = 4/9 local and sends
	// the rest to eu/b and us/c in proportion to their surpluses, 1/3 and
	// 1/12: 444,445 / 444,444 / 111,111; us/c keeps all.
	if got := trafficOf(t, c, "eu/a"); !maps.Equal(got, map[string]uint32{"eu/a": 444_445, "eu/b": 444_444, "us/c": 111_111}) {
		t.Errorf("eu/a: %v", got)
	}
	for _, class := range []string{"eu/a", "us/c"} {
		split, err := s.Upstream(web).ForClass(ClassOf(class), want)
		if err != nil {
			t.Fatal(err)
		}
		wantTraffic := map[string]uint32{}
		for _, l := range split.Balanced.Zones {
			if l.Traffic > 0 {
				wantTraffic[l.Zone.String()] = uint32(l.Traffic)
			}
		}
		if got := trafficOf(t, c, class); !maps.Equal(got, wantTraffic) {
			t.Errorf("class %s: %v, want %v", class, got, wantTraffic)
		}
	}
	if got := trafficOf(t, c, "us/c"); !maps.Equal(got, map[string]uint32{"us/c": 1_000_000}) {
		t.Errorf("us/c has more supply than demand and keeps all: %v", got)
	}
	// Churn: demand moves and moves again; nothing is applied until it has
	// held for DemandQuiet, or DemandMaxDelay after it first moved.
	var churn []*xdscache.Stream
	for i := range 6 {
		churn = append(churn, client(t, c, "eu", "b", 0))
		p.cls.censusAt = clk.t
		p.refreshClasses()
		clk.t = clk.t.Add(DemandQuiet - time.Millisecond)
		if i < 5 && !slices.Equal(first(p.AppliedDemand(web)), want) {
			t.Fatalf("churn step %d: demand applied while it kept moving", i)
		}
	}
	p.refreshClasses()
	if got, _ := p.AppliedDemand(web); len(got) != 3 || got[1].Weight != 6 {
		t.Fatalf("after %v of churn the demand is %v, want eu/b counted (6)", DemandMaxDelay, got)
	}
	for _, s := range churn {
		s.Close()
	}
}

// Under healthAdjustment Proxy a class is sent its proximity priorities
// (the source topology re-prioritised), for the proxy's own math.
func TestProxyModeClassesCarryProximityPriorities(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	p.SetCensus(c)
	s, err := topology.NewDirectory().Apply(zoned(affinity.PreferSameZone, func(u *topology.Upstream) { u.HealthAdjustment = topology.Proxy }))
	if err != nil {
		t.Fatal(err)
	}
	defer client(t, c, "eu", "b", 0).Close()
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	p.refreshClasses()
	priorities := func(class string) map[string]uint32 {
		out := map[string]uint32{}
		for _, e := range c.ZoneResources(int(translate.Weighted), class)[resource.EndpointType] {
			var cla endpoint.ClusterLoadAssignment
			if err := e.Decode(&cla); err != nil {
				t.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				out[l.GetLocality().GetRegion()+"/"+l.GetLocality().GetZone()] = l.GetPriority()
			}
		}
		return out
	}
	if got, want := priorities(""), map[string]uint32{"eu/a": 0, "eu/b": 0, "us/c": 0}; !maps.Equal(got, want) {
		t.Fatalf("base priorities %v, want %v", got, want)
	}
	if got, want := priorities("eu/b"), map[string]uint32{"eu/b": 0, "eu/a": 1, "us/c": 2}; !maps.Equal(got, want) {
		t.Fatalf("eu/b's priorities %v, want %v", got, want)
	}
}

// A class whose effective priorities would not fit a proxy's 128 receives
// the base split; the publication itself goes on.
func TestClassBeyondThePriorityLimitReceivesTheBase(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	p.SetCensus(c)
	b := zoned(affinity.PreferSameZone)
	for prio := range uint32(50) {
		for i, z := range []affinity.Zone{{Region: "eu", Zone: "a"}, {Region: "eu", Zone: "b"}, {Region: "us", Zone: "c"}} {
			b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: fmt.Sprintf("p%d-%s", prio, z.Zone)}, Upstream: "web",
				Locality: weights.Locality{Region: z.Region, Zone: z.Zone}, Priority: &prio,
				Endpoints: []topology.Endpoint{{Address: fmt.Sprintf("10.1.%d.%d", prio, i), Port: 80, Weight: 1}}})
		}
	}
	s, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	inA := client(t, c, "eu", "a", 0)
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	p.refreshClasses()
	if got := c.VariantZones(int(translate.Weighted)); len(got) != 0 {
		t.Fatalf("variants for %v, want none: 150 effective priorities do not fit", got)
	}
	if !p.upstream[web].failed["eu/a"] {
		t.Fatal("the class is not recorded as failed")
	}
	// the class's last client leaves: its failure is not kept
	inA.Close()
	p.refreshClasses()
	if len(p.upstream[web].failed) != 0 {
		t.Fatalf("failures kept for classes that left: %v", p.upstream[web].failed)
	}
}

// An upstream that becomes Balanced among clients whose census has been
// quiet for DemandQuiet follows their demand at once.
func TestBalancedAmongSettledClientsAppliesAtOnce(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	clk := &clock{t: time.Unix(1000, 0)}
	p.cls.now = clk.now
	p.SetCensus(c)
	for _, s := range []*xdscache.Stream{client(t, c, "eu", "a", 3), client(t, c, "us", "c", 0)} {
		defer s.Close()
	}
	p.cls.censusAt = clk.t
	d := topology.NewDirectory()
	s, err := d.Apply(zoned(affinity.PreferSameZone))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	p.refreshClasses()
	clk.t = clk.t.Add(time.Minute)
	if s, err = d.Apply(zoned(affinity.Balanced)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	if due := p.refreshClasses(); due != 0 {
		t.Fatalf("the demand waits %v", due)
	}
	if got, _ := p.AppliedDemand(web); len(got) != 2 || got[0].Weight != 3 {
		t.Fatalf("applied demand %v", got)
	}
}

// Under PreferSameRegion the zone classes of one region receive one
// derivation, encoded once and shared.
func TestPreferSameRegionSharesOneEncodingPerRegion(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	p.SetCensus(c)
	s, err := topology.NewDirectory().Apply(zoned(affinity.PreferSameRegion))
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range [][2]string{{"eu", "a"}, {"eu", "b"}, {"us", "c"}} {
		defer client(t, c, z[0], z[1], 0).Close()
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	p.refreshClasses()
	v := p.upstream[web].variants
	a, b, us := v[variantKey{int(translate.Weighted), "eu/a"}], v[variantKey{int(translate.Weighted), "eu/b"}], v[variantKey{int(translate.Weighted), "us/c"}]
	if a == nil || a != b || us == nil || us == a {
		t.Fatalf("eu/a %p, eu/b %p, us/c %p: want eu/a and eu/b one entry, us/c another", a, b, us)
	}
	if got, want := trafficOf(t, c, "eu/b"), map[string]uint32{"eu/a": 500_000, "eu/b": 500_000}; !maps.Equal(got, want) {
		t.Fatalf("eu/b receives %v, want %v", got, want)
	}
}

func first[T, U any](t T, _ U) T { return t }
