package leader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Lease lives where the flag says, else in the watched namespace, else
// in the pod's own, else in the kubeconfig context's; the reason goes to
// the log.
func TestElectionNamespace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pod := filepath.Join(dir, "namespace")
	if err := os.WriteFile(pod, []byte("poise-system\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	for _, tc := range []struct {
		flag, watched, podFile, context string
		want, why                       string
	}{
		{"lease-ns", "shop", pod, "team", "lease-ns", "--leader-election-namespace"},
		{"", "shop", pod, "team", "shop", "watched"},
		{"", "", pod, "team", "poise-system", "pod's own"},
		{"", "", absent, "team", "team", "kubeconfig context"},
	} {
		ns, why, err := LeaseNamespace(tc.flag, tc.watched, tc.podFile, tc.context)
		if err != nil || ns != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%+v: %q because %q (%v); want %q because …%s…", tc, ns, why, err, tc.want, tc.why)
		}
	}
	if _, _, err := LeaseNamespace("", "", absent, ""); err == nil || !strings.Contains(err.Error(), "--leader-election-namespace") {
		t.Errorf("nothing to go by: %v, want an error naming the flag", err)
	}
}
