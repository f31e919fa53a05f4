package controlplane_test

import (
	"os"
	"path/filepath"
	"testing"

	"poise.dev/poise/pkg/controlplane"
)

// The admin port has no authentication and its /debug views show every
// namespace, so serving it off loopback is said at start, and only then.
func TestAdminOffLoopbackWarns(t *testing.T) {
	t.Parallel()
	const warning = "serving the admin port on an address that is not loopback: it has no authentication, and /debug shows every namespace's topology and every connected client"
	for _, tc := range []struct {
		admin string
		warns bool
	}{
		{"127.0.0.1:0", false},
		{"localhost:0", false},
		{"0.0.0.0:0", true},
		{":0", true},
	} {
		t.Run(tc.admin, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "checkout.yaml"), []byte(planeManifests), 0o644); err != nil {
				t.Fatal(err)
			}
			a, logs := startPlane(t, controlplane.Config{Paths: []string{dir}, AdminAddress: tc.admin})
			warned := logs.Records(t, warning)
			if got := len(warned) == 1; got != tc.warns {
				t.Fatalf("admin on %s (%s): warned %d times, want a warning %v\n%s", tc.admin, a.Admin, len(warned), tc.warns, logs.String())
			}
			if tc.warns && (warned[0]["level"] != "WARN" || warned[0]["admin"] != a.Admin) {
				t.Errorf("the warning is %v; want level WARN and admin %s", warned[0], a.Admin)
			}
		})
	}
}
