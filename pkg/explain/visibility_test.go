package explain

import (
	"bytes"
	"encoding/json"
	"testing"

	"poise.dev/poise/pkg/topology"
)

// TestVisibilityShown: explain says who may read an upstream that sets
// spec.exportTo, in text and JSON; an upstream without one shows nothing,
// so every report of one reads as before.
func TestVisibilityShown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items []string
		text  string
		json  string
	}{
		{"unset", nil, "", "null"},
		{"every namespace", []string{"*"}, "  visibility: exported to every namespace (spec.exportTo)\n", `{"all":true,"namespaces":[],"origin":"spec.exportTo"}`},
		{"own namespace", []string{"."}, "  visibility: exported to namespace shop only (spec.exportTo)\n", `{"all":false,"namespaces":["shop"],"origin":"spec.exportTo"}`},
		{"own and others", []string{"ui", ".", "api"},
			"  visibility: exported to namespaces api, shop, ui only (spec.exportTo)\n", `{"all":false,"namespaces":["api","shop","ui"],"origin":"spec.exportTo"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := visibilityOf(&topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "api"}, ExportTo: topology.NewExport(tc.items, "shop")})
			var buf bytes.Buffer
			writeVisibility(&textWriter{w: &buf}, got)
			if buf.String() != tc.text {
				t.Errorf("text\n %q\nwant\n %q", buf.String(), tc.text)
			}
			js, err := json.Marshal(got)
			if err != nil || string(js) != tc.json {
				t.Errorf("JSON %s (%v), want %s", js, err, tc.json)
			}
			// absent from the upstream's JSON unless set
			js, _ = json.Marshal(Upstream{Visibility: got})
			if has := bytes.Contains(js, []byte(`"visibility"`)); has != (tc.items != nil) {
				t.Errorf("upstream JSON has visibility: %v, want %v", has, tc.items != nil)
			}
		})
	}
}
