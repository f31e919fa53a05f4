package chart_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"poise.dev/poise/pkg/kube/crdschema"
	"poise.dev/poise/test/golden"
)

const (
	chartDir = "../../charts/poise"
	// crdChartDir is the CRD chart: the CRDs as templates, so that `helm
	// upgrade` applies their new schemas.
	crdChartDir = "../../charts/poise-crds"
	crdDir      = "../../config/crd"
	roleFile    = "../../config/rbac/role.yaml"
)

// helm returns the helm binary built by hack/helm.sh. A missing HELM fails
// the test: a chart that is never rendered is not tested.
func helm(t *testing.T) string {
	t.Helper()
	if os.Getenv("POISE_SKIP_HELM") == "1" {
		t.Skip("POISE_SKIP_HELM=1: the Helm chart is not rendered or checked")
	}
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run `make test`, or `HELM=$(bash hack/helm.sh) go test ./test/chart` " +
			"(hack/helm.sh builds helm v3.22.0 from the Go module proxy once per machine); " +
			"POISE_SKIP_HELM=1 skips the chart tests")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("HELM=%s: %v (run hack/helm.sh)", bin, err)
	}
	return bin
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	// Keep helm away from the user's repositories, plugins and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), err
}

// renderCase is one `helm template` of the chart.
type renderCase struct {
	name       string // golden file testdata/<name>.golden.yaml
	release    string
	namespace  string
	valuesFile string // empty: the chart's defaults
}

var cases = []renderCase{
	{name: "default", release: "poise", namespace: "poise-system"},
	{name: "custom", release: "edge", namespace: "mesh", valuesFile: "testdata/values-custom.yaml"},
}

// watchNamespace is the case's values' watchNamespace.
func (c renderCase) watchNamespace() string {
	if c.valuesFile == "" {
		return ""
	}
	raw, err := os.ReadFile(c.valuesFile)
	if err != nil {
		return ""
	}
	var v struct {
		WatchNamespace string `json:"watchNamespace"`
	}
	_ = yaml.Unmarshal(raw, &v)
	return v.WatchNamespace
}

// multicluster is the case's values' multicluster.enabled.
func (c renderCase) multicluster() bool {
	if c.valuesFile == "" {
		return false
	}
	raw, err := os.ReadFile(c.valuesFile)
	if err != nil {
		return false
	}
	var v struct {
		Multicluster struct {
			Enabled bool `json:"enabled"`
		} `json:"multicluster"`
	}
	_ = yaml.Unmarshal(raw, &v)
	return v.Multicluster.Enabled
}

func (c renderCase) render(t *testing.T) string {
	t.Helper()
	args := []string{"template", c.release, chartDir, "--namespace", c.namespace}
	if c.valuesFile != "" {
		args = append(args, "--values", c.valuesFile)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLint(t *testing.T) {
	t.Run("poise-crds", func(t *testing.T) {
		if out, err := runHelm(t, "lint", crdChartDir, "--strict"); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Fatalf("helm lint:\n%s", out)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"lint", chartDir, "--strict", "--namespace", c.namespace}
			if c.valuesFile != "" {
				args = append(args, "--values", c.valuesFile)
			}
			if out, err := runHelm(t, args...); err != nil {
				t.Fatal(err)
			} else if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

func TestGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// the generated CA and certificate differ at every rendering
			// (TestGeneratedTLS checks them)
			got := maskGenerated(c.render(t))
			golden.CheckFile(t, filepath.Join("testdata", c.name+".golden.yaml"), []byte(got))
		})
	}
}

// TestCLIFindsThePods: the pods of a release carry the labels
// `controlplane status --release RELEASE` selects them by, and their
// container serves the admin port the CLI reads from its --admin-address
// (docs/cli.md, "Which replicas").
func TestCLIFindsThePods(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := one(t, parse(t, c.render(t)), "Deployment")
			for key, want := range map[string]string{"app.kubernetes.io/instance": c.release, "app.kubernetes.io/part-of": "poise",
				"app.kubernetes.io/component": "controlplane"} {
				if got := str(d, "spec", "template", "metadata", "labels", key); got != want {
					t.Errorf("pod label %s = %q, want %q", key, got, want)
				}
			}
			if args := strs(d, "spec", "template", "spec", "containers", 0, "args"); !slices.Contains(args, "--admin-address=127.0.0.1:19000") {
				t.Errorf("container args %v: no --admin-address=127.0.0.1:19000", args)
			}
		})
	}
}

// obj is one rendered object, as unstructured maps.
type obj map[string]any

func (o obj) kind() string { s, _ := o["kind"].(string); return s }
func (o obj) name() string { return str(o, "metadata", "name") }

// get follows keys (string for maps, int for lists) and returns nil when any
// step is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(obj); isObj {
					m, ok = o, true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string { s, _ := get(v, path...).(string); return s }

func strs(v any, path ...any) []string {
	var out []string
	l, _ := get(v, path...).([]any)
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func parse(t *testing.T, rendered string) []obj {
	t.Helper()
	var objs []obj
	for _, doc := range docSep.Split(rendered, -1) {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if len(o) == 0 {
			continue // comments only
		}
		objs = append(objs, o)
	}
	return objs
}

func byKind(objs []obj, kind string) []obj {
	var out []obj
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func one(t *testing.T, objs []obj, kind string) obj {
	t.Helper()
	l := byKind(objs, kind)
	if len(l) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(l))
	}
	return l[0]
}

func TestObjects(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := parse(t, c.render(t))

			want := map[string]int{
				"Deployment": 1, "Service": 2, "ServiceAccount": 1,
				"ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
				"PodDisruptionBudget": 1, "PriorityLevelConfiguration": 1, "FlowSchema": 1,
				"Pod": 1, // the helm test hook
			}
			if c.name == "default" {
				// the chart's own CA and serving certificate, and the CA
				// certificate for clients (tls.enabled, no tls.secretName)
				want["Secret"], want["ConfigMap"] = 2, 1
			}
			if c.name == "custom" {
				want["NetworkPolicy"] = 1 // networkPolicy.enabled
				// watchNamespace: the topology's Role and RoleBinding live
				// there; multicluster: the remote clusters' Secrets' Role and
				// RoleBinding in the release namespace
				want["Role"], want["RoleBinding"] = 3, 3
			}
			got := map[string]int{}
			for _, o := range objs {
				got[o.kind()]++
			}
			for kind, n := range want {
				if got[kind] != n {
					t.Errorf("%s: want %d, got %d", kind, n, got[kind])
				}
			}
			for kind := range got {
				if _, ok := want[kind]; !ok {
					t.Errorf("unexpected kind %s rendered", kind)
				}
			}
			for _, o := range objs {
				ns := str(o, "metadata", "namespace")
				switch o.kind() {
				case "ClusterRole", "ClusterRoleBinding", "PriorityLevelConfiguration", "FlowSchema":
					if ns != "" {
						t.Errorf("%s %s: cluster-scoped object has namespace %q", o.kind(), o.name(), ns)
					}
					// one release name in two namespaces must not collide
					if !strings.HasPrefix(o.name(), c.namespace+"-") {
						t.Errorf("%s %s: a cluster-scoped name must carry the release namespace %q", o.kind(), o.name(), c.namespace)
					}
				case "Role", "RoleBinding":
					want := c.namespace
					if strings.HasSuffix(o.name(), "-topology") {
						want = c.watchNamespace()
					}
					if ns != want {
						t.Errorf("%s %s: namespace %q, want %q", o.kind(), o.name(), ns, want)
					}
				default:
					if ns != c.namespace {
						t.Errorf("%s %s: namespace %q, want the release namespace %q", o.kind(), o.name(), ns, c.namespace)
					}
				}
			}

			checkDeployment(t, c, one(t, objs, "Deployment"))
			checkWiring(t, objs)
			checkNetworkPolicy(t, c, objs)
		})
	}
}

func checkDeployment(t *testing.T, c renderCase, d obj) {
	t.Helper()
	pod := get(d, "spec", "template", "spec")
	ctr := get(pod, "containers", 0)
	if ctr == nil {
		t.Fatal("Deployment has no container")
	}

	// Pod and container security: the restricted Pod Security Standard.
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	sc := get(ctr, "securityContext")
	for field, want := range map[string]any{
		"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "privileged": false,
	} {
		if got := get(sc, field); got != want {
			t.Errorf("container securityContext.%s = %v, want %v", field, got, want)
		}
	}
	if drop := strs(sc, "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("container capabilities.drop = %v, want [ALL]", drop)
	}
	if add := get(sc, "capabilities", "add"); add != nil {
		t.Errorf("container adds capabilities %v", add)
	}
	if str(sc, "seccompProfile", "type") != "RuntimeDefault" {
		t.Error("container seccompProfile is not RuntimeDefault")
	}

	// Probes on the metrics port; the debug endpoints are not a container port.
	ports := map[string]float64{}
	for i := 0; get(ctr, "ports", i) != nil; i++ {
		ports[str(ctr, "ports", i, "name")], _ = get(ctr, "ports", i, "containerPort").(float64)
	}
	if len(ports) != 2 || ports["xds"] != 18000 || ports["metrics"] != 19001 {
		t.Errorf("container ports = %v, want xds 18000 and metrics 19001 only", ports)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := str(ctr, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path = %q, want %q", probe, got, path)
		}
		if got := get(ctr, probe, "httpGet", "port"); got != "metrics" {
			t.Errorf("%s port = %v, want the metrics port", probe, got)
		}
	}
	if get(ctr, "resources", "requests", "cpu") == nil || get(ctr, "resources", "requests", "memory") == nil {
		t.Error("container has no cpu and memory requests")
	}

	// The command line.
	args := strs(ctr, "args")
	for _, a := range []string{
		"serve", "--source=kubernetes", "--xds-address=0.0.0.0:18000", "--admin-address=127.0.0.1:19000",
		"--metrics-address=0.0.0.0:19001", "--leader-election-namespace=" + c.namespace,
	} {
		if !slices.Contains(args, a) {
			t.Errorf("args %v lack %s", args, a)
		}
	}
	if args[0] != "serve" {
		t.Errorf("args %v: first must be serve", args)
	}
	replicas, _ := get(d, "spec", "replicas").(float64)
	mounts := get(ctr, "volumeMounts")
	switch c.name {
	case "default":
		if replicas != 2 {
			t.Errorf("replicas = %v, want 2", replicas)
		}
		if !slices.Contains(args, "--log-format=json") {
			t.Errorf("args %v lack --log-format=json", args)
		}
		for _, a := range args {
			if strings.HasPrefix(a, "--tls-client-ca") || strings.HasPrefix(a, "--namespace") ||
				strings.HasPrefix(a, "--cluster-name") || strings.HasPrefix(a, "--remote-stale-after") ||
				a == "--xds-allow-anonymous-non-loopback" {
				t.Errorf("default args carry %s", a)
			}
		}
		// TLS from the chart's own serving certificate, and token
		// authentication (TestGeneratedTLS checks the certificate)
		for _, a := range []string{"--tls-cert=/etc/poise/tls/tls.crt", "--tls-key=/etc/poise/tls/tls.key", "--xds-auth=token", "--xds-token-audience=poise",
			"--default-export-to=*"} {
			if !slices.Contains(args, a) {
				t.Errorf("default args %v lack %s", args, a)
			}
		}
		if str(mounts, 0, "mountPath") != "/etc/poise/tls" || get(mounts, 0, "readOnly") != true || get(mounts, 1) != nil {
			t.Errorf("default container mounts %v, want the TLS Secret read-only at /etc/poise/tls alone", mounts)
		}
		if str(pod, "volumes", 0, "secret", "secretName") != "poise-tls" {
			t.Errorf("volumes = %v, want the chart's secret poise-tls", get(pod, "volumes"))
		}
		if get(pod, "topologySpreadConstraints", 0, "topologyKey") != "kubernetes.io/hostname" {
			t.Error("replicas are not spread across nodes")
		}
		if get(pod, "affinity", "podAntiAffinity") == nil {
			t.Error("no pod anti-affinity across nodes")
		}
	case "custom":
		if replicas != 3 {
			t.Errorf("replicas = %v, want 3", replicas)
		}
		for _, a := range []string{
			"--namespace=shop", "--tls-cert=/etc/poise/tls/tls.crt", "--tls-key=/etc/poise/tls/tls.key",
			"--tls-client-ca=/etc/poise/tls/ca.crt", "--debounce=250ms",
			"--xds-max-streams=3000", "--xds-max-streams-per-connection=10", "--drain-period=45s", "--default-export-to=.",
			"--cluster-name=west", "--remote-stale-after=2m", "--xds-trust-domain=cluster.local",
		} {
			if !slices.Contains(args, a) {
				t.Errorf("args %v lack %s", args, a)
			}
		}
		if str(mounts, 0, "mountPath") != "/etc/poise/tls" || get(mounts, 0, "readOnly") != true {
			t.Errorf("TLS secret is not mounted read-only at /etc/poise/tls: %v", mounts)
		}
		if str(pod, "volumes", 0, "secret", "secretName") != "poise-xds-tls" {
			t.Errorf("volumes = %v, want secret poise-xds-tls", get(pod, "volumes"))
		}
		if str(pod, "nodeSelector", "kubernetes.io/os") != "linux" {
			t.Errorf("nodeSelector = %v", get(pod, "nodeSelector"))
		}
		if str(ctr, "image") != "registry.example.com/platform/poise:v0.1.0-rc.1" {
			t.Errorf("image = %s", str(ctr, "image"))
		}
	}
}

// checkNetworkPolicy: none by default; when enabled it admits the xDS port
// from the configured peers and the metrics port from anywhere, and nothing
// else.
func checkNetworkPolicy(t *testing.T, c renderCase, objs []obj) {
	t.Helper()
	if c.name != "custom" {
		if np := byKind(objs, "NetworkPolicy"); len(np) != 0 {
			t.Errorf("%s: a NetworkPolicy without networkPolicy.enabled", c.name)
		}
		return
	}
	np := one(t, objs, "NetworkPolicy")
	if str(np, "spec", "ingress", 0, "ports", 0, "port") != "xds" || str(np, "spec", "ingress", 1, "ports", 0, "port") != "metrics" ||
		str(np, "spec", "ingress", 0, "from", 0, "namespaceSelector", "matchLabels", "example.com/mesh") != "true" ||
		get(np, "spec", "ingress", 1, "from") != nil || get(np, "spec", "ingress", 2) != nil {
		t.Errorf("NetworkPolicy ingress = %v", get(np, "spec", "ingress"))
	}
}

// checkWiring: Services, the PDB and the Deployment select the pods; the
// bindings name the roles and the ServiceAccount the pods run as.
func checkWiring(t *testing.T, objs []obj) {
	t.Helper()
	d := one(t, objs, "Deployment")
	podLabels, _ := get(d, "spec", "template", "metadata", "labels").(map[string]any)
	selects := func(what string, sel any) {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s: empty selector", what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s: selector %s=%v does not match the pods (%v)", what, k, v, podLabels)
			}
		}
	}
	selects("Deployment", get(d, "spec", "selector", "matchLabels"))
	selects("PodDisruptionBudget", get(one(t, objs, "PodDisruptionBudget"), "spec", "selector", "matchLabels"))
	for _, s := range byKind(objs, "Service") {
		selects("Service "+s.name(), get(s, "spec", "selector"))
		for _, target := range []string{str(s, "spec", "ports", 0, "targetPort")} {
			if target != "xds" && target != "metrics" {
				t.Errorf("Service %s targets port %q", s.name(), target)
			}
		}
	}
	sa := str(d, "spec", "template", "spec", "serviceAccountName")
	if sa != one(t, objs, "ServiceAccount").name() {
		t.Errorf("pods run as %q, not the chart's ServiceAccount", sa)
	}
	for _, pair := range [][2]string{{"ClusterRoleBinding", "ClusterRole"}, {"RoleBinding", "Role"}} {
		for _, b := range byKind(objs, pair[0]) {
			var r obj
			for _, o := range byKind(objs, pair[1]) {
				if o.name() == b.name() && str(o, "metadata", "namespace") == str(b, "metadata", "namespace") {
					r = o
				}
			}
			if r == nil || str(b, "roleRef", "kind") != pair[1] || str(b, "roleRef", "name") != r.name() {
				t.Errorf("%s %s refers to %v, want the %s of its name in its namespace", pair[0], b.name(), get(b, "roleRef"), pair[1])
			}
			if str(b, "subjects", 0, "name") != sa || get(b, "subjects", 1) != nil {
				t.Errorf("%s %s subjects = %v, want only ServiceAccount %s", pair[0], b.name(), get(b, "subjects"), sa)
			}
		}
	}
	// the FlowSchema puts the pods' ServiceAccount's status writes, and
	// nothing else, in the chart's priority level
	fs, pl := one(t, objs, "FlowSchema"), one(t, objs, "PriorityLevelConfiguration")
	if str(fs, "spec", "priorityLevelConfiguration", "name") != pl.name() {
		t.Errorf("FlowSchema %s refers to priority level %v, want %s", fs.name(), get(fs, "spec", "priorityLevelConfiguration"), pl.name())
	}
	if str(fs, "spec", "rules", 0, "subjects", 0, "serviceAccount", "name") != sa || get(fs, "spec", "rules", 0, "subjects", 1) != nil {
		t.Errorf("FlowSchema %s subjects = %v, want only ServiceAccount %s", fs.name(), get(fs, "spec", "rules", 0, "subjects"), sa)
	}
	res, _ := get(fs, "spec", "rules", 0, "resourceRules", 0, "resources").([]any)
	for _, r := range res {
		if !strings.HasSuffix(fmt.Sprint(r), "/status") {
			t.Errorf("FlowSchema %s matches %v, which is not a status subresource", fs.name(), r)
		}
	}
}

// grant is one (apiGroup, resource, verb) an RBAC rule allows, on the
// objects of those names only when names is set (comma-separated, sorted).
type grant struct{ group, resource, verb, names string }

// String is group/resource, the core group spelled "core", and [names].
func (g grant) String() string {
	out := g.group + "/" + g.resource
	if g.group == "" {
		out = "core/" + g.resource
	}
	if g.names != "" {
		out += "[" + g.names + "]"
	}
	return out
}

func grants(t *testing.T, role any) []grant {
	t.Helper()
	var out []grant
	rules, _ := get(role, "rules").([]any)
	for _, r := range rules {
		if get(r, "nonResourceURLs") != nil {
			t.Errorf("unexpected rule shape %v", r)
		}
		names := strings.Join(sorted(strs(r, "resourceNames")), ",")
		for _, g := range strs(r, "apiGroups") {
			for _, res := range strs(r, "resources") {
				for _, v := range strs(r, "verbs") {
					out = append(out, grant{g, res, v, names})
				}
			}
		}
	}
	return out
}

var readVerbs = []string{"get", "list", "watch"}

// tokenAuthentication is what token authentication of xDS clients needs,
// cluster-wide: TokenReviews (which store nothing) and reading the pod a
// token is bound to.
func tokenAuthentication(g grant) bool {
	return g.group == "authentication.k8s.io" && g.resource == "tokenreviews" && g.verb == "create" ||
		g.group == "" && g.resource == "pods" && g.verb == "get"
}

// crdNames are the names of the CRDs of config/crd, comma-separated and
// sorted, as grant.names holds them.
func crdNames(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdDir, err)
	}
	var names []string
	for _, f := range files {
		// poise.dev_upstreams.yaml is upstreams.poise.dev
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "poise.dev_"), ".yaml")+".poise.dev")
	}
	return strings.Join(sorted(names), ",")
}

// crdSchemaCheck is what the check of the cluster's CRD schemas needs,
// cluster-wide: reading Poise's own CRDs, by name, and no other.
func crdSchemaCheck(t *testing.T, g grant) bool {
	return g.group == "apiextensions.k8s.io" && g.resource == "customresourcedefinitions" &&
		slices.Contains(readVerbs, g.verb) && g.names == crdNames(t)
}

func TestRBAC(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := parse(t, c.render(t))
			cluster := grants(t, one(t, objs, "ClusterRole"))
			var ns, topology, remote []grant
			for _, r := range byKind(objs, "Role") {
				switch {
				case strings.HasSuffix(r.name(), "-topology"):
					topology = append(topology, grants(t, r)...)
				case strings.HasSuffix(r.name(), "-remote-clusters"):
					if got := str(r, "metadata", "namespace"); got != c.namespace {
						t.Errorf("Role %s is in namespace %q: the remote clusters' Secrets are read in the release namespace %q only", r.name(), got, c.namespace)
					}
					remote = append(remote, grants(t, r)...)
				default:
					ns = append(ns, grants(t, r)...)
				}
			}
			// With watchNamespace the topology is read, and its status
			// written, in that namespace only: cluster-wide, only Nodes,
			// and what token authentication needs wherever clients run.
			if c.watchNamespace() != "" {
				for _, g := range cluster {
					if tokenAuthentication(g) || crdSchemaCheck(t, g) {
						continue
					}
					if g.group != "" || g.resource != "nodes" || !slices.Contains(readVerbs, g.verb) {
						t.Errorf("with watchNamespace the ClusterRole grants %q on %s: only reading Nodes and Poise's CRDs (cluster-scoped) belongs there", g.verb, g)
					}
				}
				if len(topology) == 0 {
					t.Error("with watchNamespace there is no Role in that namespace to read the topology")
				}
			} else if len(topology) > 0 {
				t.Errorf("without watchNamespace a topology Role is rendered: %v", topology)
			}
			cluster = append(cluster, topology...)

			// Cluster-wide: read the topology, write only status of our kinds,
			// and record Events about them.
			for _, g := range cluster {
				if g.group == "*" || g.resource == "*" || g.verb == "*" {
					t.Errorf("ClusterRole has a wildcard: %+v", g)
				}
				if g.resource == "leases" || g.group == "coordination.k8s.io" {
					t.Errorf("ClusterRole grants leases (%+v): the election belongs in the namespaced Role", g)
				}
				if g.resource == "customresourcedefinitions" && !crdSchemaCheck(t, g) {
					t.Errorf("ClusterRole grants %q on %s: only reading Poise's own CRDs, by name (%s)", g.verb, g, crdNames(t))
				}
				if slices.Contains(readVerbs, g.verb) || tokenAuthentication(g) ||
					(g.group == "events.k8s.io" && g.resource == "events" && (g.verb == "create" || g.verb == "patch")) {
					continue
				}
				if g.group != "poise.dev" || !strings.HasSuffix(g.resource, "/status") {
					t.Errorf("ClusterRole grants write verb %q on %s: only */status of poise.dev kinds may be written",
						g.verb, g)
				}
			}

			// Namespaced: the election's Lease, the Events it records on it,
			// and the ConfigMaps the replicas share their load aggregates in.
			sawLease := false
			for _, g := range ns {
				switch {
				case g.group == "coordination.k8s.io" && g.resource == "leases":
					sawLease = true
				case (g.group == "" || g.group == "events.k8s.io") && g.resource == "events" && (g.verb == "create" || g.verb == "patch"):
				case g.group == "" && g.resource == "configmaps" && g.verb != "update" && g.verb != "watch":
				case g.group == "" && g.resource == "secrets" && slices.Contains(readVerbs, g.verb):
					// the remote clusters' Secrets, in Poise's namespace only (docs/multicluster.md)
				default:
					t.Errorf("Role grants %q on %s: it is for the leader-election Lease (and its Events), the shared load aggregates and reading the remote clusters' Secrets only", g.verb, g)
				}
			}
			if !sawLease {
				t.Error("Role does not grant leases: leader election cannot work")
			}

			// Multi-cluster: reading Secrets (get, list, watch) in the release
			// namespace, with multicluster.enabled only, and nowhere else.
			wantRemote := []string(nil)
			if c.multicluster() {
				wantRemote = []string{"core/secrets:get", "core/secrets:list", "core/secrets:watch"}
			}
			if got := set(remote); !slices.Equal(got, wantRemote) {
				t.Errorf("the remote clusters' Role grants %v, want %v", got, wantRemote)
			}
			for _, g := range append(cluster, ns...) {
				if g.resource == "secrets" {
					t.Errorf("%q on secrets outside the remote clusters' Role: it belongs there, in the release namespace, with multicluster.enabled", g.verb)
				}
			}

			// Together they are exactly the generated least-privilege role
			// (which may grant secrets, for the remote clusters: the chart
			// grants them in the release namespace only, checked above).
			raw, err := os.ReadFile(roleFile)
			if err != nil {
				t.Fatal(err)
			}
			// the ClusterRole, and the Role of Poise's namespace (the remote
			// clusters' Secrets)
			var all []grant
			for _, doc := range strings.Split(string(raw), "\n---\n") {
				var generated obj
				if err := yaml.Unmarshal([]byte(doc), &generated); err != nil {
					t.Fatal(err)
				}
				all = append(all, grants(t, generated)...)
			}
			// the chart grants Secrets only with multicluster.enabled, in a
			// Role of its own, checked above
			want := set(slices.DeleteFunc(all, func(g grant) bool { return g.group == "" && g.resource == "secrets" }))
			got := set(append(cluster, ns...))
			if !slices.Equal(got, want) {
				t.Errorf("ClusterRole + Role grant\n  %v\nbut %s (generated from the kubebuilder markers) grants\n  %v\nupdate charts/poise/templates/clusterrole.yaml and role.yaml",
					got, roleFile, want)
			}
		})
	}
}

func set(gs []grant) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.String()+":"+g.verb)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestCRDsMatchGenerated: the CRD chart's templates are the CRDs of
// config/crd, each with helm.sh/resource-policy: keep beside its schema
// version, and nothing else (`make generate` writes both); the chart's
// rendering is exactly those CRDs; the poise chart ships none (a crds/
// directory would be installed once and never upgraded), and the two charts
// are released together.
func TestCRDsMatchGenerated(t *testing.T) {
	list := func(dir string) []string {
		m, err := filepath.Glob(filepath.Join(dir, "poise.dev_*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	templates := filepath.Join(crdChartDir, "templates")
	gen, chart := list(crdDir), list(templates)
	if len(gen) == 0 {
		t.Fatalf("no CRDs in %s", crdDir)
	}
	if !slices.Equal(gen, chart) {
		t.Fatalf("CRD files differ: config/crd has %v, charts/poise-crds/templates has %v; run `make generate`", gen, chart)
	}
	read := func(path string) obj {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var o obj
		if err := yaml.Unmarshal(raw, &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return o
	}
	for _, name := range gen {
		want, got := read(filepath.Join(crdDir, name)), read(filepath.Join(templates, name))
		if str(want, "metadata", "annotations", crdschema.Annotation) == "" {
			t.Errorf("config/crd/%s has no %s; run `make generate`", name, crdschema.Annotation)
		}
		get(want, "metadata", "annotations").(map[string]any)["helm.sh/resource-policy"] = "keep"
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(got)
		if !bytes.Equal(a, b) {
			t.Errorf("charts/poise-crds/templates/%s is not config/crd/%s with helm.sh/resource-policy: keep; run `make generate`", name, name)
		}
	}
	rendered, err := runHelm(t, "template", "poise-crds", crdChartDir)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, rendered)
	if len(objs) != len(gen) || len(byKind(objs, "CustomResourceDefinition")) != len(gen) {
		t.Errorf("the CRD chart renders %d objects, want the %d CRDs", len(objs), len(gen))
	}
	if _, err := os.Stat(filepath.Join(chartDir, "crds")); !os.IsNotExist(err) {
		t.Errorf("charts/poise/crds exists (%v): Helm installs it once and never upgrades it; the CRDs belong to charts/poise-crds", err)
	}
	meta := func(dir string) (v, app string) {
		o := read(filepath.Join(dir, "Chart.yaml"))
		return str(o, "version"), str(o, "appVersion")
	}
	v1, a1 := meta(chartDir)
	if v2, a2 := meta(crdChartDir); v1 != v2 || a1 != a2 {
		t.Errorf("charts/poise is %s (app %s), charts/poise-crds %s (app %s): release them together", v1, a1, v2, a2)
	}
}

func TestInvalidValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		// token authentication needs TLS; mTLS needs a CA of one's own
		{[]string{"tls.enabled=false"}, "xds.auth token needs tls.enabled"},
		{[]string{"tls.enabled=false", `xds.auth=mtls\,token`}, "xds.auth token needs tls.enabled"},
		{[]string{"tls.clientCA=true", "tls.enabled=false"}, "tls.clientCA (mTLS) needs tls.enabled=true"},
		{[]string{"tls.clientCA=true"}, "tls.clientCA (mTLS) needs tls.secretName"},
		{[]string{"xds.auth=mtls", "tls.secretName=x"}, "xds.auth mtls needs tls.enabled and tls.clientCA"},
		{[]string{"tls.secretName=x", "tls.generated.caNamespaces={shop}"}, "tls.generated.caNamespaces publishes the chart's own CA"},
		{[]string{"xds.auth=none", "tls.enabled=false", "tls.generated.caNamespaces={shop}"}, "tls.generated.caNamespaces publishes the chart's own CA"},
		// values.schema.json: a bad value fails at render time, naming it
		{[]string{"logLevel=verbose"}, "/logLevel"},
		{[]string{"logFormat=xml"}, "/logFormat"},
		{[]string{"replicaCount=0"}, "/replicaCount"},
		{[]string{"statusWriter.share=1.5"}, "/statusWriter/share"},
		{[]string{"service.xdsPort=70000"}, "/service/xdsPort"},
		// the bounds serve holds its flags to (docs/cli.md)
		{[]string{"xds.maxStreams=1000001"}, "/xds/maxStreams"},
		{[]string{"xds.maxStreamsPerConnection=10001"}, "/xds/maxStreamsPerConnection"},
		{[]string{"xds.drainSeconds=601"}, "/xds/drainSeconds"},
		{[]string{"kubeAPI.qps=100001"}, "/kubeAPI/qps"},
		{[]string{"kubeAPI.burst=100001"}, "/kubeAPI/burst"},
		{[]string{"statusWriter.writers=1025"}, "/statusWriter/writers"},
		{[]string{"metrics.maxUpstreams=100001"}, "/metrics/maxUpstreams"},
		{[]string{"watchNamespace=Shop_1"}, "/watchNamespace"},
		{[]string{"multicluster.clusterName=Home"}, "/multicluster/clusterName"},
		{[]string{"multicluster.clusterName="}, "/multicluster/clusterName"},
		{[]string{"multicluster.staleAfter=60"}, "/multicluster/staleAfter"},
		{[]string{"multicluster.enable=true"}, "additional properties 'enable' not allowed"},
		{[]string{"xds.defaultExportTo={Shop}"}, "/xds/defaultExportTo/0"},
		{[]string{"xds.defaultExportTo={}"}, "/xds/defaultExportTo"},
		{[]string{"xds.defaultExportTo={*,shop}"}, `xds.defaultExportTo: "*" (every namespace) stands alone`},
		{[]string{"tls.generated.validityDays=0"}, "/tls/generated/validityDays"},
		{[]string{"tls.generated.extraDNSNames={Bad_Name}"}, "/tls/generated/extraDNSNames/0"},
		{[]string{"tls.generated.caNamespaces={Shop}"}, "/tls/generated/caNamespaces/0"},
		{[]string{"tls.generated.clusterDomain="}, "/tls/generated/clusterDomain"},
		{[]string{"xds.trustDomain=spiffe://cluster.local"}, "/xds/trustDomain"},
		{[]string{"extraArgs={debounce=1s}"}, "/extraArgs/0"},
		{[]string{"logLevl=debug"}, "additional properties 'logLevl' not allowed"},
		{[]string{"xds.maxStream=10"}, "additional properties 'maxStream' not allowed"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			args := []string{"template", "poise", chartDir}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := runHelm(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestSingleReplicaHasNoPDB: a PDB with minAvailable 1 over one replica would
// block every node drain.
func TestSingleReplicaHasNoPDB(t *testing.T) {
	out, err := runHelm(t, "template", "poise", chartDir, "--set", "replicaCount=1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(byKind(parse(t, out), "PodDisruptionBudget")); n != 0 {
		t.Errorf("replicaCount=1 renders %d PodDisruptionBudget(s)", n)
	}
}

// TestServiceMonitor: the opt-in ServiceMonitor scrapes /metrics through
// the metrics Service, and selects that Service only.
func TestServiceMonitor(t *testing.T) {
	out, err := runHelm(t, "template", "poise", chartDir, "--namespace", "poise-system",
		"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom")
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	sm := one(t, objs, "ServiceMonitor")
	if got := str(sm, "metadata", "labels", "release"); got != "prom" {
		t.Errorf("ServiceMonitor label release = %q, want prom", got)
	}
	sel, _ := get(sm, "spec", "selector", "matchLabels").(map[string]any)
	var matched []string
	for _, svc := range byKind(objs, "Service") {
		labels, _ := get(svc, "metadata", "labels").(map[string]any)
		all := len(sel) > 0
		for k, v := range sel {
			if labels[k] != v {
				all = false
			}
		}
		if all {
			matched = append(matched, svc.name())
		}
	}
	if !slices.Equal(matched, []string{"poise-metrics"}) {
		t.Errorf("the ServiceMonitor selects Services %v, want only poise-metrics", matched)
	}
	if str(sm, "spec", "endpoints", 0, "port") != "http-metrics" || str(sm, "spec", "endpoints", 0, "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v", get(sm, "spec", "endpoints"))
	}
	if def, _ := runHelm(t, "template", "poise", chartDir); strings.Contains(def, "kind: ServiceMonitor") {
		t.Error("a ServiceMonitor is rendered by default; it needs the Prometheus Operator's CRDs")
	}
}

// TestGrafanaDashboard: the opt-in dashboard is valid JSON, every panel
// queries something, and every series it queries is one Poise exports
// (docs/observability.md lists them all).
func TestGrafanaDashboard(t *testing.T) {
	out, err := runHelm(t, "template", "poise", chartDir, "--namespace", "poise-system", "--set", "grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	var cm obj
	for _, o := range byKind(parse(t, out), "ConfigMap") {
		if o.name() == "poise-dashboard" {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap poise-dashboard")
	}
	if str(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("the dashboard ConfigMap lacks the sidecar's label: %v", get(cm, "metadata", "labels"))
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(str(cm, "data", "poise-traffic.json")), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	docs, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile("poise_[a-z_]+")
	exported := map[string]bool{}
	for _, n := range series.FindAllString(string(docs), -1) {
		exported[n] = true
	}
	if len(dash.Panels) < 5 {
		t.Fatalf("%d panels", len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range series.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
				if !exported[base] {
					t.Errorf("panel %q queries %s, which Poise does not export", p.Title, n)
				}
			}
		}
	}
	if def, _ := runHelm(t, "template", "poise", chartDir); strings.Contains(def, "poise-traffic.json") {
		t.Error("the dashboard is rendered by default")
	}
}

// TestHelmTestPod: `helm test` runs the release's image with the release's
// ServiceAccount to read the cluster's topology as a replica would
// (explain --source=kubernetes, limited to watchNamespace when set), and
// nothing of the release selects that pod.
func TestHelmTestPod(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := parse(t, c.render(t))
			pod := one(t, objs, "Pod")
			if str(pod, "metadata", "annotations", "helm.sh/hook") != "test" {
				t.Errorf("the pod is not a helm test hook: %v", get(pod, "metadata", "annotations"))
			}
			args := strs(pod, "spec", "containers", 0, "args")
			want := []string{"explain", "--source=kubernetes"}
			if ns := c.watchNamespace(); ns != "" {
				want = append(want, "--namespace="+ns)
			}
			want = append(want, "--output=json")
			if !slices.Equal(args, want) {
				t.Errorf("test pod args %v, want %v", args, want)
			}
			d := one(t, objs, "Deployment")
			if got, want := str(pod, "spec", "serviceAccountName"), str(d, "spec", "template", "spec", "serviceAccountName"); got != want {
				t.Errorf("the test pod runs as %q, the replicas as %q", got, want)
			}
			if got, want := str(pod, "spec", "containers", 0, "image"), str(d, "spec", "template", "spec", "containers", 0, "image"); got != want {
				t.Errorf("the test pod runs image %q, the replicas %q", got, want)
			}
			labels, _ := get(pod, "metadata", "labels").(map[string]any)
			for _, o := range objs {
				var sel map[string]any
				switch o.kind() {
				case "Service":
					sel, _ = get(o, "spec", "selector").(map[string]any)
				case "PodDisruptionBudget", "Deployment":
					sel, _ = get(o, "spec", "selector", "matchLabels").(map[string]any)
				default:
					continue
				}
				all := len(sel) > 0
				for k, v := range sel {
					if labels[k] != v {
						all = false
					}
				}
				if all {
					t.Errorf("%s %s selects the helm test pod", o.kind(), o.name())
				}
			}
		})
	}
}
