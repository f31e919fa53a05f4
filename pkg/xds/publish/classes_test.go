package publish

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
)

var web = topology.Key{Namespace: "shop", Name: "web"}

// zoned is web under mode with two endpoints in each of eu/a, eu/b and us/c.
func zoned(mode affinity.Mode, edit ...func(*topology.Upstream)) topology.Batch {
	return topologytest.Zoned(web, mode, edit...)
}

// envoyClasses are client classes with clients in Envoy's view.
func envoyClasses(names ...string) *topology.ClientClasses {
	views := make([][]string, translate.NumRenderings)
	views[translate.Weighted] = names
	return topology.NewClientClasses(views)
}

// withClasses is a batch that makes names (of Envoy's view) the client
// classes that have clients, as the demand signal hands them over.
func withClasses(names ...string) topology.Batch {
	var b topology.Batch
	b.SetClientClasses(envoyClasses(names...))
	return b
}

// publishBatch applies b to d and publishes the snapshot.
func publishBatch(t *testing.T, p *Publisher, d *topology.Directory, b topology.Batch) (*topology.Snapshot, Stats) {
	t.Helper()
	s, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Publish(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
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

// A class gets its variants when the snapshot says it has clients and
// loses them when it no longer does; clients without a locality receive the
// base.
func TestVariantsFollowTheClasses(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	d := topology.NewDirectory()
	publishBatch(t, p, d, zoned(affinity.PreferSameZone))
	base := map[string]uint32{"eu/a": 333_334, "eu/b": 333_333, "us/c": 333_333}
	if got := trafficOf(t, c, ""); !maps.Equal(got, base) {
		t.Fatalf("base: %v, want %v", got, base)
	}
	_, st := publishBatch(t, p, d, withClasses("eu/a", "us/c"))
	if st.Version != p.Version(st.Revision) || st.Changes.Of(resource.EndpointType) != 2 {
		t.Errorf("two classes joining: %+v", st)
	}
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
	publishBatch(t, p, d, withClasses("us/c"))
	if got := c.VariantZones(int(translate.Weighted)); !slices.Equal(got, []string{"us/c"}) {
		t.Fatalf("after eu/a left, variants for %v", got)
	}
	// Back to None: every variant goes.
	publishBatch(t, p, d, zoned(affinity.None))
	if got := c.VariantZones(int(translate.Weighted)); len(got) != 0 {
		t.Fatalf("mode None, yet variants for %v", got)
	}
}

// A Balanced split is divided by the demand the upstream's state carries:
// capacity eu/a, eu/b, us/c one third each; demand 3 in eu/a, 1 in us/c. A
// change of demand is a revision of its own, published under the one
// version scheme.
func TestBalancedRendersTheAppliedDemand(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	d := topology.NewDirectory()
	b := zoned(affinity.Balanced)
	b.SetClientClasses(envoyClasses("eu/a", "us/c"))
	s, _ := publishBatch(t, p, d, b)
	if got := trafficOf(t, c, "eu/a"); !maps.Equal(got, trafficOf(t, c, "")) {
		t.Errorf("without demand eu/a receives %v, want the base", got)
	}
	want := []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 3}, {Zone: affinity.Zone{Region: "us", Zone: "c"}, Weight: 1}}
	var dm topology.Batch
	dm.PutDemand(web, topology.AppliedDemand{Zones: want})
	s, st := publishBatch(t, p, d, dm)
	if st.Version != "inst-"+fmt.Sprint(s.Revision) || st.Upstreams != 1 {
		t.Errorf("the demand published as %+v", st)
	}
	// U = 1,000,000, D = 4: eu/a keeps (1/3)/(3/4) = 4/9 local and sends
	// the rest to eu/b and us/c in proportion to their surpluses, 1/3 and
	// 1/12: 444,445 / 444,444 / 111,111; us/c keeps all.
	if got := trafficOf(t, c, "eu/a"); !maps.Equal(got, map[string]uint32{"eu/a": 444_445, "eu/b": 444_444, "us/c": 111_111}) {
		t.Errorf("eu/a: %v", got)
	}
	for _, class := range []string{"eu/a", "us/c"} {
		split, err := s.Upstream(web).ForClass(topology.ClassZone(class), want)
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
	// the demand withdrawn: every class receives the base again
	var none topology.Batch
	none.PutDemand(web, topology.AppliedDemand{})
	publishBatch(t, p, d, none)
	if got := c.VariantZones(int(translate.Weighted)); len(got) != 0 {
		t.Errorf("without demand, variants for %v", got)
	}
}

// Under healthAdjustment Proxy a class is sent its proximity priorities
// (the source topology re-prioritised), for the proxy's own math.
func TestProxyModeClassesCarryProximityPriorities(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	b := zoned(affinity.PreferSameZone, func(u *topology.Upstream) { u.HealthAdjustment = topology.Proxy })
	b.SetClientClasses(envoyClasses("eu/b"))
	publishBatch(t, p, topology.NewDirectory(), b)
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
	b := zoned(affinity.PreferSameZone)
	b.SetClientClasses(envoyClasses("eu/a"))
	for prio := range uint32(50) {
		for i, z := range []affinity.Zone{{Region: "eu", Zone: "a"}, {Region: "eu", Zone: "b"}, {Region: "us", Zone: "c"}} {
			b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: fmt.Sprintf("p%d-%s", prio, z.Zone)}, Upstream: "web",
				Locality: weights.Locality{Region: z.Region, Zone: z.Zone}, Priority: &prio,
				Endpoints: []topology.Endpoint{{Address: fmt.Sprintf("10.1.%d.%d", prio, i), Port: 80, Weight: 1}}})
		}
	}
	d := topology.NewDirectory()
	publishBatch(t, p, d, b)
	if got := c.VariantZones(int(translate.Weighted)); len(got) != 0 {
		t.Fatalf("variants for %v, want none: 150 effective priorities do not fit", got)
	}
	if !p.upstream[web].failed["eu/a"] {
		t.Fatal("the class is not recorded as failed")
	}
	// the class's last client leaves: its failure is not kept
	publishBatch(t, p, d, withClasses())
	if len(p.upstream[web].failed) != 0 {
		t.Fatalf("failures kept for classes that left: %v", p.upstream[web].failed)
	}
}

// Under PreferSameRegion the zone classes of one region receive one
// derivation, encoded once and shared.
func TestPreferSameRegionSharesOneEncodingPerRegion(t *testing.T) {
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := New(c, "inst", nil)
	batch := zoned(affinity.PreferSameRegion)
	batch.SetClientClasses(envoyClasses("eu/a", "eu/b", "us/c"))
	publishBatch(t, p, topology.NewDirectory(), batch)
	v := p.upstream[web].variants
	a, b, us := v[variantKey{int(translate.Weighted), "eu/a"}], v[variantKey{int(translate.Weighted), "eu/b"}], v[variantKey{int(translate.Weighted), "us/c"}]
	if a == nil || a != b || us == nil || us == a {
		t.Fatalf("eu/a %p, eu/b %p, us/c %p: want eu/a and eu/b one entry, us/c another", a, b, us)
	}
	if got, want := trafficOf(t, c, "eu/b"), map[string]uint32{"eu/a": 500_000, "eu/b": 500_000}; !maps.Equal(got, want) {
		t.Fatalf("eu/b receives %v, want %v", got, want)
	}
}
