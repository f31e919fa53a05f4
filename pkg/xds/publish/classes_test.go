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
)

var web = topology.Key{Namespace: "shop", Name: "web"}

// zoned is an upstream with two endpoints in each of eu/a, eu/b and us/c.
func zoned(mode affinity.Mode) topology.Batch {
	var b topology.Batch
	u := topology.Upstream{Key: web, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane,
		LoadBalancing: "RoundRobin", Protocol: "HTTP2"}
	if mode != affinity.None {
		u.Affinity = &topology.Affinity{Mode: mode}
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
	names := []string{translate.ClusterName(web)}
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
		if e.Name != translate.ClusterName(web) {
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
func TestBalancedFollowsDemandWithHysteresis(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	clk := &clock{t: time.Unix(1000, 0)}
	p.cls.now = clk.now
	p.SetCensus(c)
	d := topology.NewDirectory()
	s, err := d.Apply(zoned(affinity.Balanced))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(s); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*xdscache.Stream{client(t, c, "eu", "a", 2), client(t, c, "eu", "a", 0), client(t, c, "us", "c", 0)} {
		defer s.Close()
	}
	if due := p.refreshClasses(); due != DemandQuiet {
		t.Fatalf("a new demand is due in %v, want %v", due, DemandQuiet)
	}
	if got := p.AppliedDemand(web); got != nil {
		t.Fatalf("demand applied before it was quiet: %v", got)
	}
	clk.t = clk.t.Add(DemandQuiet)
	p.refreshClasses()
	want := []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 3}, {Zone: affinity.Zone{Region: "us", Zone: "c"}, Weight: 1}}
	if got := p.AppliedDemand(web); !slices.Equal(got, want) {
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
		p.refreshClasses()
		clk.t = clk.t.Add(DemandQuiet - time.Millisecond)
		if i < 5 && !slices.Equal(p.AppliedDemand(web), want) {
			t.Fatalf("churn step %d: demand applied while it kept moving", i)
		}
	}
	p.refreshClasses()
	if got := p.AppliedDemand(web); len(got) != 3 || got[1].Weight != 6 {
		t.Fatalf("after %v of churn the demand is %v, want eu/b counted (6)", DemandMaxDelay, got)
	}
	for _, s := range churn {
		s.Close()
	}
}
