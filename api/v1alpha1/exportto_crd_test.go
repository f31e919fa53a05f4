package v1alpha1

import "testing"

// TestCRDExportTo: spec.exportTo of an Upstream and a SpatialDomain is one
// schema, whose bounds are the constants pkg/convert enforces.
func TestCRDExportTo(t *testing.T) {
	const pattern = `^(\*|\.|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	for _, file := range []string{"poise.dev_upstreams.yaml", "poise.dev_spatialdomains.yaml"} {
		t.Run(file, func(t *testing.T) {
			crd := loadCRD(t, file)
			s := schemaAt(t, crd, "spec.exportTo")
			if s.MinItems == nil || *s.MinItems != 1 || s.MaxItems == nil || *s.MaxItems != MaxExportTo {
				t.Errorf("items = %v..%v, want 1..%d", s.MinItems, s.MaxItems, MaxExportTo)
			}
			if s.XListType == nil || *s.XListType != "set" {
				t.Errorf("x-kubernetes-list-type = %v, want set (no duplicates)", s.XListType)
			}
			if len(s.XValidations) != 1 || s.XValidations[0].Rule != "!self.exists(x, x == '*') || self.size() == 1" {
				t.Errorf("rules = %+v, want the one that keeps %q alone", s.XValidations, ExportToAll)
			}
			if s.Default != nil {
				t.Errorf("defaults to %s; absent must mean the control plane's default", s.Default.Raw)
			}
			it := schemaAt(t, crd, "spec.exportTo[]")
			if it.MaxLength == nil || *it.MaxLength != 63 || it.Pattern != pattern {
				t.Errorf("items: maxLength %v, pattern %q; want 63 and %q", it.MaxLength, it.Pattern, pattern)
			}
		})
	}
}
