package xdscache_test

import (
	"maps"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/xds/xdscache"
)

// openCapped opens a stream of instance that the server weighs at its
// node's claim within max (0: not capped), as the server does.
func openCapped(t *testing.T, c *xdscache.Cache, node *core.Node, max uint64, instance string) *zoneClient {
	s := c.NewStream(false)
	s.WeighDemand(func(n *core.Node) uint64 {
		if w := weighNode(n); max == 0 || w < max {
			return w
		}
		return max
	}, instance)
	s.SetNode(node)
	return &zoneClient{t: t, c: c, s: s}
}

// TestDemandCapAndInstance: a stream counts what the server weighs it at
// (here its claim within a cap); the streams of one instance count once, in the class of the largest (the
// least class on a tie), and again in full as the others close; streams
// of no instance count each.
func TestDemandCapAndInstance(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{put("", "c1", "base", "v1")}})
	want := func(step string, w map[string]uint64) {
		t.Helper()
		if got := c.Demand(EDS, "c1"); !maps.Equal(got, w) {
			t.Errorf("%s: demand %v, want %v", step, got, w)
		}
	}
	capped := openCapped(t, c, withDemand(inA, structpb.NewNumberValue(1_000_000)), 4, "cert:x")
	capped.subscribe(nil, "c1")
	want("one stream claiming 1000000, capped at 4", map[string]uint64{zoneA: 4})
	if _, _, d := capped.s.Class(); d != 4 {
		t.Errorf("Class demand %d, want 4", d)
	}
	again := openCapped(t, c, withDemand(inA, structpb.NewNumberValue(3)), 4, "cert:x")
	again.subscribe(nil, "c1")
	elsewhere := openCapped(t, c, withDemand(inB, structpb.NewNumberValue(4)), 4, "cert:x")
	elsewhere.subscribe(nil, "c1")
	want("three streams of one instance", map[string]uint64{zoneA: 4})
	capped.s.Close()
	want("the largest closed", map[string]uint64{zoneB: 4})
	elsewhere.s.Close()
	want("one stream left", map[string]uint64{zoneA: 3})
	anon := openCapped(t, c, withDemand(inA, structpb.NewNumberValue(7)), 0, "")
	anon.subscribe(nil, "c1")
	other := openCapped(t, c, withDemand(inA, structpb.NewNumberValue(7)), 0, "")
	other.subscribe(nil, "c1")
	want("two streams of no instance, uncapped", map[string]uint64{zoneA: 17})
	for _, z := range []*zoneClient{again, anon, other} {
		z.s.Close()
	}
	want("all closed", nil)
}
