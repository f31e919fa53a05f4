package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func writeKubeconfig(t *testing.T, dir, name, server, namespace string) string {
	t.Helper()
	ns := ""
	if namespace != "" {
		ns = "\n    namespace: " + namespace
	}
	path := filepath.Join(dir, name)
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context:
    cluster: c
    user: u%s
current-context: x
`, server, ns)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The client configuration is found as kubectl and controllers find it: the
// flag, then $KUBECONFIG, then the pod's service account, then
// ~/.kube/config; the context's namespace comes along (kubectl's "default"
// when the context sets none).
func TestKubeClientLoadingOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flag := writeKubeconfig(t, dir, "flag", "https://flag.example:6443", "team-flag")
	env := writeKubeconfig(t, dir, "env", "https://env.example:6443", "team-env")
	home := writeKubeconfig(t, dir, "home", "https://home.example:6443", "")
	pod := func() (*rest.Config, error) { return &rest.Config{Host: "https://10.96.0.1:443"}, nil }
	notPod := func() (*rest.Config, error) { return nil, errors.New("not in a pod") }
	for _, tc := range []struct {
		name              string
		flag, env, home   string
		inCluster         func() (*rest.Config, error)
		wantHost, wantNS  string
		wantFrom, wantErr string
	}{
		{"the flag first", flag, env, home, pod, "https://flag.example:6443", "team-flag", "--kubeconfig", ""},
		{"then $KUBECONFIG", "", env, home, pod, "https://env.example:6443", "team-env", "$KUBECONFIG", ""},
		{"then the pod", "", "", home, pod, "https://10.96.0.1:443", "", "service account", ""},
		{"then ~/.kube/config, whose context has no namespace", "", "", home, notPod, "https://home.example:6443", "default", home, ""},
		{"nothing", "", "", filepath.Join(dir, "absent"), notPod, "", "", "", "pass --kubeconfig, set $KUBECONFIG"},
		{"a flag naming no file", filepath.Join(dir, "missing"), env, home, pod, "", "", "", "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc, err := findKubeClient(tc.flag, tc.env, tc.inCluster, tc.home)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if kc.config.Host != tc.wantHost || kc.namespace != tc.wantNS || !strings.Contains(kc.from, tc.wantFrom) {
				t.Errorf("host %q, namespace %q, from %q; want %q, %q, from %q", kc.config.Host, kc.namespace, kc.from, tc.wantHost, tc.wantNS, tc.wantFrom)
			}
		})
	}
}
