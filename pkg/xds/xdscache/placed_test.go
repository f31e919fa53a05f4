package xdscache_test

import (
	"maps"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/xds/xdscache"
)

// openPlaced opens a stream placed in class key, whatever node claims.
func openPlaced(t *testing.T, c *xdscache.Cache, delta bool, node *core.Node, key string) *zoneClient {
	s := c.NewStream(delta)
	s.Place(key)
	s.WeighDemand(weighNode, "")
	s.SetNode(node)
	return &zoneClient{t: t, c: c, s: s, delta: delta}
}

// TestPlacedStream: a stream placed in zone A whose node claims zone B is
// in A's class, counted in A's census and demand, and sent A's variant,
// over SotW and Delta; a stream placed in no class ("": its identity's
// node names a zone but no region) is sent the base and counted nowhere,
// whatever its node claims; an unplaced stream keeps its node's claim.
func TestPlacedStream(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		put("", "c1", "base", "v1"), put(zoneA, "c1", "A", "v1"), put(zoneB, "c1", "B", "v1"),
	}})
	forger := withDemand(inB, structpb.NewNumberValue(1_000_000))
	for _, delta := range []bool{false, true} {
		placed := openPlaced(t, c, delta, forger, zoneA)
		placed.subscribe(nil, "c1")
		if class, how, demand := placed.s.Class(); class != zoneA || how != xdscache.Admitted || demand != 1_000_000 {
			t.Errorf("delta=%v: placed in %s, claiming %s: class %q (%v), demand %d; want %s", delta, zoneA, zoneB, class, how, demand, zoneA)
		}
		if got := placed.recv(); !strings.HasPrefix(got, "c1=A@") {
			t.Errorf("delta=%v: placed in %s, sent %s; want its variant", delta, zoneA, got)
		}
		if got, want := c.Demand(EDS, "c1"), map[string]uint64{zoneA: 1_000_000}; !maps.Equal(got, want) {
			t.Errorf("delta=%v: demand %v, want %v (the claim's zone B counts nothing)", delta, got, want)
		}
		if got := c.Zones(0); !maps.Equal(got, map[string]int{zoneA: 1}) {
			t.Errorf("delta=%v: census %v, want one stream of %s", delta, got, zoneA)
		}
		placed.s.Close()
	}

	nowhere := openPlaced(t, c, false, forger, "")
	nowhere.subscribe(nil, "c1")
	if class, _, _ := nowhere.s.Class(); class != "" {
		t.Errorf("placed in no class: class %q", class)
	}
	if got := nowhere.recv(); got != "c1=base@v1" {
		t.Errorf("placed in no class: sent %s, want the base", got)
	}
	if got := c.Demand(EDS, "c1"); got != nil {
		t.Errorf("placed in no class: demand %v, want none", got)
	}
	nowhere.s.Close()

	claimed := openZoned(t, c, false, forger)
	claimed.subscribe(nil, "c1")
	if got := claimed.recv(); got != "c1=B@v1" {
		t.Errorf("not placed: sent %s, want its claim's variant", got)
	}
	claimed.s.Close()
}
