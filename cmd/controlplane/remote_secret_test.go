package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestCreateRemoteSecretFlags: a command line that cannot work is a usage
// error (exit 2) that names the flag, before any cluster is reached.
func TestCreateRemoteSecretFlags(t *testing.T) {
	t.Parallel()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: a
  user: {token: not-a-secret}
contexts:
- name: east
  context: {cluster: a, user: a}
- name: west
  context: {cluster: a, user: a}
current-context: east
`), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "east"}, "--context CTX is required"},
		{[]string{"--context", "east"}, "--name NAME is required"},
		{[]string{"--context", "east", "--name", "East"}, `--name "East"`},
		{[]string{"--context", "east", "--name", "a.b"}, `--name "a.b"`},
		{[]string{"--context", "east", "--name", long}, "--name \"" + long[:63] + "...\": must be no more than 63 characters"},
		{[]string{"--context", "east", "--name", "-x"}, `--name "-x"`},
		{[]string{"--context", "east", "--name", "east", "--namespace", "Poise"}, `--namespace "Poise"`},
		{[]string{"--context", "east", "--name", "east", "--service-account", "a_b"}, `--service-account "a_b"`},
		{[]string{"--context", "east", "--name", "east", "--service-account", strings.Repeat("a", 250)}, "--service-account: at most 247 characters"},
		{[]string{"--context", "east", "--name", "east", "--server", "http://east:6443"}, `--server "http://east:6443": want https://`},
		{[]string{"--context", "east", "--name", "east", "--server", ""}, `--server "": want https://`},
		{[]string{"--context", "east", "--name", "east", "--server", "https://u:p@east"}, "want https://HOST"},
		{[]string{"--context", "east", "--name", "east", "--server", "https://" + strings.Repeat("a", 2048)}, "--server: at most 2048 characters"},
		{[]string{"--context", "east", "--name", "east", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--context", "east", "--name", "east", "--timeout", "11m"}, "--timeout 11m0s"},
		{[]string{"--rbac-only", "--context", "east"}, "--context: --rbac-only talks to no cluster"},
		{[]string{"--rbac-only", "--server", "https://east"}, "--server: --rbac-only"},
		{[]string{"--rbac-only", "--name", "A"}, `--name "A"`},
		{[]string{"--context", "north", "--name", "north", "--kubeconfig", kubeconfig}, `--context "north": no such context in the kubeconfig (it has: east, west)`},
		{[]string{"--context", "east", "--name", "east", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, "--kubeconfig"},
		{[]string{"--context", "east", "--name", "east", "extra"}, "unknown command"},
	} {
		args := append([]string{"create-remote-secret"}, tc.args...)
		code, stdout, stderr := runCLI(args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d (want 2), stdout %q, stderr %q (want %q in it)", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// TestCreateRemoteSecretRBACOnly: --rbac-only prints the remote objects,
// and the ClusterRole reads services, endpointslices and nodes, nothing else.
func TestCreateRemoteSecretRBACOnly(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("create-remote-secret", "--rbac-only", "--namespace", "mesh", "--service-account", "reader")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	docs := strings.Split(stdout, "\n---\n")
	var kinds []string
	for _, d := range docs {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name)
		if o.Kind == "ClusterRole" {
			var role rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(d), &role); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range role.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						got = append(got, g+"/"+res+":"+strings.Join(r.Verbs, ","))
					}
				}
			}
			if want := "/services:get,list,watch /nodes:get,list,watch discovery.k8s.io/endpointslices:get,list,watch"; strings.Join(got, " ") != want {
				t.Errorf("ClusterRole grants %v, want %s", got, want)
			}
		}
	}
	if want := "Namespace /mesh,ServiceAccount mesh/reader,ClusterRole /reader,ClusterRoleBinding /reader,Secret mesh/reader-token"; strings.Join(kinds, ",") != want {
		t.Errorf("--rbac-only prints %v, want %s", kinds, want)
	}
	if !strings.Contains(stdout, "type: kubernetes.io/service-account-token") || !strings.Contains(stdout, "kubernetes.io/service-account.name: reader") {
		t.Errorf("no token Secret for ServiceAccount reader:\n%s", stdout)
	}
}
