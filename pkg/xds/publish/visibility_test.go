package publish_test

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// TestPublishVisibility: every entry of an upstream or of a spatial
// domain's clusters says who may read it, from its own exportTo or the
// plane's default. The spatial listener is read by whom the domain is; the
// spatial route's base (what a namespace no rule names reads) holds no
// domain exported to fewer than every namespace and is no client's then,
// and its one audience variant, holding the domain, is its readers'.
func TestPublishVisibility(t *testing.T) {
	for _, tc := range []struct {
		name       string
		def        []string
		own        []string // the geo objects' own exportTo; nil: none
		want       string   // Visibility.String of every geo entry
		spatialOwn []string
	}{
		{"no rule, no default", nil, nil, "*", nil},
		{"default own namespace", []string{"."}, nil, "geo", nil},
		{"default names", []string{"x", "y"}, nil, "x,y", nil},
		{"own rule over default", []string{"."}, []string{"*"}, "*", []string{"*"}},
		{"own rule, names and own", nil, []string{".", "z"}, "geo,z", []string{".", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := topology.NewDirectory()
			c := newCache()
			p := publish.New(c, "inst", nil)
			if tc.def != nil {
				p.SetDefaultExport(topology.NewExport(tc.def, ""))
			}
			snap := apply(t, d, spatialBatch())
			if tc.own != nil {
				var b topology.Batch
				for _, st := range snap.Upstreams() {
					u := st.Upstream
					u.ExportTo = topology.NewExport(tc.own, u.Key.Namespace)
					b.PutUpstream(u)
				}
				dom := snap.Spatial()[0].Domain
				dom.ExportTo = topology.NewExport(tc.spatialOwn, dom.Key.Namespace)
				b.PutSpatialDomain(dom)
				snap = apply(t, d, b)
			}
			if _, err := p.Publish(snap); err != nil {
				t.Fatal(err)
			}
			for v := range translate.NumRenderings {
				for typ, es := range c.Resources(int(v)) {
					for _, e := range es {
						want := tc.want
						if typ == resource.RouteType && e.Name == translate.SpatialRouteName && tc.want != "*" {
							want = "" // the base: no client's
						}
						if got := e.Visible.String(); got != want || (want == "*") == e.Visible.Restricted() {
							t.Errorf("%s %s %s: visible to %q, want %q", v, xdscache.ShortType(typ), e.Name, got, want)
						}
					}
				}
			}
			variants := c.AudienceVariants(int(translate.Weighted), resource.RouteType, translate.SpatialRouteName)
			switch {
			case tc.want == "*" && variants != nil:
				t.Errorf("a domain every namespace may read: spatial route variants %v", variants)
			case tc.want != "*" && (len(variants) != 1 || variants[0].Visible.String() != tc.want):
				t.Errorf("spatial route variants %v, want one visible to %s", variants, tc.want)
			}
		})
	}
}
