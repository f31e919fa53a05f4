package convert_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

func withExportTo(items ...string) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) { u.Spec.ExportTo = items }
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("ns-%d", i)
	}
	return out
}

// TestUpstreamExportTo: spec.exportTo is refused as the CRD's schema and CEL
// rule refuse it, on the same field, and a valid list becomes one canonical
// rule whatever its order, with "." read as the Upstream's namespace.
func TestUpstreamExportTo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Upstream)
		want   []string
	}{
		{"empty list", withExportTo([]string{}...), []string{"spec.exportTo"}},
		{`"*" with another item`, withExportTo("*", "shop"), []string{"spec.exportTo"}},
		{`"*" after another item`, withExportTo(".", "*"), []string{"spec.exportTo"}},
		{`"*" twice`, withExportTo("*", "*"), []string{"spec.exportTo[1]"}},
		{"a duplicate", withExportTo("a", "b", "a"), []string{"spec.exportTo[2]"}},
		{`"." twice`, withExportTo(".", "."), []string{"spec.exportTo[1]"}},
		{"an uppercase name", withExportTo("a", "Tenant-A"), []string{"spec.exportTo[1]"}},
		{"a name with a dot", withExportTo("shop.eu"), []string{"spec.exportTo[0]"}},
		{"an empty item", withExportTo(""), []string{"spec.exportTo[0]"}},
		{"a pattern", withExportTo("tenant-*"), []string{"spec.exportTo[0]"}},
		{"a name of 64", withExportTo(strings.Repeat("n", 64)), []string{"spec.exportTo[0]"}},
		{"65 items", withExportTo(names(65)...), []string{"spec.exportTo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			tc.mutate(in)
			_, errs := convert.Upstream(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
		})
	}

	for _, tc := range []struct {
		name  string
		items []string
		want  string // the rule's String; "" is not set
		all   bool
	}{
		{"unset", nil, "", false},
		{"every namespace", []string{"*"}, "*", true},
		{"own namespace", []string{"."}, "shop", false},
		{"own and named, either order", []string{"frontend", ".", "api"}, "api, frontend, shop", false},
		{"own named twice over", []string{".", "shop"}, "shop", false},
		{"64 names", names(64), strings.Join(sortedNames(64), ", "), false},
		{"a name of 63", []string{strings.Repeat("n", 63)}, strings.Repeat("n", 63), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			in.Spec.ExportTo = tc.items
			got, errs := convert.Upstream(in)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			e := got.ExportTo
			if e.Set != (tc.items != nil) || e.All != tc.all || e.Own || e.String() != tc.want {
				t.Errorf("ExportTo = %+v (%q), want set %v, all %v, %q", e, e.String(), tc.items != nil, tc.all, tc.want)
			}
		})
	}

	// the same rule in another order is the same model, so a reordering
	// changes nothing downstream
	a, b := validUpstream(), validUpstream()
	a.Spec.ExportTo, b.Spec.ExportTo = []string{"b", ".", "a"}, []string{"a", "shop", "b"}
	ua, _ := convert.Upstream(a)
	ub, _ := convert.Upstream(b)
	if ua != ub {
		t.Errorf("reordered exportTo converts differently: %+v and %+v", ua.ExportTo, ub.ExportTo)
	}
	// an Upstream without a namespace is in "default", and so is its "."
	c := validUpstream()
	c.Namespace, c.Spec.ExportTo = "", []string{"."}
	if uc, _ := convert.Upstream(c); uc.ExportTo.String() != "default" {
		t.Errorf(`"." of an Upstream in no namespace = %q, want default`, uc.ExportTo.String())
	}
}

// sortedNames is names(n) in string order: ns-0, ns-1, ns-10, ...
func sortedNames(n int) []string {
	out := names(n)
	slices.Sort(out)
	return out
}

// TestExportToDefault: a control plane's default keeps "." as each
// Upstream's own namespace, and reports errors on the path it is given.
func TestExportToDefault(t *testing.T) {
	def, errs := convert.ExportTo(field.NewPath("--default-export-to"), []string{"."}, "")
	if len(errs) > 0 || !def.Set || !def.Own || def.All || len(def.Namespaces()) != 0 || def.String() != "." {
		t.Fatalf("default \".\" = %+v %v", def, errs)
	}
	if _, errs := convert.ExportTo(field.NewPath("--default-export-to"), []string{"*", "."}, ""); !reflect.DeepEqual(fields(errs), []string{"--default-export-to"}) {
		t.Errorf("default [*, .]: error fields %q", fields(errs))
	}
	if e, errs := convert.ExportTo(field.NewPath("x"), nil, ""); len(errs) > 0 || e != (topology.Export{}) {
		t.Errorf("nil = %+v %v, want not set", e, errs)
	}
}

// TestSpatialDomainExportTo: a SpatialDomain's spec.exportTo follows an
// Upstream's rules, on its own path, with "." its own namespace.
func TestSpatialDomainExportTo(t *testing.T) {
	d := validSpatialDomain()
	d.Spec.ExportTo = []string{"ui", "."}
	got, errs := convert.SpatialDomain(d)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if want := topology.NewExport([]string{"ui", d.Namespace}, d.Namespace); got.ExportTo != want || !got.ExportTo.Set {
		t.Errorf("ExportTo = %+v, want %+v", got.ExportTo, want)
	}
	if got, _ := convert.SpatialDomain(validSpatialDomain()); got.ExportTo.Set {
		t.Errorf("no exportTo converts to a set rule %+v", got.ExportTo)
	}
	for items, want := range map[string][]string{
		"*,a":   {"spec.exportTo"},
		"a,a":   {"spec.exportTo[1]"},
		"a,B_c": {"spec.exportTo[1]"},
	} {
		d := validSpatialDomain()
		d.Spec.ExportTo = strings.Split(items, ",")
		if _, errs := convert.SpatialDomain(d); !reflect.DeepEqual(fields(errs), want) {
			t.Errorf("exportTo %s: error fields %q, want %q", items, fields(errs), want)
		}
	}
}
