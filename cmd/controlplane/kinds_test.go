package main

import (
	"strings"
	"testing"

	"poise.dev/poise/test/golden"
)

// TestKubernetesWalkthrough: the walkthrough's directory, which kubectl
// applies whole, validates and explains; its Namespaces, Services,
// Deployments and ConfigMap are skipped with one note naming them.
func TestKubernetesWalkthrough(t *testing.T) {
	t.Parallel()
	const dir = examples + "/kubernetes"
	note := "note: skipped 19 objects of other kinds (Service 8, Deployment 7, Namespace 2, ConfigMap 1, ServiceAccount 1) in " + dir + "\n"
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"validate-kubernetes", []string{"validate", "-f", dir}},
		{"explain-kubernetes", []string{"explain", "-f", dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			if stderr != note {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, note)
			}
			golden.Check(t, tc.name, stdout)
		})
	}
}

// TestOtherKindsAndNamespaces: what the commands say of documents that are
// not Poise objects, and of Poise objects without a namespace.
func TestOtherKindsAndNamespaces(t *testing.T) {
	t.Parallel()
	const (
		ns      = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
		svc     = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n"
		bare    = "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s}\n"
		noKind  = "apiVersion: v1\nmetadata: {name: web}\n"
		badVers = "apiVersion: poise.dev/v1beta1\nkind: Upstream\nmetadata: {name: web, namespace: shop}\n"
	)
	bareN := func(n int) string {
		var ds []string
		for i := range n {
			ds = append(ds, strings.Replace(bare, "%s", "u"+string(rune('a'+i)), 1))
		}
		return strings.Join(ds, "---\n")
	}
	tests := []struct {
		name   string
		files  map[string]string
		code   int
		stdout string
		stderr []string // lines, with FILE for the first file's path
	}{
		{
			name:   "a file of other kinds only",
			files:  map[string]string{"a.yaml": ns + "---\n" + svc},
			stdout: "valid: 0 object(s), 0 upstream(s), 0 endpoint(s)\n",
			stderr: []string{"note: skipped 2 objects of other kinds (Namespace 1, Service 1) in DIR"},
		},
		{
			name:   "namespace defaulted",
			files:  map[string]string{"a.yaml": ns + "---\n" + bareN(1) + "---\n" + upstream("web")},
			stdout: "valid: 2 object(s), 2 upstream(s), 0 endpoint(s)\n",
			stderr: []string{
				"note: skipped 1 object of other kinds (Namespace 1) in DIR",
				"note: 1 object(s) set no metadata.namespace and are read in namespace default, where kubectl apply puts them only when its context names no other: Upstream default/ua (FILE document 2)",
			},
		},
		{
			name:   "namespace defaulted: bounded",
			files:  map[string]string{"a.yaml": bareN(7)},
			stdout: "valid: 7 object(s), 7 upstream(s), 0 endpoint(s)\n",
			stderr: []string{
				"note: 7 object(s) set no metadata.namespace and are read in namespace default, where kubectl apply puts them only when its context names no other: " +
					"Upstream default/ua (FILE document 1), Upstream default/ub (FILE document 2), Upstream default/uc (FILE document 3), " +
					"Upstream default/ud (FILE document 4), Upstream default/ue (FILE document 5), and 2 more",
			},
		},
		{
			name:  "no kind; a version we do not serve; every problem of a document",
			files: map[string]string{"a.yaml": noKind + "---\n" + badVers + "---\n" + svc + "---\n" + upstream("web") + "spec: {protcol: GRPC, panicThreshold: 101, colour: red}\n"},
			code:  exitInvalid,
			stderr: []string{
				"error: invalid manifests:",
				"  FILE: document 1: apiVersion and kind are required",
				`  FILE: document 2 (Upstream shop/web): apiVersion: unsupported apiVersion "poise.dev/v1beta1": want poise.dev/v1alpha1`,
				"  FILE: document 4 (Upstream shop/web): spec.colour: unknown field",
				"  FILE: document 4 (Upstream shop/web): spec.protcol: unknown field (did you mean spec.protocol?)",
				"  FILE: document 4 (Upstream shop/web): spec.panicThreshold: Invalid value: 101: must be between 0 and 100",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var file string
			for name, content := range tc.files {
				file = write(t, dir, name, content)
			}
			code, stdout, stderr := runCLI("validate", "-f", dir)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if stdout != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.stdout)
			}
			want := strings.NewReplacer("FILE", file, "DIR", dir).Replace(strings.Join(tc.stderr, "\n") + "\n")
			if stderr != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
			}
			checkNoCrash(t, stderr)
		})
	}
}
