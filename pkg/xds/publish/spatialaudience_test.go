package publish_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// exportDomain changes who may read a domain.
func exportDomain(t *testing.T, d *topology.Directory, k topology.Key, items ...string) topology.Batch {
	t.Helper()
	dom := d.Current().SpatialDomain(k).Domain
	dom.ExportTo = topology.NewExport(items, k.Namespace)
	var b topology.Batch
	b.PutSpatialDomain(dom)
	return b
}

// spatialSeen is what a wildcard client of aud is sent of the spatial
// listener and route: "listener" when it is sent the listener, then the
// domains of the route's virtual hosts ("ns/name"), and the route entry.
func spatialSeen(t *testing.T, c *xdscache.Cache, aud xdscache.Audience) (string, *xdscache.Entry) {
	t.Helper()
	res := c.ResourcesFor(int(translate.Weighted), aud)
	if err := publish.Consistent(res); err != nil {
		t.Errorf("%s: %v", aud, err)
	}
	var parts []string
	for _, e := range res[resource.ListenerType] {
		if e.Name == translate.SpatialListenerName {
			parts = append(parts, "listener")
		}
	}
	var entry *xdscache.Entry
	for _, e := range res[resource.RouteType] {
		if e.Name != translate.SpatialRouteName {
			continue
		}
		entry = e
		rc := &route.RouteConfiguration{}
		if err := e.Decode(rc); err != nil {
			t.Fatal(err)
		}
		for _, vh := range rc.GetVirtualHosts() {
			if name, ok := strings.CutPrefix(vh.GetName(), "spatial:"); ok && name != "unknown-domain" {
				parts = append(parts, strings.Replace(name, ":", "/", 1))
			}
		}
	}
	return strings.Join(parts, " "), entry
}

// TestPublishSpatialAudiences: SpatialDomains of three namespaces — geo's
// exported to its own, sea's to its own and fleet, atlas's to every
// namespace. Each namespace's clients are sent a spatial route holding the
// virtual hosts of the domains they may read and no other; sea and fleet,
// which may read the same, share one entry; a namespace no rule names and
// an anonymous client read the base. A replica's health in geo renders
// geo's route alone; a change of exportTo moves a domain in or out of the
// right clients' routes only; with no domain for every namespace, the
// listener goes to the named namespaces only.
func TestPublishSpatialAudiences(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	b := spatialBatch()
	cadastre := topology.Key{Namespace: "geo", Name: "cadastre"}
	topologytest.SpatialDomain(&b, topology.Key{Namespace: "sea", Name: "charts"}, []string{".", "fleet"})
	topologytest.SpatialDomain(&b, topology.Key{Namespace: "pub", Name: "atlas"}, []string{"*"})
	snap := apply(t, d, b)
	geo := snap.SpatialDomain(cadastre).Domain
	geo.ExportTo = topology.NewExport([]string{"."}, "geo")
	b = topology.Batch{}
	b.PutSpatialDomain(geo)
	st, err := p.Publish(apply(t, d, b))
	if err != nil {
		t.Fatal(err)
	}
	auds := []xdscache.Audience{{Namespace: "geo"}, {Namespace: "sea"}, {Namespace: "fleet"}, {Namespace: "other"}, xdscache.Anonymous}
	type seen struct {
		what  string
		entry *xdscache.Entry
	}
	look := func() map[xdscache.Audience]seen {
		out := map[xdscache.Audience]seen{}
		for _, a := range auds {
			what, e := spatialSeen(t, c, a)
			out[a] = seen{what, e}
		}
		return out
	}
	expect := func(step string, got map[xdscache.Audience]seen, want map[string]string) {
		t.Helper()
		for _, a := range auds {
			if w := want[a.String()]; got[a].what != w {
				t.Errorf("%s: %s is sent %q, want %q", step, a, got[a].what, w)
			}
		}
	}
	before := look()
	expect("first", before, map[string]string{
		"geo":       "listener geo/cadastre pub/atlas",
		"sea":       "listener pub/atlas sea/charts",
		"fleet":     "listener pub/atlas sea/charts",
		"other":     "listener pub/atlas",
		"anonymous": "listener pub/atlas",
	})
	if before[auds[1]].entry != before[auds[2]].entry {
		t.Error("sea and fleet may read the same domains, yet are sent two entries")
	}
	if v := c.AudienceVariants(int(translate.Weighted), resource.RouteType, translate.SpatialRouteName); len(v) != 2 {
		t.Errorf("%d audience variants of the spatial route, want 2 (geo; sea and fleet)", len(v))
	}

	// geo's replica loses its capacity: geo's route alone is rendered again
	b = topology.Batch{}
	b.PutEndpointSet(replicaSet("eu-central", 1, weights.Unavailable))
	if st, err = p.Publish(apply(t, d, b)); err != nil {
		t.Fatal(err)
	}
	after := look()
	expect("geo's replica down", after, map[string]string{
		"geo": "listener geo/cadastre pub/atlas", "sea": "listener pub/atlas sea/charts", "fleet": "listener pub/atlas sea/charts",
		"other": "listener pub/atlas", "anonymous": "listener pub/atlas",
	})
	if after[auds[0]].entry == before[auds[0]].entry || st.Changes.Of(resource.RouteType) != 1 {
		t.Errorf("geo's health change: geo's route the same entry (%v), or %d RDS changes", after[auds[0]].entry == before[auds[0]].entry, st.Changes.Of(resource.RouteType))
	}
	for _, a := range auds[1:] {
		if after[a].entry != before[a].entry {
			t.Errorf("geo's health change rendered %s's route again", a)
		}
	}

	// charts is exported to geo too: geo's route takes it in, the others keep theirs
	if _, err = p.Publish(apply(t, d, exportDomain(t, d, topology.Key{Namespace: "sea", Name: "charts"}, ".", "fleet", "geo"))); err != nil {
		t.Fatal(err)
	}
	moved := look()
	expect("charts exported to geo", moved, map[string]string{
		"geo": "listener geo/cadastre pub/atlas sea/charts", "sea": "listener pub/atlas sea/charts", "fleet": "listener pub/atlas sea/charts",
		"other": "listener pub/atlas", "anonymous": "listener pub/atlas",
	})
	for _, a := range auds[1:] {
		if moved[a].entry != after[a].entry {
			t.Errorf("charts exported to geo changed %s's route entry", a)
		}
	}

	// atlas is exported to pub alone: no domain for every namespace; the
	// listener goes to the namespaces that may read some domain, and a
	// namespace no rule names is sent neither listener nor route
	if _, err = p.Publish(apply(t, d, exportDomain(t, d, topology.Key{Namespace: "pub", Name: "atlas"}, "."))); err != nil {
		t.Fatal(err)
	}
	expect("atlas exported to pub alone", look(), map[string]string{
		"geo": "listener geo/cadastre sea/charts", "sea": "listener sea/charts", "fleet": "listener sea/charts",
		"other": "", "anonymous": "",
	})
	if got, _ := spatialSeen(t, c, xdscache.Audience{Namespace: "pub"}); got != "listener pub/atlas" {
		t.Errorf("pub is sent %q, want its own domain", got)
	}

	// every domain for every namespace again: one route for all, no variants
	for _, k := range []topology.Key{cadastre, {Namespace: "sea", Name: "charts"}, {Namespace: "pub", Name: "atlas"}} {
		if _, err = p.Publish(apply(t, d, exportDomain(t, d, k, "*"))); err != nil {
			t.Fatal(err)
		}
	}
	all := look()
	for _, a := range auds {
		if all[a].what != "listener geo/cadastre pub/atlas sea/charts" || all[a].entry != all[auds[0]].entry {
			t.Errorf("every domain for every namespace: %s is sent %q", a, all[a].what)
		}
	}
	if v := c.AudienceVariants(int(translate.Weighted), resource.RouteType, translate.SpatialRouteName); v != nil {
		t.Errorf("variants left: %v", v)
	}
}

// TestSpatialClassesAreBounded: 40 domains, each exported to its own
// namespace and to 63 namespaces of a pool of 200, make at most 200 + 1
// classes whatever clients connect; a namespace no rule names reads the
// base. The route is rendered once per class, not per namespace.
func TestSpatialClassesAreBounded(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	var b topology.Batch
	named := map[string]bool{}
	for i := range 40 {
		ns := fmt.Sprintf("tenant-%02d", i)
		items := []string{"."}
		named[ns] = true
		for j := range 63 {
			n := fmt.Sprintf("pool-%03d", (i*37+j*11)%200)
			items = append(items, n)
			named[n] = true
		}
		topologytest.SpatialDomain(&b, topology.Key{Namespace: ns, Name: fmt.Sprintf("dom-%02d", i)}, items)
	}
	if _, err := p.Publish(apply(t, d, b)); err != nil {
		t.Fatal(err)
	}
	variants := c.AudienceVariants(int(translate.Weighted), resource.RouteType, translate.SpatialRouteName)
	if len(variants) == 0 || len(variants) > len(named) {
		t.Fatalf("%d audience classes, want between 1 and %d (the namespaces named)", len(variants), len(named))
	}
	covered := 0
	for i, v := range variants {
		covered += len(v.Visible.Namespaces())
		for _, w := range variants[:i] {
			if w.Any == v.Any {
				t.Errorf("two classes (%s and %s) were rendered the same bytes: one class", w.Visible, v.Visible)
			}
		}
	}
	if covered != len(named) {
		t.Errorf("the variants name %d namespaces, want each of the %d named exactly once", covered, len(named))
	}
	for _, ns := range []string{"nobody", "another"} {
		if got, _ := spatialSeen(t, c, xdscache.Audience{Namespace: ns}); got != "" {
			t.Errorf("%s, named by no rule, is sent %q", ns, got)
		}
	}
	got, _ := spatialSeen(t, c, xdscache.Audience{Namespace: "tenant-07"})
	if !strings.Contains(got, "tenant-07/dom-07") || slices.Contains(strings.Fields(got), "tenant-08/dom-08") {
		t.Errorf("tenant-07 is sent %q", got)
	}
}
