package xdscache_test

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/xdscache"
)

const (
	CDS = resource.ClusterType
	LDS = resource.ListenerType
	RDS = resource.RouteType
)

// routeEntry is a resource of typ whose bytes say what it is, visible to
// ns (nil: to every client).
func routeEntry(typ, name, label, version string, ns ...string) *xdscache.Entry {
	e := xdscache.NewEntryBytes(name, version, typ, []byte(label))
	if ns != nil {
		e = e.WithVisibility(xdscache.VisibleToNamespaces(ns...))
	}
	return e
}

// withAudiences puts base and its audience variants.
func withAudiences(typ string, base *xdscache.Entry, variants ...*xdscache.Entry) xdscache.Change {
	return xdscache.Change{View: 0, TypeURL: typ, Name: base.Name, Entry: base, Audiences: variants}
}

// variantVersion is the per-resource version a Delta client of c is sent
// for an audience variant of label's bytes put at version.
func variantVersion(c *xdscache.Cache, version, label string) string {
	return version + "@" + strconv.FormatUint(maphash.String(c.Seed(), label), 16)
}

func ns(name string) xdscache.Audience { return xdscache.Audience{Namespace: name} }

// audienceClients are the streams of a test of audience variants: of
// namespaces a and b (each with a variant), c (named by none) and anonymous.
type audienceClients struct {
	a, b, c, anon *zoneClient
}

func (ac audienceClients) all() []*zoneClient { return []*zoneClient{ac.a, ac.b, ac.c, ac.anon} }

// only checks that z is sent want (what says when) and every other client nothing.
func (ac audienceClients) only(t *testing.T, z *zoneClient, what, want string) {
	t.Helper()
	if got := z.recv(); got != want {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
	for _, o := range ac.all() {
		if o != z {
			o.silent()
		}
	}
}

func openAudiences(t *testing.T, c *xdscache.Cache, typ string, delta, wildcard bool, names ...string) audienceClients {
	open := func(aud xdscache.Audience) *zoneClient {
		z := openFor(t, c, delta, envoy, aud)
		z.typ = typ
		if wildcard {
			z.subscribe(nil, "*")
		} else {
			z.subscribe(nil, names...)
		}
		return z
	}
	return audienceClients{open(ns("a")), open(ns("b")), open(ns("c")), open(xdscache.Anonymous)}
}

// TestAudienceVariantRoutes: one route name whose content depends on the
// reader's namespace, over SotW and Delta, by name and wildcard. Each
// namespace a variant names reads it, every other client (a namespace no
// variant names, anonymous) the base; a change reaches only the clients
// whose content it changes; a variant that takes in another namespace with
// the same bytes moves that namespace's clients alone; Delta versions tell
// every content apart, SotW versions are the type's.
func TestAudienceVariantRoutes(t *testing.T) {
	for _, delta := range []bool{false, true} {
		for _, wildcard := range []bool{false, true} {
			t.Run(fmt.Sprintf("delta=%v/wildcard=%v", delta, wildcard), func(t *testing.T) {
				c := newCache()
				base := routeEntry(RDS, "spatial", "open", "v1")
				c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
					withAudiences(RDS, base,
						routeEntry(RDS, "spatial", "A+open", "v1", "a"), routeEntry(RDS, "spatial", "B+open", "v1", "b")),
					change(0, RDS, routeEntry(RDS, "web", "web", "v1")),
				}})
				cl := openAudiences(t, c, RDS, delta, wildcard, "spatial")
				want := func(z *zoneClient, s string) {
					t.Helper()
					if got := z.recv(); got != s {
						t.Errorf("%s: got %q, want %q", z.s.Audience(), got, s)
					}
				}
				// route is what a client is sent of the spatial route: its
				// content, at the per-resource version (Delta) or the
				// response's (SotW), and the web route when wildcard
				route := func(label, version, respVersion string) string {
					v := respVersion
					if delta {
						v = version
					}
					s := "spatial=" + label + "@" + v
					if wildcard {
						s += " web=web@" + map[bool]string{true: "v1", false: respVersion}[delta]
					}
					return s
				}
				want(cl.a, route("A+open", variantVersion(c, "v1", "A+open"), "v1"))
				want(cl.b, route("B+open", variantVersion(c, "v1", "B+open"), "v1"))
				want(cl.c, route("open", "v1", "v1"))
				want(cl.anon, route("open", "v1", "v1"))
				if wildcard {
					route = func(label, version, respVersion string) string { // a change re-sends the changed name alone
						if delta {
							return "spatial=" + label + "@" + version
						}
						return "spatial=" + label + "@" + respVersion
					}
				}

				// a's domain changes: only a's variant is rendered again (the
				// others are new entries of the same bytes)
				va2 := routeEntry(RDS, "spatial", "A2+open", "v2", "a")
				vb := routeEntry(RDS, "spatial", "B+open", "v1", "b")
				for _, z := range cl.all() {
					z.woken() // what the first responses left
				}
				c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{withAudiences(RDS, base, va2, vb)}})
				if cl.b.woken() || cl.c.woken() || cl.anon.woken() {
					t.Error("a change of a's variant woke a client of another audience")
				}
				cl.only(t, cl.a, "a", route("A2+open", variantVersion(c, "v2", "A2+open"), "v2"))

				// a's domain is exported to c too: c joins a's variant, with
				// the same bytes; a and everyone else are sent nothing
				va2c := va2.WithVisibility(xdscache.VisibleToNamespaces("a", "c"))
				c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{withAudiences(RDS, base, va2c, vb)}})
				cl.only(t, cl.c, "c", route("A2+open", variantVersion(c, "v2", "A2+open"), "v3"))

				// and no longer to a: a reads the base again
				c.Apply(xdscache.Update{Version: "v4", Changes: []xdscache.Change{
					withAudiences(RDS, base, va2.WithVisibility(xdscache.VisibleToNamespaces("c")), vb)}})
				cl.only(t, cl.a, "a", route("open", "v1", "v4"))

				// the base changes (a domain every client may read): every
				// variant is rendered again, and every client is sent its own
				base5 := routeEntry(RDS, "spatial", "open5", "v5")
				c.Apply(xdscache.Update{Version: "v5", Changes: []xdscache.Change{withAudiences(RDS, base5,
					routeEntry(RDS, "spatial", "A2+open5", "v5", "c"), routeEntry(RDS, "spatial", "B+open5", "v5", "b"))}})
				want(cl.a, route("open5", "v5", "v5"))
				want(cl.b, route("B+open5", variantVersion(c, "v5", "B+open5"), "v5"))
				want(cl.c, route("A2+open5", variantVersion(c, "v5", "A2+open5"), "v5"))
				want(cl.anon, route("open5", "v5", "v5"))

				// the variants go (a put of the base alone): their readers
				// are sent the base, its readers nothing
				c.Apply(xdscache.Update{Version: "v6", Changes: []xdscache.Change{change(0, RDS, base5)}})
				want(cl.b, route("open5", "v5", "v6"))
				want(cl.c, route("open5", "v5", "v6"))
				cl.a.silent()
				cl.anon.silent()
				if got := c.AudienceVariants(0, RDS, "spatial"); got != nil {
					t.Errorf("variants after a put of the base alone: %v", entryNames(got))
				}
			})
		}
	}
}

// TestAudienceVariantVersions: a publication that repeats the variants
// (new entries of the same bytes and visibility) moves no version and
// wakes nothing; a Delta client reconnecting with the version of a variant
// it no longer reads is sent its content, and one holding its current
// content nothing; the variants go with their base.
func TestAudienceVariantVersions(t *testing.T) {
	c := newCache()
	put := func(version string, base *xdscache.Entry, variants ...*xdscache.Entry) {
		c.Apply(xdscache.Update{Version: version, Changes: []xdscache.Change{withAudiences(RDS, base, variants...)}})
	}
	base := routeEntry(RDS, "spatial", "open", "v1")
	va := routeEntry(RDS, "spatial", "A", "v1", "a")
	put("v1", base, va, routeEntry(RDS, "spatial", "B", "v1", "b"))
	sotw := openSotw(t, c, envoy)
	sotw.request(RDS, "", "", false, "spatial")
	sotw.ack(sotw.expect(RDS, "v1", "spatial"))

	put("v2", base, va.WithVisibility(xdscache.VisibleToNamespaces("a")), routeEntry(RDS, "spatial", "B", "v1", "b"))
	// the same bytes under new entries: same sent entries, so no version
	// moved; a new stream is answered at v1
	fresh := openSotw(t, c, envoy)
	fresh.request(RDS, "", "", false, "spatial")
	fresh.expect(RDS, "v1", "spatial")
	sotw.silent()

	// a's client reconnects holding b's variant's version: it is sent a's
	da := openFor(t, c, true, envoy, ns("a"))
	da.typ = RDS
	da.subscribe(map[string]string{"spatial": variantVersion(c, "v1", "B")}, "spatial")
	if got, want := da.recv(), "spatial=A@"+variantVersion(c, "v1", "A"); got != want {
		t.Errorf("a, reconnecting with b's version: %q, want %q", got, want)
	}
	// holding its own: an answer with nothing in it (it is served)
	again := openFor(t, c, true, envoy, ns("a"))
	again.typ = RDS
	again.subscribe(map[string]string{"spatial": variantVersion(c, "v1", "A")}, "spatial")
	if got := again.recv(); got != "" {
		t.Errorf("a, reconnecting with its own variant's version: %q, want an empty answer", got)
	}
	again.silent()
	// holding the base's version (it read the base before a variant named a)
	base2 := openFor(t, c, true, envoy, ns("a"))
	base2.typ = RDS
	base2.subscribe(map[string]string{"spatial": "v1"}, "spatial")
	if got := base2.recv(); got != "spatial=A@"+variantVersion(c, "v1", "A") {
		t.Errorf("a, reconnecting with the base's version: %q", got)
	}

	// the base deleted: its variants go with it
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{{TypeURL: RDS, Name: "spatial"}}})
	if got := da.recv(); got != "-spatial" {
		t.Errorf("a's Delta client after the deletion: %q, want the removal", got)
	}
	if c.AudienceVariants(0, RDS, "spatial") != nil {
		t.Error("variants outlived their base")
	}
	// a variant put without a base is nothing
	c.Apply(xdscache.Update{Version: "v4", Changes: []xdscache.Change{{TypeURL: RDS, Name: "spatial", Audiences: []*xdscache.Entry{va}}}})
	if c.AudienceVariants(0, RDS, "spatial") != nil || len(c.ResourcesFor(0, ns("a"))[RDS]) != 0 {
		t.Error("a variant without its base was published")
	}
}

// TestAudienceVariantListeners: a full-state type (LDS, wildcard). A base
// no client may read with a variant for a: a's SotW state holds the
// variant, every other client's state lacks the name; when the variant
// goes, a's next state lacks it too and a Delta client is told of its
// removal. Entries visible to everyone or to no one are no variants, and a
// namespace two variants name reads the first's.
func TestAudienceVariantListeners(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			c := newCache()
			nobody := routeEntry(LDS, "spatial", "none", "v1").WithVisibility(xdscache.VisibleToNamespaces())
			c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
				withAudiences(LDS, nobody, routeEntry(LDS, "spatial", "L-a", "v1", "a"), routeEntry(LDS, "spatial", "L-b", "v1", "b"),
					routeEntry(LDS, "spatial", "L-all", "v1"), routeEntry(LDS, "spatial", "L-none", "v1").WithVisibility(xdscache.VisibleToNamespaces()),
					routeEntry(LDS, "spatial", "L-ab", "v1", "a", "b")),
				change(0, LDS, routeEntry(LDS, "open", "open", "v1")),
			}})
			if got := len(c.AudienceVariants(0, LDS, "spatial")); got != 3 {
				t.Errorf("%d variants kept, want 3 (a's, b's, and a,b's which no namespace reads)", got)
			}
			cl := openAudiences(t, c, LDS, delta, true)
			version := func(label string) string {
				if delta {
					return variantVersion(c, "v1", label)
				}
				return "v1"
			}
			if got, want := cl.a.recv(), "open=open@v1 spatial=L-a@"+version("L-a"); got != want {
				t.Errorf("a: %q, want %q", got, want)
			}
			if got, want := cl.b.recv(), "open=open@v1 spatial=L-b@"+version("L-b"); got != want {
				t.Errorf("b: %q, want %q", got, want)
			}
			for _, z := range []*zoneClient{cl.c, cl.anon} {
				if got := z.recv(); got != "open=open@v1" {
					t.Errorf("%s: %q, want the open listener alone", z.s.Audience(), got)
				}
			}
			c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
				withAudiences(LDS, nobody, routeEntry(LDS, "spatial", "L-b", "v1", "b"))}})
			want := "open=open@v2"
			if delta {
				want = "-spatial"
			}
			cl.only(t, cl.a, "a, its variant gone", want)
		})
	}
}

// TestAudienceVariantsAndZones: where a name has both, an audience variant
// comes before the zone's variant, and a zone variant's change wakes no
// stream that reads an audience variant.
func TestAudienceVariantsAndZones(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		withAudiences(EDS, content("c1", "base", "v1"), content("c1", "aud-a", "v1").WithVisibility(xdscache.VisibleToNamespaces("a"))),
		put(zoneA, "c1", "zone-A", "v1"),
	}})
	a := openFor(t, c, false, inA, ns("a"))
	b := openFor(t, c, false, inA, ns("b"))
	a.subscribe(nil, "c1")
	b.subscribe(nil, "c1")
	if got := a.recv(); got != "c1=aud-a@v1" {
		t.Errorf("a in zone A: %q, want its audience variant", got)
	}
	if got := b.recv(); got != "c1=zone-A@v1" {
		t.Errorf("b in zone A: %q, want the zone's variant", got)
	}
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{put(zoneA, "c1", "zone-A2", "v2")}})
	a.silent()
	if got := b.recv(); got != "c1=zone-A2@v2" {
		t.Errorf("b after the zone's change: %q", got)
	}
}

// TestAudienceStateIsBounded: streams of 10,000 distinct namespaces, open
// together and then one after another, against clusters only some
// namespaces may read and a route with audience variants. What the cache
// keeps per audience class (the shared visible lists, the variants) never
// exceeds its bound — per type, the namespaces the rules name plus one —
// and what it keeps per audience (the groups of watches) goes with the
// streams.
func TestAudienceStateIsBounded(t *testing.T) {
	const namespaces = 10000
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, CDS, routeEntry(CDS, "open", "open", "v1")),
		change(0, CDS, routeEntry(CDS, "ra", "ra", "v1", "ns-0")),
		change(0, CDS, routeEntry(CDS, "rb", "rb", "v1", "ns-1", "ns-2")),
		change(0, RDS, routeEntry(RDS, "web", "web", "v1")),
		withAudiences(RDS, routeEntry(RDS, "spatial", "open", "v1"),
			routeEntry(RDS, "spatial", "A", "v1", "ns-0"), routeEntry(RDS, "spatial", "B", "v1", "ns-1", "ns-3")),
	}})
	// CDS names ns-0, ns-1 and ns-2; RDS ns-0, ns-1 and ns-3
	bound := xdscache.AudienceCensus{Lists: (3 + 1) + (3 + 1), Variants: 2, VariantNamespaces: 3}
	check := func(when string, groups int) {
		t.Helper()
		got := c.AudienceCensus()
		if got.Groups != groups || got.Lists > bound.Lists || got.Variants != bound.Variants || got.VariantNamespaces != bound.VariantNamespaces {
			t.Fatalf("%s: %+v; want %d groups, at most %d lists, %d variants naming %d namespaces",
				when, got, groups, bound.Lists, bound.Variants, bound.VariantNamespaces)
		}
	}
	var out []xdscache.Response
	open := func(i int) *xdscache.Stream {
		s := c.NewStreamFor(i%2 == 1, ns(fmt.Sprintf("ns-%d", i)))
		s.SetNode(envoy)
		rds := []string{"spatial"}
		if i%4 < 2 {
			rds = []string{"*"}
		}
		for _, r := range []struct {
			typ   string
			names []string
		}{{CDS, []string{"*"}}, {RDS, rds}} {
			var err error
			if i%2 == 1 {
				err = s.Delta(xdscache.DeltaRequest{TypeURL: r.typ, Subscribe: r.names})
			} else {
				err = s.Sotw(xdscache.SotwRequest{TypeURL: r.typ, NamesHash: c.HashNames(r.names), Names: func() []string { return r.names }})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if out = s.Next(out[:0]); len(out) != 2 {
			t.Fatalf("ns-%d: %d responses, want CDS and RDS", i, len(out))
		}
		if i == 3 || i == 5 {
			want := map[int]string{3: "B", 5: "open"}[i]
			for _, e := range out[1].Entries {
				if e.Name == "spatial" && string(e.Any.GetValue()) != want {
					t.Errorf("ns-%d reads spatial %q, want %q", i, e.Any.GetValue(), want)
				}
			}
		}
		return s
	}
	streams := make([]*xdscache.Stream, namespaces)
	for i := range streams {
		streams[i] = open(i)
	}
	// one list per audience class: CDS {ns-0}, {ns-1, ns-2} and the rest;
	// RDS {ns-0}, {ns-1, ns-3} and the rest
	if got := c.AudienceCensus().Lists; got != 6 {
		t.Errorf("%d visible lists, want 6: one per audience class", got)
	}
	check("10,000 namespaces connected", 2*namespaces)
	for _, s := range streams {
		s.Close()
	}
	check("every stream closed", 0)

	// another publication, then the namespaces come and go one by one
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, CDS, routeEntry(CDS, "open", "open2", "v2"))}})
	for i := range namespaces {
		open(i).Close()
	}
	check("10,000 namespaces, one after another", 0)
}

// TestRestampWakesOnlyWhoGainsOrLoses: a resource whose bytes stay and
// whose visibility takes in another namespace is news to that namespace's
// clients alone, over SotW (full state) and Delta, and so is one that lets
// a namespace go.
func TestRestampWakesOnlyWhoGainsOrLoses(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			c := newCache()
			e := routeEntry(CDS, "c1", "one", "v1", "a")
			c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, CDS, e)}})
			cl := openAudiences(t, c, CDS, delta, true)
			for _, z := range cl.all() {
				z.recv()
			}
			c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, CDS, e.WithVisibility(xdscache.VisibleToNamespaces("a", "b")))}})
			want := "c1=one@v2"
			if delta {
				want = "c1=one@v1"
			}
			cl.only(t, cl.b, "b, let in", want)
			c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, CDS, e.WithVisibility(xdscache.VisibleToNamespaces("b")))}})
			want = ""
			if delta {
				want = "-c1"
			}
			cl.only(t, cl.a, "a, let go", want)
		})
	}
}

// TestWithheldAudienceVariants: a client that reads an audience variant of
// a name is withheld nothing of it, though the base is no client's; a
// client no variant names is withheld the name, by name and in its
// wildcard count.
func TestWithheldAudienceVariants(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		withAudiences(RDS, routeEntry(RDS, "spatial", "none", "v1").WithVisibility(xdscache.VisibleToNamespaces()),
			routeEntry(RDS, "spatial", "A", "v1", "a")),
		change(0, RDS, routeEntry(RDS, "web", "web", "v1")),
	}})
	for _, tc := range []struct {
		aud      xdscache.Audience
		wildcard bool
		hidden   int
	}{{ns("a"), false, 0}, {ns("a"), true, 0}, {ns("c"), false, 1}, {ns("c"), true, 1}} {
		z := openFor(t, c, true, envoy, tc.aud)
		z.typ = RDS
		if tc.wildcard {
			z.subscribe(nil, "*")
		} else {
			z.subscribe(nil, "spatial")
		}
		z.recv()
		w := z.s.Withheld(10)
		got := len(w.Hidden)
		if tc.wildcard {
			got = 0
			for _, n := range w.Wildcard {
				got += n.Count
			}
		}
		if got != tc.hidden {
			t.Errorf("%s (wildcard %v): withheld %+v, want %d of spatial", tc.aud, tc.wildcard, w, tc.hidden)
		}
	}
}

// TestUpdateChangingOneResourceTwice: of two changes of one resource in
// one Update the last is published, against what was published before the
// Update. A Delta client whose content the first change would have moved
// and the second moves back is told nothing (it holds that content at that
// version already); one whose content the last change moves is sent it.
func TestUpdateChangingOneResourceTwice(t *testing.T) {
	c := newCache()
	base := routeEntry(RDS, "spatial", "open", "v1")
	vb := routeEntry(RDS, "spatial", "B+open", "v1", "b")
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{withAudiences(RDS, base, vb)}})
	cl := openAudiences(t, c, RDS, true, false, "spatial")
	cl.a.recv()
	cl.b.recv()
	cl.c.recv()
	cl.anon.recv()
	for _, z := range cl.all() {
		z.woken()
	}
	// a gets a variant, then loses it again; b's variant changes
	va := routeEntry(RDS, "spatial", "A+open", "v2", "a")
	vb2 := routeEntry(RDS, "spatial", "B2+open", "v2", "b")
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
		withAudiences(RDS, base, va, vb),
		withAudiences(RDS, base, vb2),
	}})
	if cl.a.woken() || cl.c.woken() || cl.anon.woken() {
		t.Error("a client whose content the Update leaves as it was was woken")
	}
	cl.only(t, cl.b, "b", "spatial=B2+open@"+variantVersion(c, "v2", "B2+open"))
}
