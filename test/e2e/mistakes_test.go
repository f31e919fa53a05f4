package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// TestOneCharacterMistakesKeepTheSplit: on the real binary serving files,
// each one-character mistake of the issue list — an EndpointSet naming a
// mistyped upstream, the Upstream losing its namespace (held by the settle
// rule first, for the objects it orphans), the Upstream's group mistyped, a
// Locality's zone mistyped — is refused: the log says why, /readyz warns,
// poise_source_refusing is 1, the published revision does not move and a
// connected gRPC client keeps the last good split. Putting the file back
// clears the warning.
func TestOneCharacterMistakesKeepTheSplit(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 8)
	manifests := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	topology{panicMode: "UseAll", unhealthy: unhealthy(3)}.write(t, manifests, backends)
	good, err := os.ReadFile(filepath.Join(manifests, "echo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr, "--settle", "300ms")
	conn := splitcheck.NewXDSClient(t, xdsAddr, node, listener)
	var live explain.Report
	testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream=e2e/echo", &live)
	cp.waitAcked(t, node, live.Revision, 10*time.Second)
	want := splitcheck.ExpectationOf(t, live)
	splitcheck.Warm(t, conn, want)

	readyz := func() string {
		resp, err := http.Get(cp.adminURL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, tc := range []struct {
		name     string
		old, new string
		reason   string // in the log and /readyz
	}{
		{"an EndpointSet names a mistyped upstream", "name: us-east-b, namespace: e2e}\nspec:\n  upstream: echo\n", "name: us-east-b, namespace: e2e}\nspec:\n  upstream: ecoh\n",
			"spec.upstream: no Upstream e2e/ecoh (did you mean echo?)"},
		{"the Upstream loses its namespace", "kind: Upstream\nmetadata: {name: echo, namespace: e2e}\n", "kind: Upstream\nmetadata: {name: echo}\n",
			"no Upstream e2e/echo (an Upstream default/echo exists: did it lose its metadata.namespace?)"},
		{"the Upstream's group is mistyped", "apiVersion: poise.dev/v1alpha1\nkind: Upstream\n", "apiVersion: poise.io/v1alpha1\nkind: Upstream\n",
			"apiVersion: unknown apiVersion"},
		{"a Locality's zone is mistyped", "zone: eu-west-a, weight: 3}", "zone: eu-west-la, weight: 3}",
			"spec.zone: matches no endpoints of Upstream e2e/echo"},
	} {
		edited := strings.Replace(string(good), tc.old, tc.new, 1)
		if edited == string(good) {
			t.Fatalf("%s: %q is not in the manifest", tc.name, tc.old)
		}
		rejected := cp.metric(t, `poise_source_batches_total{result="rejected",source="files"}`)
		revision := cp.metric(t, "poise_xds_published_revision")
		start := time.Now()
		writeAtomically(t, filepath.Join(manifests, "echo.yaml"), edited)
		testkit.Eventually(t, 10*time.Second, tc.name+": refused", func() (bool, string) {
			n := cp.metric(t, `poise_source_batches_total{result="rejected",source="files"}`)
			return n > rejected, ""
		})
		t.Logf("%s: refused %v after it was written", tc.name, time.Since(start).Round(time.Millisecond))
		if r := readyz(); !strings.Contains(r, "warning: the latest manifest change is refused") || !strings.Contains(r, tc.reason) {
			t.Errorf("%s: /readyz says\n%s\nwant a warning with %q", tc.name, r, tc.reason)
		}
		if got := cp.metric(t, `poise_source_refusing{source="files"}`); got != 1 {
			t.Errorf("%s: poise_source_refusing = %v, want 1", tc.name, got)
		}
		cp.waitLogged(t, tc.name+": the reason logged", tc.reason)
		if got := cp.metric(t, "poise_xds_published_revision"); got != revision {
			t.Fatalf("%s: the published revision moved from %v to %v", tc.name, revision, got)
		}
		splitcheck.CheckSplit(t, tc.name, splitcheck.Send(conn, rpcs), want)

		writeAtomically(t, filepath.Join(manifests, "echo.yaml"), string(good))
		testkit.Eventually(t, 10*time.Second, tc.name+": put back", func() (bool, string) {
			r := readyz()
			return !strings.Contains(r, "warning:") && cp.metric(t, `poise_source_refusing{source="files"}`) == 0, r
		})
	}
	const held = "the namespace lost held back first for the objects it orphans"
	cp.waitLogged(t, held, "manifest change held back")
	cp.waitLogged(t, held, "would take 1 of its 9 objects away and leave 8 objects naming an Upstream or SpatialDomain no file defines")
}
