package xdscache_test

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/xds/xdscache"
)

func TestVisibility(t *testing.T) {
	a, b, anon := xdscache.Audience{Namespace: "a"}, xdscache.Audience{Namespace: "b"}, xdscache.Anonymous
	for _, tc := range []struct {
		v              xdscache.Visibility
		str            string
		seeA, seeB, an bool
	}{
		{xdscache.Visibility{}, "*", true, true, true},
		{xdscache.VisibleToNamespaces("a"), "a", true, false, false},
		{xdscache.VisibleToNamespaces("c", "a", "a"), "a,c", true, false, false},
		{xdscache.VisibleToNamespaces("", "b"), "b", false, true, false},
		{xdscache.VisibleToNamespaces(), "", false, false, false},
	} {
		if got := tc.v.String(); got != tc.str {
			t.Errorf("%v: String %q, want %q", tc.v.Namespaces(), got, tc.str)
		}
		if tc.v.Allows(a) != tc.seeA || tc.v.Allows(b) != tc.seeB || tc.v.Allows(anon) != tc.an {
			t.Errorf("%s: a %v b %v anonymous %v, want %v %v %v", tc.str, tc.v.Allows(a), tc.v.Allows(b), tc.v.Allows(anon), tc.seeA, tc.seeB, tc.an)
		}
	}
	if xdscache.VisibleToNamespaces("b", "a") != xdscache.VisibleToNamespaces("a", "b") {
		t.Error("the same namespaces in another order are another visibility")
	}
	if anon.String() != "anonymous" || !anon.IsAnonymous() || a.IsAnonymous() {
		t.Errorf("anonymous audience: %q %v %v", anon, anon.IsAnonymous(), a.IsAnonymous())
	}
}

func openFor(t testing.TB, c *xdscache.Cache, delta bool, node *core.Node, aud xdscache.Audience) *zoneClient {
	s := c.NewStreamFor(delta, aud)
	s.SetNode(node)
	return &zoneClient{t: t, c: c, s: s, delta: delta}
}

func restrictedPut(zone, name, label, version string, ns ...string) xdscache.Change {
	ch := put(zone, name, label, version)
	if zone == "" {
		ch.Entry = ch.Entry.WithVisibility(xdscache.VisibleToNamespaces(ns...))
	}
	return ch
}

// TestAudienceVariants: a zone's variant of a restricted resource goes to
// the zone's streams of the audiences that may read its base, and moves
// when who may read the base changes (the variant itself unchanged).
func TestAudienceVariants(t *testing.T) {
	for _, delta := range []bool{false, true} {
		for _, wildcard := range []bool{false, true} {
			t.Run(fmt.Sprintf("delta=%v/wildcard=%v", delta, wildcard), func(t *testing.T) {
				c := newCache()
				c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
					restrictedPut("", "c1", "base1", "v1", "a"), put(zoneA, "c1", "A1", "v1"), put("", "c2", "open", "v1"),
				}})
				ca, cb := openFor(t, c, delta, inA, xdscache.Audience{Namespace: "a"}), openFor(t, c, delta, inA, xdscache.Audience{Namespace: "b"})
				anon := openFor(t, c, delta, inA, xdscache.Anonymous)
				for _, z := range []*zoneClient{ca, cb, anon} {
					if wildcard {
						z.subscribe(nil, "*")
					} else {
						z.subscribe(nil, "c1", "c2")
					}
				}
				want := func(z *zoneClient, got string) {
					t.Helper()
					if s := z.recv(); s != got {
						t.Errorf("%s: got %q, want %q", z.s.Audience(), s, got)
					}
				}
				if delta {
					want(ca, "c1=A1@v1@r1/a c2=open@v1")
				} else {
					want(ca, "c1=A1@v1 c2=open@v1")
				}
				want(cb, "c2=open@v1")
				want(anon, "c2=open@v1")

				// exported to b instead: the same bytes, others who may read them
				c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{restrictedPut("", "c1", "base1", "v1", "b")}})
				if delta {
					want(ca, "-c1")
					want(cb, "c1=A1@v1@r1/a")
				} else {
					ca.silent() // SotW endpoints are not full state: the client drops them with the cluster
					want(cb, "c1=A1@v2")
				}
				anon.silent()

				// a new variant reaches only the zone's streams that may read it
				c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{put(zoneA, "c1", "A2", "v3")}})
				ca.silent()
				anon.silent()
				if delta {
					want(cb, "c1=A2@v3@r1/a")
				} else {
					want(cb, "c1=A2@v3")
				}
			})
		}
	}
}

// TestAudienceDemand: a stream that subscribes to endpoints it may not
// read counts for nothing in their demand.
func TestAudienceDemand(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{restrictedPut("", "c1", "base1", "v1", "a")}})
	ca := openFor(t, c, true, inA, xdscache.Audience{Namespace: "a"})
	cb := openFor(t, c, true, inA, xdscache.Audience{Namespace: "b"})
	ca.subscribe(nil, "c1")
	cb.subscribe(nil, "c1")
	if got := c.Demand(EDS, "c1"); got[zoneA] != 1 {
		t.Errorf("demand of c1: %v, want %s: 1 (a's stream only)", got, zoneA)
	}
}

// TestAudienceDeltaInitial: a Delta client that reconnects is told of the
// removal of what it holds and may not read, and of nothing else it may
// not read.
func TestAudienceDeltaInitial(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		restrictedPut("", "mine", "m", "v1", "a"), restrictedPut("", "theirs", "t", "v1", "b"), restrictedPut("", "held", "h", "v1", "b"),
	}})
	s := c.NewStreamFor(true, xdscache.Audience{Namespace: "a"})
	if err := s.Delta(xdscache.DeltaRequest{TypeURL: EDS, Initial: map[string]string{"held": "v1"}}); err != nil {
		t.Fatal(err)
	}
	out := s.Next(nil)
	if len(out) != 1 || len(out[0].Entries) != 1 || out[0].Entries[0].Name != "mine" || len(out[0].Removed) != 1 || out[0].Removed[0] != "held" {
		t.Fatalf("got %+v, want mine, and held removed", out)
	}
}
