package xdscache_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/xds/xdscache"
)

const EDS = resource.EndpointType

func zoneNode(id, region, zone string) *core.Node {
	return &core.Node{Id: id, UserAgentName: "envoy", Locality: &core.Locality{Region: region, Zone: zone, SubZone: "ignored"}}
}

var (
	inA   = zoneNode("a", "r1", "a")
	inB   = zoneNode("b", "r1", "b")
	zoneA = "r1/a"
	zoneB = "r1/b"
)

// content is a CLA whose bytes say what it is, so a test can tell base from variant.
func content(name, label, version string) *xdscache.Entry {
	return xdscache.NewEntryBytes(name, version, EDS, []byte(label))
}

// put and del build the changes of one Update: zone "" is the base.
func put(zone, name, label, version string) xdscache.Change {
	return xdscache.Change{TypeURL: EDS, Name: name, Zone: zone, Entry: content(name, label, version)}
}

func del(zone, name string) xdscache.Change {
	return xdscache.Change{TypeURL: EDS, Name: name, Zone: zone}
}

// zoneClient drives a watch of one SotW or Delta stream and ACKs what it
// receives: of EDS unless typ says another type.
type zoneClient struct {
	t     testing.TB
	c     *xdscache.Cache
	s     *xdscache.Stream
	delta bool
	typ   string
	names []string
	out   []xdscache.Response
}

func (z *zoneClient) typeURL() string {
	if z.typ == "" {
		return EDS
	}
	return z.typ
}

func openZoned(t testing.TB, c *xdscache.Cache, delta bool, node *core.Node) *zoneClient {
	s := c.NewStream(delta)
	s.WeighDemand(weighNode, "")
	s.SetNode(node)
	return &zoneClient{t: t, c: c, s: s, delta: delta}
}

func (z *zoneClient) subscribe(initial map[string]string, names ...string) {
	z.t.Helper()
	z.names = names
	var err error
	if z.delta {
		err = z.s.Delta(xdscache.DeltaRequest{TypeURL: z.typeURL(), Subscribe: names, Initial: initial})
	} else {
		err = z.s.Sotw(xdscache.SotwRequest{TypeURL: z.typeURL(), NamesHash: z.c.HashNames(names), Names: func() []string { return names }})
	}
	if err != nil {
		z.t.Fatal(err)
	}
}

// woken reports (and clears) the stream's wake signal.
func (z *zoneClient) woken() bool {
	select {
	case <-z.s.Wake():
		return true
	default:
		return false
	}
}

// recv takes the one response ready, ACKs it, and describes it as
// "name=content@version ... -removed": the version is the per-resource
// version for Delta and the response's for SotW.
func (z *zoneClient) recv() string {
	z.t.Helper()
	z.out = z.s.Next(z.out[:0])
	if len(z.out) != 1 {
		z.t.Fatalf("%s: %d responses ready, want one", z.s.Zone(), len(z.out))
	}
	r := z.out[0]
	var parts []string
	for _, e := range r.Entries {
		v := e.Version
		if !z.delta {
			v = r.Version
		}
		parts = append(parts, fmt.Sprintf("%s=%s@%s", e.Name, e.Any.GetValue(), v))
	}
	for _, n := range r.Removed {
		parts = append(parts, "-"+n)
	}
	var err error
	if z.delta {
		err = z.s.Delta(xdscache.DeltaRequest{TypeURL: z.typeURL(), Nonce: r.Nonce})
	} else {
		err = z.s.Sotw(xdscache.SotwRequest{TypeURL: z.typeURL(), Version: r.Version, Nonce: r.Nonce,
			NamesHash: z.c.HashNames(z.names), Names: func() []string { return z.names }})
	}
	if err != nil {
		z.t.Fatal(err)
	}
	return strings.Join(parts, " ")
}

func (z *zoneClient) silent() {
	z.t.Helper()
	if z.out = z.s.Next(z.out[:0]); len(z.out) != 0 {
		z.t.Fatalf("zone %q: unexpected %v removed %v", z.s.Zone(), entryNames(z.out[0].Entries), z.out[0].Removed)
	}
}

// TestZoneVariants: streams of two zones and one without a locality, SotW
// and Delta, named and wildcard: each is sent its zone's variant or the
// base; a change wakes and reaches only the streams it changes.
func TestZoneVariants(t *testing.T) {
	for _, tc := range []struct {
		delta    bool
		wildcard bool
	}{{false, false}, {false, true}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("delta=%v/wildcard=%v", tc.delta, tc.wildcard), func(t *testing.T) {
			c := newCache()
			c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
				put("", "c1", "base1", "v1"), put("", "c2", "base1", "v1"), put(zoneA, "c1", "A1", "v1"),
			}})
			a, b, none := openZoned(t, c, tc.delta, inA), openZoned(t, c, tc.delta, inB), openZoned(t, c, tc.delta, envoy)
			all := []*zoneClient{a, b, none}
			for _, z := range all {
				if tc.wildcard {
					z.subscribe(nil, "*")
				} else {
					z.subscribe(nil, "c1", "c2")
				}
			}
			// SotW names the response's version; Delta each resource's own.
			va1 := map[bool]string{false: "v1", true: "v1@r1/a"}[tc.delta]
			for z, want := range map[*zoneClient]string{
				a: "c1=A1@" + va1 + " c2=base1@v1", b: "c1=base1@v1 c2=base1@v1", none: "c1=base1@v1 c2=base1@v1",
			} {
				if got := z.recv(); got != want {
					t.Fatalf("zone %q: got %s, want %s", z.s.Zone(), got, want)
				}
			}
			sotwDelta := func(sotw, delta string) string {
				if tc.delta {
					return delta
				}
				return sotw
			}
			steps := []struct {
				what    string
				changes []xdscache.Change
				want    map[*zoneClient]string // "" is not woken (and silent)
			}{
				{"a variant change reaches its zone alone", []xdscache.Change{put(zoneA, "c1", "A2", "v2")},
					map[*zoneClient]string{a: "c1=A2@" + sotwDelta("v2", "v2@r1/a")}},
				{"a base change passes a zone with a variant by", []xdscache.Change{put("", "c1", "base3", "v3")},
					map[*zoneClient]string{b: "c1=base3@v3", none: "c1=base3@v3"}},
				{"a base change of another name reaches every zone", []xdscache.Change{put("", "c2", "base4", "v4")},
					map[*zoneClient]string{a: "c2=base4@v4", b: "c2=base4@v4", none: "c2=base4@v4"}},
				{"deleting a variant sends its zone the base", []xdscache.Change{del(zoneA, "c1")},
					map[*zoneClient]string{a: "c1=base3@" + sotwDelta("v5", "v3")}},
				{"variants of two zones", []xdscache.Change{put(zoneA, "c1", "A6", "v6"), put(zoneB, "c1", "B6", "v6")},
					map[*zoneClient]string{a: "c1=A6@" + sotwDelta("v6", "v6@r1/a"), b: "c1=B6@" + sotwDelta("v6", "v6@r1/b")}},
				{"an unknown zone's variant wakes nobody", []xdscache.Change{put("r9/z", "c1", "Z7", "v7")}, nil},
				// SotW does not tell a client that a CLA is gone: it is not
				// sent, and the stream is woken for nothing.
				{"deleting the base deletes its variants", []xdscache.Change{del("", "c1")},
					map[*zoneClient]string{a: sotwDelta("", "-c1"), b: sotwDelta("", "-c1"), none: sotwDelta("", "-c1")}},
				{"a variant without its base is ignored", []xdscache.Change{put(zoneA, "c1", "A9", "v9")}, nil},
				{"the base again, for every zone", []xdscache.Change{put("", "c1", "base10", "v10")},
					map[*zoneClient]string{a: "c1=base10@v10", b: "c1=base10@v10", none: "c1=base10@v10"}},
			}
			for i, st := range steps {
				for _, z := range all {
					z.woken()
				}
				c.Apply(xdscache.Update{Version: fmt.Sprint("v", i+2), Changes: st.changes})
				for _, z := range all {
					want, woken := st.want[z]
					if z.woken() != woken {
						t.Fatalf("%s: zone %q woken %v, want %v", st.what, z.s.Zone(), !woken, woken)
					}
					if want == "" {
						z.silent()
						continue
					}
					if got := z.recv(); got != want {
						t.Fatalf("%s: zone %q got %s, want %s", st.what, z.s.Zone(), got, want)
					}
				}
			}
			if zs := c.VariantZones(0); len(zs) != 0 {
				t.Fatalf("variant zones %v, want none: they went with their base", zs)
			}
		})
	}
}

// A Delta client's per-resource versions tell base and variant apart even
// when both are published at one version, so a reconnecting client holding
// the other one is sent what its zone gets.
func TestZoneVariantDeltaVersions(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{put("", "c1", "base1", "v1"), put(zoneA, "c1", "A1", "v1")}})
	for _, tc := range []struct {
		what  string
		node  *core.Node
		holds string
		want  string // "": an answer with nothing in it
	}{
		{"zone A holding the base gets the variant", inA, "v1", "c1=A1@v1@r1/a"},
		{"zone A holding the variant", inA, "v1@r1/a", ""},
		{"zone B holding the variant gets the base", inB, "v1@r1/a", "c1=base1@v1"},
		{"zone B holding the base", inB, "v1", ""},
		{"no locality holding the base", envoy, "v1", ""},
	} {
		z := openZoned(t, c, true, tc.node)
		z.subscribe(map[string]string{"c1": tc.holds}, "c1")
		if got := z.recv(); got != tc.want {
			t.Fatalf("%s: got %q, want %q", tc.what, got, tc.want)
		}
		z.silent()
		z.s.Close()
	}
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{del(zoneA, "c1")}})
	z := openZoned(t, c, true, inA)
	z.subscribe(map[string]string{"c1": "v1@r1/a"}, "c1")
	if got := z.recv(); got != "c1=base1@v1" {
		t.Fatalf("zone A holding the deleted variant: got %s", got)
	}
}

// What a zone is sent shows in ZoneResources and Fetch; Resources is the base.
func TestZoneVariantListings(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		put("", "c1", "base1", "v1"), put("", "c2", "base1", "v1"), put(zoneA, "c2", "A1", "v1"),
	}})
	show := func(es []*xdscache.Entry) string {
		var parts []string
		for _, e := range es {
			parts = append(parts, fmt.Sprintf("%s=%s@%s", e.Name, e.Any.GetValue(), e.Version))
		}
		return strings.Join(parts, " ")
	}
	for _, tc := range []struct {
		zone string
		node *core.Node
		want string
	}{
		{"", envoy, "c1=base1@v1 c2=base1@v1"},
		{zoneA, inA, "c1=base1@v1 c2=A1@v1@r1/a"},
		{zoneB, inB, "c1=base1@v1 c2=base1@v1"},
	} {
		if got := show(c.ZoneResources(0, tc.zone)[EDS]); got != tc.want {
			t.Errorf("ZoneResources(%q): %s, want %s", tc.zone, got, tc.want)
		}
		es, _, _, err := c.Fetch(t.Context(), xdscache.Anonymous, xdscache.ZoneKey(tc.node), tc.node, EDS, "", nil)
		if got := show(es); err != nil || got != tc.want {
			t.Errorf("Fetch from %q: %s %v, want %s", tc.zone, got, err, tc.want)
		}
	}
	if got := show(c.Resources(0)[EDS]); got != "c1=base1@v1 c2=base1@v1" {
		t.Errorf("Resources: %s", got)
	}
	if zs := c.VariantZones(0); !slices.Equal(zs, []string{zoneA}) {
		t.Errorf("VariantZones: %v", zs)
	}
}

// The census counts each view's open streams by zone, and says when it changes.
func TestZoneCensus(t *testing.T) {
	c := newCache()
	changed := c.ZonesChanged()
	grpcA := zoneNode("g", "r1", "a")
	grpcA.ClientFeatures = grpc.GetClientFeatures()
	var open []*xdscache.Stream
	for _, n := range []*core.Node{inA, inA, inB, envoy, nil, grpcA} {
		s := c.NewStream(len(open)%2 == 0)
		s.SetNode(n)
		open = append(open, s)
	}
	select {
	case <-changed:
	default:
		t.Fatal("ZonesChanged was not closed by a new zone")
	}
	for view, want := range []map[string]int{{zoneA: 2, zoneB: 1}, {zoneA: 1}} {
		if got := c.Zones(view); !maps.Equal(got, want) {
			t.Fatalf("view %d: %v, want %v", view, got, want)
		}
	}
	// Streams without a zone do not change it.
	changed = c.ZonesChanged()
	open[3].Close()
	open[4].Close()
	select {
	case <-changed:
		t.Fatal("ZonesChanged was closed by streams without a zone")
	default:
	}
	open[2].Close()
	open[0].Close()
	open[2].Close() // twice is once
	select {
	case <-changed:
	default:
		t.Fatal("ZonesChanged was not closed by a closing stream")
	}
	if got := c.Zones(0); !maps.Equal(got, map[string]int{zoneA: 1}) {
		t.Fatalf("after closing: %v", got)
	}
	open[1].Close()
	open[5].Close()
	if got0, got1 := c.Zones(0), c.Zones(1); len(got0)+len(got1) != 0 || c.ZoneOverflow() != 0 {
		t.Fatalf("all closed: %v %v overflow %d", got0, got1, c.ZoneOverflow())
	}
}

// At most MaxZones zone classes have streams at once: a stream of another
// zone joins its region's class, and when MaxZones region classes have
// streams too (or its region is overlong) it is sent the base and counted
// as overflow.
func TestMaxZones(t *testing.T) {
	c := xdscache.New(2, func(*core.Node) int { return 0 }, xdscache.WithMaxZones(2))
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		put("", "c1", "base", "v1"), put(zoneA, "c1", "A", "v1"), put("r1/c", "c1", "C", "v1"), put("r1", "c1", "R1", "v1"),
	}})
	a, b := openZoned(t, c, false, inA), openZoned(t, c, false, inB)
	long := zoneNode("long", strings.Repeat("r", xdscache.MaxZoneKey+1), "z")
	for _, tc := range []struct {
		node               *core.Node
		zone               string
		fallback, overflow int
		want               string
	}{
		{zoneNode("c", "r1", "c"), "r1", 1, 0, "c1=R1@v1"},
		{inA, zoneA, 1, 0, "c1=A@v1"}, // an admitted zone takes more streams
		{long, "", 1, 1, "c1=base@v1"},
		{zoneNode("x", "r2", "x"), "r2", 2, 1, "c1=base@v1"}, // a second region class; it has no variant
		{zoneNode("y", "r3", "y"), "", 2, 2, "c1=base@v1"},   // region classes are full too
		{zoneNode("r", "r3", ""), "", 2, 3, "c1=base@v1"},    // a region-only node claims a region class
	} {
		z := openZoned(t, c, false, tc.node)
		z.subscribe(nil, "c1")
		if got := z.recv(); z.s.Zone() != tc.zone || got != tc.want || c.ZoneOverflow() != tc.overflow || c.ZoneFallback() != tc.fallback {
			t.Fatalf("%s: zone %q fallback %d overflow %d got %s, want zone %q fallback %d overflow %d %s",
				tc.node.GetId(), z.s.Zone(), c.ZoneFallback(), c.ZoneOverflow(), got, tc.zone, tc.fallback, tc.overflow, tc.want)
		}
		defer z.s.Close()
	}
	if got := c.Zones(0); !maps.Equal(got, map[string]int{zoneA: 2, zoneB: 1, "r1": 1, "r2": 1}) {
		t.Fatalf("census %v", got)
	}
	// Once a zone is free, a new one is admitted.
	b.s.Close()
	z := openZoned(t, c, false, zoneNode("c", "r1", "c"))
	z.subscribe(nil, "c1")
	if got := z.recv(); z.s.Zone() != "r1/c" || got != "c1=C@v1" {
		t.Fatalf("after a zone left: zone %q got %s", z.s.Zone(), got)
	}
	a.s.Close()
}

// weightKey is the node metadata field these tests give a stream's demand
// weight in: the cache counts what the server weighs a node at (the server
// reads and caps the client's claim), and weighNode stands for the server.
const weightKey = "weight"

func withDemand(n *core.Node, v *structpb.Value) *core.Node {
	n = proto.Clone(n).(*core.Node)
	n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{weightKey: v}}
	return n
}

// weighNode is the weight withDemand gave n, 1 without one.
func weighNode(n *core.Node) uint64 {
	switch v := n.GetMetadata().GetFields()[weightKey].GetKind().(type) {
	case *structpb.Value_NumberValue:
		return uint64(v.NumberValue)
	case *structpb.Value_StringValue:
		w, _ := strconv.ParseUint(v.StringValue, 10, 64)
		return w
	}
	return 1
}

// Demand sums, per zone class, the demand weights of the streams that
// subscribe to a name (or to every name), and follows subscriptions and
// closes; each change closes ZonesChanged.
func TestDemand(t *testing.T) {
	c := xdscache.New(2, func(n *core.Node) int {
		if n.GetUserAgentName() == "grpc-go" {
			return 1
		}
		return 0
	})
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{put("", "c1", "base", "v1"), put("", "c2", "base", "v1")}})
	a1 := openZoned(t, c, false, withDemand(inA, structpb.NewNumberValue(3)))
	grpcA := proto.Clone(inA).(*core.Node)
	grpcA.UserAgentName = "grpc-go"
	a2 := openZoned(t, c, true, withDemand(grpcA, structpb.NewStringValue("5"))) // another view, the same class
	b := openZoned(t, c, false, inB)
	region := openZoned(t, c, false, zoneNode("r", "r2", "")) // a region class: not counted
	none := openZoned(t, c, false, &core.Node{Id: "n"})       // no class: not counted
	changed := c.ZonesChanged()
	a1.subscribe(nil, "c1")
	select {
	case <-changed:
	default:
		t.Fatal("a subscription of a zone class did not close ZonesChanged")
	}
	a2.subscribe(nil, "c1", "c2")
	b.subscribe(nil, "c2")
	region.subscribe(nil, "c1")
	none.subscribe(nil, "c1")
	for _, tc := range []struct {
		name string
		want map[string]uint64
	}{
		{"c1", map[string]uint64{zoneA: 8}},
		{"c2", map[string]uint64{zoneA: 5, zoneB: 1}},
		{"c3", nil},
	} {
		if got := c.Demand(EDS, tc.name); !maps.Equal(got, tc.want) {
			t.Errorf("Demand(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := c.Demand(resource.ClusterType, "c1"); got != nil {
		t.Errorf("no cluster watches, yet Demand(CDS) = %v", got)
	}
	a1.subscribe(nil, "c2") // moves its 3 from c1 to c2
	a2.s.Close()
	if got, want := c.Demand(EDS, "c1"), map[string]uint64(nil); !maps.Equal(got, want) {
		t.Errorf("after moves, Demand(c1) = %v, want %v", got, want)
	}
	if got, want := c.Demand(EDS, "c2"), map[string]uint64{zoneA: 3, zoneB: 1}; !maps.Equal(got, want) {
		t.Errorf("after moves, Demand(c2) = %v, want %v", got, want)
	}
	for _, z := range []*zoneClient{a1, b, region, none} {
		z.s.Close()
	}
	if got := c.Demand(EDS, "c2"); got != nil {
		t.Errorf("all closed, Demand(c2) = %v", got)
	}
}

func TestZoneKey(t *testing.T) {
	for _, tc := range []struct {
		region, zone, want string
	}{
		{"eu", "a", "eu/a"},
		{"eu", "", "eu"},
		{"", "a", ""},
		{"e/u", "a", ""},
	} {
		if got := xdscache.ZoneKey(zoneNode("n", tc.region, tc.zone)); got != tc.want {
			t.Errorf("ZoneKey(%q, %q) = %q, want %q", tc.region, tc.zone, got, tc.want)
		}
		if got := xdscache.ClassKey(tc.region, tc.zone); got != tc.want {
			t.Errorf("ClassKey(%q, %q) = %q, want %q", tc.region, tc.zone, got, tc.want)
		}
	}
}
