package publish_test

import (
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	lua "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

func spatialBatch() topology.Batch {
	var b topology.Batch
	for i, r := range []string{"eu-west", "eu-central", "us-east"} {
		b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "geo", Name: "cad-" + r}, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane})
		b.PutEndpointSet(replicaSet(r, i, weights.Ready))
	}
	b.PutSpatialDomain(topology.SpatialDomain{Key: topology.Key{Namespace: "geo", Name: "cadastre"}, Domain: partitionmap.Domain{
		Name: "cadastre", GridDeg: 5, MaxCells: 256, CapPercent: partitionmap.NoCap,
		Replicas: []partitionmap.Replica{{Name: "eu-west", Upstream: "cad-eu-west", Region: "eu-west"},
			{Name: "eu-central", Upstream: "cad-eu-central", Region: "eu-central"}, {Name: "us-east", Upstream: "cad-us-east", Region: "us-east"}},
		Products: []partitionmap.Product{{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu-west", "eu-central"}}},
	}})
	b.PutPartition(topology.Partition{Key: topology.Key{Namespace: "geo", Name: "de"}, Domain: "cadastre",
		Extent: partitionmap.BBox{West: 5, South: 45, East: 15, North: 55}, Replicas: []string{"eu-central"}})
	return b
}

func replicaSet(region string, i int, admin weights.AdminState) topology.EndpointSet {
	s := topology.EndpointSet{Key: topology.Key{Namespace: "geo", Name: "cad-" + region}, Upstream: "cad-" + region,
		Locality: weights.Locality{Region: region, Zone: "a"}}
	for j := range 2 {
		s.Endpoints = append(s.Endpoints, topology.Endpoint{Address: "10.0." + string(rune('1'+i)) + "." + string(rune('1'+j)), Port: 8080, Weight: 1, Admin: admin})
	}
	return s
}

func names(entries []*xdscache.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

func spatialLua(t *testing.T, c *xdscache.Cache) string {
	t.Helper()
	rs := c.Resources(int(translate.Weighted))[resource.RouteType]
	for _, e := range rs {
		if e.Name != translate.SpatialRouteName {
			continue
		}
		rc := &route.RouteConfiguration{}
		if err := e.Decode(rc); err != nil {
			t.Fatal(err)
		}
		var pr lua.LuaPerRoute
		if err := rc.VirtualHosts[0].TypedPerFilterConfig[translate.SpatialLuaFilter].UnmarshalTo(&pr); err != nil {
			t.Fatal(err)
		}
		return pr.GetSourceCode().GetInlineString()
	}
	t.Fatal("no spatial RouteConfiguration published")
	return ""
}

func TestPublishSpatial(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	if _, err := p.Publish(apply(t, d, spatialBatch())); err != nil {
		t.Fatal(err)
	}
	envoy := c.Resources(int(translate.Weighted))
	if err := publish.Consistent(envoy); err != nil {
		t.Fatal(err)
	}
	clusters := strings.Join(names(envoy[resource.ClusterType]), " ")
	for _, want := range []string{"spatial:geo:cadastre:eu-west", "spatial:geo:cadastre:eu-central", "spatial:geo:cadastre:us-east", "spatial-pool:geo:cadastre:parcels"} {
		if !strings.Contains(clusters, want) {
			t.Errorf("CDS %s lacks %s", clusters, want)
		}
	}
	if got := names(envoy[resource.ListenerType]); len(got) != 1 || got[0] != translate.SpatialListenerName {
		t.Fatalf("Envoy listeners %v", got)
	}
	grpc := c.Resources(int(translate.PerEndpoint))
	for _, e := range append(grpc[resource.ClusterType], grpc[resource.RouteType]...) {
		if strings.HasPrefix(e.Name, "spatial") {
			t.Fatalf("the gRPC view holds spatial resource %s", e.Name)
		}
	}
	lua1 := spatialLua(t, c)
	if !strings.Contains(lua1, `healthy = true`) || strings.Contains(lua1, `healthy = false`) {
		t.Fatalf("all replicas should be healthy:\n%s", lua1[:600])
	}

	// An endpoint change inside a healthy replica: its CLAs, never RDS.
	var b topology.Batch
	s := replicaSet("eu-west", 0, weights.Ready)
	s.Endpoints[0].Weight = 3
	b.PutEndpointSet(s)
	st, err := p.Publish(apply(t, d, b))
	if err != nil {
		t.Fatal(err)
	}
	if st.Changes.Of(resource.RouteType) != 0 || st.Changes.Of(resource.ClusterType) != 0 || st.Changes.Of(resource.EndpointType) == 0 {
		t.Fatalf("endpoint change inside a healthy replica published %v", st.Changes)
	}

	// The replica losing all capacity: RDS with the new health, and the pool without it.
	b = topology.Batch{}
	b.PutEndpointSet(replicaSet("eu-central", 1, weights.Unavailable))
	st, err = p.Publish(apply(t, d, b))
	if err != nil {
		t.Fatal(err)
	}
	if st.Changes.Of(resource.RouteType) != 1 || st.Changes.Of(resource.ListenerType) != 0 {
		t.Fatalf("health change published %v", st.Changes)
	}
	lua2 := spatialLua(t, c)
	if !strings.Contains(lua2, `name = "eu-central", region = "eu-central", cluster = "spatial:geo:cadastre:eu-central", healthy = false`) {
		t.Fatalf("the new Lua does not carry eu-central unhealthy:\n%s", lua2[:700])
	}

	// Deleting the domain removes the listener, the routes and its clusters.
	b = topology.Batch{}
	b.DeleteSpatialDomain(topology.Key{Namespace: "geo", Name: "cadastre"})
	if _, err := p.Publish(apply(t, d, b)); err != nil {
		t.Fatal(err)
	}
	envoy = c.Resources(int(translate.Weighted))
	for _, e := range append(append(envoy[resource.ClusterType], envoy[resource.ListenerType]...), envoy[resource.RouteType]...) {
		if strings.HasPrefix(e.Name, "spatial") {
			t.Fatalf("%s survived the domain's deletion", e.Name)
		}
	}
}

// TestPublishSpatialLoadReporting: turning a domain's loadReporting on
// republishes every replica and pool cluster with lrs_server self (though
// no upstream changed), and turning it off takes it away again.
func TestPublishSpatialLoadReporting(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	if _, err := p.Publish(apply(t, d, spatialBatch())); err != nil {
		t.Fatal(err)
	}
	reporting := func() map[string]bool {
		out := map[string]bool{}
		for _, e := range c.Resources(int(translate.Weighted))[resource.ClusterType] {
			if !strings.HasPrefix(e.Name, "spatial") {
				continue
			}
			cl := &cluster.Cluster{}
			if err := e.Decode(cl); err != nil {
				t.Fatal(err)
			}
			out[e.Name] = cl.GetLrsServer().GetSelf() != nil
		}
		return out
	}
	for _, interval := range []time.Duration{0, 5 * time.Second, 0} {
		var b topology.Batch
		sd := topology.SpatialDomain{Key: topology.Key{Namespace: "geo", Name: "cadastre"}, LoadReportInterval: interval}
		sd.Domain = spatialDomainOf(t, d)
		b.PutSpatialDomain(sd)
		st, err := p.Publish(apply(t, d, b))
		if err != nil {
			t.Fatal(err)
		}
		got := reporting()
		if len(got) != 4 {
			t.Fatalf("spatial clusters %v", got)
		}
		for name, lrs := range got {
			if lrs != (interval > 0) {
				t.Errorf("loadReporting %v: %s has lrs_server %v", interval, name, lrs)
			}
		}
		if interval > 0 && st.Changes.Of(resource.ClusterType) != 4 {
			t.Errorf("turning loadReporting on changed %d clusters, want 4", st.Changes.Of(resource.ClusterType))
		}
	}
}

// spatialDomainOf is the cadastre domain's map domain as d holds it.
func spatialDomainOf(t *testing.T, d *topology.Directory) partitionmap.Domain {
	t.Helper()
	st := d.Current().SpatialDomain(topology.Key{Namespace: "geo", Name: "cadastre"})
	if st == nil {
		t.Fatal("no cadastre domain")
	}
	return st.Domain.Domain
}
