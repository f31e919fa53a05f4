package status

import (
	"strings"
	"testing"

	"poise.dev/poise/pkg/kube/crdschema"
)

func TestCRDEvent(t *testing.T) {
	t.Parallel()
	st := func(state crdschema.State, pruned ...string) crdschema.Status {
		return crdschema.Status{Name: "upstreams.poise.dev", State: state, BinaryVersion: "sha256:b", InstalledVersion: "sha256:i", PrunedFields: pruned}
	}
	current, newer, missing := st(crdschema.Current), st(crdschema.Newer), st(crdschema.NotInstalled)
	outdated, outdated2 := st(crdschema.Outdated, "spec.exportTo"), st(crdschema.Outdated, "spec.exportTo", "spec.localityAffinity")
	for _, tc := range []struct {
		name string
		prev crdschema.Status
		seen bool
		cur  crdschema.Status
		want string // type and reason; "" for none
	}{
		{"current when the leader starts: none", crdschema.Status{}, false, current, ""},
		{"newer when the leader starts: none", crdschema.Status{}, false, newer, ""},
		{"outdated when the leader starts", crdschema.Status{}, false, outdated, "Warning CRDSchemaOutdated"},
		{"not installed when the leader starts", crdschema.Status{}, false, missing, "Warning CRDNotInstalled"},
		{"turns outdated", current, true, outdated, "Warning CRDSchemaOutdated"},
		{"still outdated by the same fields: none", outdated, true, outdated, ""},
		{"outdated by more fields", outdated, true, outdated2, "Warning CRDSchemaOutdated"},
		{"removed", outdated, true, missing, "Warning CRDNotInstalled"},
		{"upgraded", outdated, true, current, "Normal Recovered"},
		{"upgraded past the binary", outdated, true, newer, "Normal Recovered"},
		{"newer, then current: none", newer, true, current, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eventtype, reason, note, ok := crdEvent(tc.prev, tc.seen, tc.cur)
			got := ""
			if ok {
				got = eventtype + " " + reason
			}
			if got != tc.want {
				t.Fatalf("event %q (%s), want %q", got, note, tc.want)
			}
			if ok && (!strings.Contains(note, "upstreams.poise.dev") || !strings.Contains(note, "sha256:b")) {
				t.Errorf("note %q does not name the CRD and the binary's version", note)
			}
			if ok && tc.cur.State == crdschema.Outdated && !strings.Contains(note, strings.Join(tc.cur.PrunedFields, ", ")) {
				t.Errorf("note %q does not name the pruned fields %v", note, tc.cur.PrunedFields)
			}
		})
	}
}
