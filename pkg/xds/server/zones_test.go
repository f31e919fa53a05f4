package server_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"poise.dev/poise/pkg/xds/xdscache"
)

// Over real streams, a client's node locality chooses its zone: SotW and
// Delta clients of zone r1/a are sent its variant of c1, a client without
// a locality the base, and the census counts the located ones.
func TestZoneVariantsOverTheWire(t *testing.T) {
	h := newHarness(t)
	publishV1(t, h)
	h.apply("v2", []xdscache.Change{{View: 0, TypeURL: EDS, Name: "c1", Zone: "r1/a", Entry: entry(t, "v2", cla("c1", 9001))}})
	located := func(id string) *core.Node {
		n := envoyNode(id)
		n.Locality = &core.Locality{Region: "r1", Zone: "a"}
		return n
	}
	s := h.sotw(located("sotw-a"))
	s.subscribe(EDS, "c1", "c2")
	if r := s.expect(EDS, "v2", "c1", "c2"); portOf(t, r.GetResources()[0]) != 9001 || portOf(t, r.GetResources()[1]) != 8002 {
		t.Fatalf("zone r1/a over SotW: ports %d %d", portOf(t, r.GetResources()[0]), portOf(t, r.GetResources()[1]))
	}
	d := h.delta(located("delta-a"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1"}})
	if r := d.expect(EDS, at("v2@r1/a", "c1"), nil); portOf(t, r.GetResources()[0].GetResource()) != 9001 {
		t.Fatalf("zone r1/a over Delta: %v", r.GetResources()[0])
	}
	base := h.sotw(envoyNode("base"))
	base.subscribe(EDS, "c1")
	if r := base.expect(EDS, "v2", "c1"); portOf(t, r.GetResources()[0]) != 8001 {
		t.Fatalf("no locality: port %d", portOf(t, r.GetResources()[0]))
	}
	eventually(t, "two streams of r1/a", func() bool { return h.cache.Zones(0)["r1/a"] == 2 })
	if z := h.client("delta-a").Zone; z != "r1/a" {
		t.Fatalf("/debug/clients zone %q", z)
	}
}
