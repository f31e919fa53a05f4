package topology

import "testing"

// TestVisibleTo: who may read an Upstream, from its own spec.exportTo or,
// without one, the control plane's default; a client of no namespace sees
// only what is exported to "*".
func TestVisibleTo(t *testing.T) {
	var (
		unset    = Export{}
		all      = NewExport([]string{"*"}, "")
		own      = NewExport([]string{"."}, "") // a default: each Upstream's own namespace
		ownAndUI = NewExport([]string{".", "ui"}, "")
	)
	for _, tc := range []struct {
		name   string
		export []string // the Upstream's spec.exportTo, in namespace shop
		def    Export
		ns     string
		want   bool
	}{
		{"unset, no default: every namespace", nil, unset, "tenant-b", true},
		{"unset, no default: anonymous too", nil, unset, "", true},
		{"unset, default *", nil, all, "tenant-b", true},
		{"unset, default .: own namespace", nil, own, "shop", true},
		{"unset, default .: another namespace", nil, own, "tenant-b", false},
		{"unset, default .: anonymous", nil, own, "", false},
		{"unset, default . and ui: ui", nil, ownAndUI, "ui", true},
		{"unset, default . and ui: another", nil, ownAndUI, "api", false},
		{"*, default .: another namespace", []string{"*"}, own, "tenant-b", true},
		{"*: anonymous", []string{"*"}, own, "", true},
		{".: own namespace", []string{"."}, unset, "shop", true},
		{".: another namespace despite default *", []string{"."}, all, "tenant-b", false},
		{".: anonymous", []string{"."}, unset, "", false},
		{"names: one of them", []string{"b", "a"}, unset, "a", true},
		{"names: the other", []string{"b", "a"}, unset, "b", true},
		{"names: not its own", []string{"b", "a"}, unset, "shop", false},
		{"names: a prefix of one", []string{"tenant-ab"}, unset, "tenant-a", false},
		{"names: one a prefix of", []string{"tenant-a"}, unset, "tenant-ab", false},
		{"names: anonymous", []string{"a"}, unset, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Upstream{Key: Key{"shop", "api"}, ExportTo: NewExport(tc.export, "shop")}
			if got := u.VisibleTo(tc.ns, tc.def); got != tc.want {
				t.Errorf("VisibleTo(%q, %q) of exportTo %q = %v, want %v", tc.ns, tc.def, tc.export, got, tc.want)
			}
		})
	}
}

// TestNewExportIsCanonical: the same rule in any order, with repeats or "."
// spelt as the namespace, is one == value with one String.
func TestNewExportIsCanonical(t *testing.T) {
	a := NewExport([]string{"b", ".", "a"}, "shop")
	b := NewExport([]string{"shop", "a", "b", "a"}, "shop")
	if a != b || a.String() != "a, b, shop" {
		t.Errorf("%+v (%q) and %+v (%q) differ", a, a.String(), b, b.String())
	}
	if got := NewExport([]string{"a", "*"}, "shop"); got != ExportAll || got.String() != "*" {
		t.Errorf(`a list holding "*" = %+v, want ExportAll`, got)
	}
	if got := NewExport(nil, "shop"); got.Set || got.String() != "" {
		t.Errorf("nil = %+v, want not set", got)
	}
	if got := NewExport([]string{"ui", "."}, ""); !got.Own || got.String() != "., ui" || len(got.Namespaces()) != 1 {
		t.Errorf(`default [ui .] = %+v (%q)`, got, got.String())
	}
	if NewExport([]string{"."}, "shop") == NewExport(nil, "shop") {
		t.Error(`an explicit "." equals no rule`)
	}
}

// TestExportToIsAnUpstreamChange: changing spec.exportTo, or setting it,
// is a change of the Upstream (what its clients may read), so the revision
// and ClusterRevision move; the same rule in another order changes nothing.
func TestExportToIsAnUpstreamChange(t *testing.T) {
	d := NewDirectory()
	k := Key{"default", "api"}
	put := func(items ...string) *Snapshot {
		t.Helper()
		u := upstream("api")
		u.ExportTo = NewExport(items, "default")
		var b Batch
		b.PutUpstream(u)
		b.PutEndpointSet(set("a", "api", "r1", 2, 0))
		return mustApply(t, d, b)
	}
	prev := put()
	for _, step := range []struct{ items, reordered []string }{
		{[]string{"."}, []string{"default"}},
		{[]string{".", "ui"}, []string{"ui", "default"}},
		{[]string{"*"}, []string{"*"}},
	} {
		cur := put(step.items...)
		if cur.Revision == prev.Revision {
			t.Fatalf("%q: revision stayed %d", step.items, cur.Revision)
		}
		if u := cur.Upstream(k); u.ClusterRevision != cur.Revision || u.Upstream.ExportTo != NewExport(step.items, "default") {
			t.Fatalf("%q: cluster revision %d at revision %d, rule %+v", step.items, u.ClusterRevision, cur.Revision, u.Upstream.ExportTo)
		}
		if again := put(step.reordered...); again != cur {
			t.Fatalf("%q as %q: made revision %d", step.items, step.reordered, again.Revision)
		}
		prev = cur
	}
}

// TestSpatialDomainVisibleTo: a domain's rule reads as an Upstream's.
func TestSpatialDomainVisibleTo(t *testing.T) {
	own := NewExport([]string{"."}, "")
	d := SpatialDomain{Key: Key{"maps", "cadastre"}}
	if !d.VisibleTo("maps", own) || d.VisibleTo("shop", own) || !d.VisibleTo("shop", Export{}) || !d.VisibleTo("", Export{}) {
		t.Error("a domain without exportTo does not follow the default")
	}
	d.ExportTo = NewExport([]string{"shop"}, "maps")
	if !d.VisibleTo("shop", own) || d.VisibleTo("maps", own) || d.VisibleTo("", ExportAll) {
		t.Error("a domain's own exportTo is not what decides")
	}
}
