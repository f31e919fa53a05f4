package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"poise.dev/poise/pkg/kube/crdschema"
	"poise.dev/poise/test/golden"
	"poise.dev/poise/test/kubemanifests"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	// shopDir holds the manifests of the walkthrough in docs/helm.md, which
	// the kind suite applies too.
	shopDir = "../../examples/kubernetes"
	// kindValues are the chart values the kind suite installs with.
	kindValues = "../kind/testdata/values-kind.yaml"
	// kustomizeDir is the plain install: kubectl apply -k config/default
	kustomizeDir = "../../config/default"
	// shopNS is the walkthrough's namespace of Envoy and its backends.
	shopNS = "shop"
	// serviceRange is the Service CIDR of the kind suite's cluster
	// (test/kind/testdata/kind-config.yaml); the walkthrough pins ClusterIPs in it.
	serviceRange = "10.96.0.0/16"
	fieldOwner   = "poise-chart-test"
)

// apiServer is a real kube-apiserver and etcd (envtest) with nothing
// installed: no CRDs, no namespaces but the built-in ones.
type apiServer struct {
	env        *envtest.Environment
	cfg        *rest.Config
	kubeconfig string
	c          client.Client
}

// startAPIServer starts the apiserver the envtest suites use. A missing
// KUBEBUILDER_ASSETS fails the test: an install that never ran is not tested.
func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	if os.Getenv("POISE_SKIP_ENVTEST") == "1" {
		t.Skip("POISE_SKIP_ENVTEST=1: helm install into a real kube-apiserver is not tested")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: this test installs the chart into a real kube-apiserver and etcd. " +
			"Run `make test`, or `KUBEBUILDER_ASSETS=$(bash hack/test-binaries.sh) HELM=$(bash hack/helm.sh) go test ./test/chart` " +
			"(hack/test-binaries.sh builds them once per machine); POISE_SKIP_ENVTEST=1 skips it on purpose")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("KUBEBUILDER_ASSETS=%s has no %s (%v): run `bash hack/test-binaries.sh`", assets, bin, err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets} // no CRDs: the chart installs them
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", serviceRange)
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	t.Logf("kube-apiserver and etcd up in %v at %s", time.Since(start).Round(time.Millisecond), cfg.Host)

	// env.KubeConfig is an admin (system:masters) kubeconfig with the client
	// certificate and key inline, for helm.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 30 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{env: env, cfg: cfg, kubeconfig: kubeconfig, c: c}
}

// TestInstall runs the real `helm install` of the CRD chart, then of the
// chart, against a real kube-apiserver, with the default values and with the custom values file,
// checks that the server holds every object as the chart rendered it and
// that the CRDs it serves are those of config/crd, then validates the
// walkthrough's manifests and the kind suite's rendering on that server
// (server-side apply, dry run). The default release is then upgraded as the
// walkthrough does (its generated CA and certificate must stay), and serves
// the walkthrough's Envoy over TLS with its token.
func TestInstall(t *testing.T) {
	helm(t) // HELM first: fail or skip before starting anything
	srv := startAPIServer(t)
	// the custom values watch namespace shop, where the chart puts the Role
	// that reads the topology: it must exist, as it would in a cluster
	for _, c := range cases {
		if ns := c.watchNamespace(); ns != "" {
			if err := srv.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The CRD chart first, once for the cluster, as docs/helm.md says.
	if !t.Run("install-crds", func(t *testing.T) {
		out, err := runHelm(t, "install", "poise-crds", crdChartDir, "--namespace", cases[0].namespace, "--create-namespace",
			"--kubeconfig", srv.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "STATUS: deployed") {
			t.Errorf("helm install poise-crds did not report STATUS: deployed:\n%s", out)
		}
	}) {
		t.FailNow()
	}
	for _, c := range cases {
		ok := t.Run("install-"+c.name, func(t *testing.T) {
			args := []string{"install", c.release, chartDir, "--namespace", c.namespace, "--create-namespace",
				"--wait=false", "--kubeconfig", srv.kubeconfig}
			if c.valuesFile != "" {
				args = append(args, "--values", c.valuesFile)
			}
			start := time.Now()
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("helm install %s took %v", c.release, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(out, "STATUS: deployed") {
				t.Errorf("helm install did not report STATUS: deployed:\n%s", out)
			}
			if !strings.Contains(out, fmt.Sprintf("%s.%s.svc", fullname(c.release), c.namespace)) {
				t.Errorf("NOTES do not name the xDS Service %s.%s.svc:\n%s", fullname(c.release), c.namespace, out)
			}
			status := "controlplane status -n " + c.namespace
			if c.release != "poise" {
				status += " --release " + c.release
			}
			if !strings.Contains(out, status+"\n") {
				t.Errorf("NOTES do not say %q:\n%s", status, out)
			}
			checkInstalled(t, srv, c)
		})
		if !ok {
			t.FailNow()
		}
	}

	// A second release of the same name in another namespace installs beside
	// the first: cluster-scoped objects carry the namespace, and the
	// status writers elect on Leases of their own.
	t.Run("same-name-other-namespace", func(t *testing.T) {
		second := renderCase{name: "second", release: cases[0].release, namespace: "poise-other"}
		out, err := runHelm(t, "install", second.release, chartDir, "--namespace", second.namespace, "--create-namespace",
			"--wait=false", "--kubeconfig", srv.kubeconfig)
		if err != nil {
			t.Fatalf("a second release %q in %s: %v", second.release, second.namespace, err)
		}
		if !strings.Contains(out, "STATUS: deployed") {
			t.Errorf("helm install did not report STATUS: deployed:\n%s", out)
		}
		checkInstalled(t, srv, second)
		leases := map[string]bool{}
		for _, c := range []renderCase{cases[0], second} {
			for _, a := range strs(one(t, parse(t, c.render(t)), "Deployment"), "spec", "template", "spec", "containers", 0, "args") {
				if v, ok := strings.CutPrefix(a, "--leader-election-id="); ok {
					leases[c.namespace+"/"+v] = true
				}
			}
		}
		if len(leases) != 2 {
			t.Errorf("the two releases elect on Leases %v, want one each", leases)
		}
	})
	t.Run("kustomize-default", func(t *testing.T) { checkKustomize(t, srv) })
	if !t.Run("crds", func(t *testing.T) { checkServedCRDs(t, srv) }) {
		t.FailNow()
	}
	t.Run("reads-its-own-crds-only", func(t *testing.T) { checkCRDAccess(t, srv, cases[0]) })
	t.Run("status-writes-priority-level", func(t *testing.T) { checkStatusPriorityLevel(t, srv, cases[0]) })
	t.Run("shop-manifests-dry-run", func(t *testing.T) { checkShopManifests(t, srv) })
	t.Run("dry-run-rejects", func(t *testing.T) { checkDryRunRejects(t, srv) })
	// The walkthrough's install: the defaults, with the CA ConfigMap written
	// into shop (created above), upgraded again and again.
	if !t.Run("upgrade-keeps-tls", func(t *testing.T) { checkUpgradeKeepsTLS(t, srv, cases[0]) }) {
		t.FailNow()
	}
	t.Run("kind-values-dry-run", func(t *testing.T) {
		out, err := runHelm(t, "template", "poise", chartDir, "--namespace", "poise-system", "--values", kindValues)
		if err != nil {
			t.Fatal(err)
		}
		objs := toUnstructured(t, parse(t, out))
		if len(objs) == 0 {
			t.Fatal("the kind values render no objects")
		}
		// Release "poise" in poise-system is installed above with the
		// defaults: these applies are updates of its objects.
		for _, u := range objs {
			if err := dryRunApply(srv, u); err != nil {
				t.Errorf("%s: %v", describe(u), err)
			}
		}
		t.Logf("%d objects of `helm template -f %s` accepted (server-side apply, dry run)", len(objs), kindValues)
	})
	// Last, as it applies the walkthrough for real and runs a replica.
	t.Run("walkthrough-envoy-served", func(t *testing.T) { checkWalkthroughEnvoy(t, srv, cases[0]) })
}

// fullname is the chart's poise.fullname for a release without overrides.
func fullname(release string) string {
	if strings.Contains(release, "poise") {
		return release
	}
	return release + "-poise"
}

// checkInstalled: the release's manifest names exactly what `helm template`
// renders for the same values, and each object is on the server with every
// field the chart set, at the value it set (nothing dropped or rewritten).
func checkInstalled(t *testing.T, srv *apiServer, c renderCase) {
	t.Helper()
	manifest, err := runHelm(t, "get", "manifest", c.release, "--namespace", c.namespace, "--kubeconfig", srv.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	installed := parse(t, manifest)
	// hooks (the helm test pod) are not part of the release's manifest
	rendered := slices.DeleteFunc(parse(t, c.render(t)), func(o obj) bool { return str(o, "metadata", "annotations", "helm.sh/hook") != "" })
	ids := func(objs []obj) []string {
		var out []string
		for _, o := range objs {
			out = append(out, fmt.Sprintf("%s %s/%s", o.kind(), str(o, "metadata", "namespace"), o.name()))
		}
		sort.Strings(out)
		return out
	}
	if got, want := ids(installed), ids(rendered); !slices.Equal(got, want) {
		t.Fatalf("helm installed %v\nbut helm template renders %v", got, want)
	}
	kinds := map[string]int{}
	for _, u := range toUnstructured(t, installed) {
		kinds[u.GetKind()]++
		served := &unstructured.Unstructured{}
		served.SetGroupVersionKind(u.GroupVersionKind())
		if err := srv.c.Get(context.Background(), client.ObjectKeyFromObject(u), served); err != nil {
			t.Errorf("%s is not on the server: %v", describe(u), err)
			continue
		}
		var want, got any
		roundTrip(t, u.Object, &want)
		roundTrip(t, served.Object, &got)
		for _, d := range subset("", want, got) {
			t.Errorf("%s on the server differs from the chart's rendering: %s", describe(u), d)
		}
	}
	for _, k := range []string{"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PodDisruptionBudget"} {
		if kinds[k] == 0 {
			t.Errorf("no %s installed", k)
		}
	}
	t.Logf("release %s: %d objects on the server as rendered (%v)", c.release, len(installed), kinds)
}

// roundTrip normalizes v through JSON (numbers become float64).
func roundTrip(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// subset lists where got lacks something of want: every key of a map, every
// element of a list (same length, same order) and every scalar must match.
// Fields the server adds (defaults, status, metadata) are not differences.
func subset(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
		}
		var out []string
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, present := g[k]
			if !present {
				if w[k] == nil {
					continue // `key:` with no value renders null
				}
				out = append(out, fmt.Sprintf("%s.%s: missing (want %v)", path, k, w[k]))
				continue
			}
			out = append(out, subset(path+"."+k, w[k], gv)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, w, got)}
		}
		var out []string
		for i := range w {
			out = append(out, subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if want != got {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
		}
		return nil
	}
}

// checkServedCRDs: the server serves exactly the CRDs of config/crd, which
// the controllers and the envtest suites (test/kube) use, established, with
// the same group, names, scope and versions (schemas, subresources, printer
// columns) field for field, the same schema version, and kept by Helm.
func checkServedCRDs(t *testing.T, srv *apiServer) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdDir, err)
	}
	want := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want[crd.Name] = crd
	}
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := srv.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	served := map[string]apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range list.Items {
		served[crd.Name] = crd
	}
	for name, w := range want {
		s, ok := served[name]
		if !ok {
			t.Errorf("CRD %s (config/crd) is not served", name)
			continue
		}
		for _, cond := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.Established, apiextensionsv1.NamesAccepted} {
			if !crdCondition(&s, cond) {
				t.Errorf("CRD %s is not %s: %+v", name, cond, s.Status.Conditions)
			}
		}
		type comparable struct {
			Group    string                                            `json:"group"`
			Names    apiextensionsv1.CustomResourceDefinitionNames     `json:"names"`
			Scope    apiextensionsv1.ResourceScope                     `json:"scope"`
			Versions []apiextensionsv1.CustomResourceDefinitionVersion `json:"versions"`
		}
		js := func(spec apiextensionsv1.CustomResourceDefinitionSpec) string {
			b, err := json.MarshalIndent(comparable{spec.Group, spec.Names, spec.Scope, spec.Versions}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		if g, w := js(s.Spec), js(w.Spec); g != w {
			t.Errorf("CRD %s as served differs from config/crd:\n%s", name, golden.Diff(w, g))
		}
		for _, a := range []string{"controller-gen.kubebuilder.io/version", crdschema.Annotation} {
			if g, w := s.Annotations[a], w.Annotations[a]; g != w || w == "" {
				t.Errorf("CRD %s: served %s %q, config/crd has %q", name, a, g, w)
			}
		}
		// the CRD chart's: uninstalling it leaves the CRDs, and every object of their kinds
		if g := s.Annotations["helm.sh/resource-policy"]; g != "keep" {
			t.Errorf("CRD %s: helm.sh/resource-policy %q, want keep", name, g)
		}
		var stored []string
		for _, v := range w.Spec.Versions {
			if v.Storage {
				stored = append(stored, v.Name)
			}
		}
		if !slices.Equal(s.Status.StoredVersions, stored) {
			t.Errorf("CRD %s: stored versions %v, want %v", name, s.Status.StoredVersions, stored)
		}
	}
	for name, s := range served {
		if _, ok := want[name]; !ok && s.Spec.Group == "poise.dev" {
			t.Errorf("CRD %s is served but not in config/crd", name)
		}
	}
	t.Logf("%d CRDs served, established, identical to config/crd", len(want))
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, typ apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == typ {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// checkShopManifests sends every object of the walkthrough to the server as
// a server-side apply with dryRun=All: the apiserver runs its own validation,
// admission, CRD schema and CEL rules on each, and unknown fields are errors.
// The namespaces the objects live in are created for real first (a dry run
// of a Namespace creates nothing, and the objects in it would be refused).
func checkShopManifests(t *testing.T, srv *apiServer) {
	t.Helper()
	objs := kubemanifests.Read(t, shopDir)
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	for _, k := range []string{"Namespace", "Deployment", "Service", "ConfigMap", "Upstream", "Locality", "EndpointSet", "SpatialDomain", "Partition"} {
		if kinds[k] == 0 {
			t.Errorf("%s has no %s", shopDir, k)
		}
	}
	ctx := context.Background()
	for _, u := range objs {
		if u.GetKind() != "Namespace" {
			continue
		}
		if err := dryRunApply(srv, u); err != nil {
			t.Fatalf("%s: %v", describe(u), err)
		}
		if err := srv.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner(fieldOwner)); err != nil {
			t.Fatalf("create %s: %v", describe(u), err)
		}
	}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		if err := dryRunApply(srv, u); err != nil {
			t.Errorf("%s: refused by the server: %v", describe(u), err)
		}
	}
	t.Logf("%d objects of %s accepted by the server (server-side apply, dry run): %v", len(objs), shopDir, kinds)
}

// checkDryRunRejects: the dry runs above are real validation. The same
// objects with one bad field each are refused.
func checkDryRunRejects(t *testing.T, srv *apiServer) {
	t.Helper()
	objs := kubemanifests.Read(t, shopDir)
	find := func(kind string) *unstructured.Unstructured {
		for _, u := range objs {
			if u.GetKind() == kind {
				return u.DeepCopy()
			}
		}
		t.Fatalf("no %s in %s", kind, shopDir)
		return nil
	}
	loc := find("Locality")
	if err := unstructured.SetNestedField(loc.Object, int64(0), "spec", "weight"); err != nil {
		t.Fatal(err)
	}
	eps := find("EndpointSet")
	if err := unstructured.SetNestedSlice(eps.Object, []any{map[string]any{"address": "Not_A_Host", "port": int64(80)}}, "spec", "endpoints"); err != nil {
		t.Fatal(err)
	}
	dep := find("Deployment")
	if err := unstructured.SetNestedField(dep.Object, "x", "spec", "replicaz"); err != nil {
		t.Fatal(err)
	}
	svc := find("Service")
	if err := unstructured.SetNestedField(svc.Object, "10.0.0.1", "spec", "clusterIP"); err != nil {
		t.Fatal(err)
	}
	dom := find("SpatialDomain")
	if err := unstructured.SetNestedField(dom.Object, int64(7), "spec", "gridDegrees"); err != nil {
		t.Fatal(err)
	}
	part := find("Partition")
	if err := unstructured.SetNestedField(part.Object, map[string]any{"west": int64(0), "south": int64(50), "east": int64(5), "north": int64(40)}, "spec", "extent"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []*unstructured.Unstructured{loc, eps, dep, svc, dom, part} {
		err := dryRunApply(srv, u)
		if err == nil {
			t.Errorf("%s with a bad field was accepted", describe(u))
			continue
		}
		t.Logf("%s refused as expected: %v", describe(u), err)
	}
}

func dryRunApply(srv *apiServer, u *unstructured.Unstructured) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
		client.DryRunAll, client.ForceOwnership, client.FieldOwner(fieldOwner))
}

func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return fmt.Sprintf("%s %s", u.GetKind(), u.GetName())
	}
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

func toUnstructured(t *testing.T, objs []obj) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		var m map[string]any
		roundTrip(t, map[string]any(o), &m)
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// TestSubset: the comparison of installed objects with the rendering sees
// a dropped field, a changed value and a shortened list, and ignores what
// the server adds.
func TestSubset(t *testing.T) {
	want := map[string]any{"spec": map[string]any{"replicas": 2.0, "args": []any{"a", "b"}, "empty": nil}}
	for _, tc := range []struct {
		name string
		got  any
		diff bool
	}{
		{"server adds fields", map[string]any{"spec": map[string]any{"replicas": 2.0, "args": []any{"a", "b"}, "paused": false}, "status": map[string]any{}}, false},
		{"dropped field", map[string]any{"spec": map[string]any{"args": []any{"a", "b"}}}, true},
		{"changed value", map[string]any{"spec": map[string]any{"replicas": 3.0, "args": []any{"a", "b"}}}, true},
		{"shorter list", map[string]any{"spec": map[string]any{"replicas": 2.0, "args": []any{"a"}}}, true},
	} {
		if d := subset("", want, tc.got); (len(d) > 0) != tc.diff {
			t.Errorf("%s: differences %v, want any: %v", tc.name, d, tc.diff)
		}
	}
}

// checkStatusPriorityLevel: with the release's ServiceAccount's identity, a
// status write of a poise.dev object is allowed by the chart's RBAC and
// classified by the apiserver into the chart's FlowSchema and priority
// level (the X-Kubernetes-PF-* response headers name them); a read by the
// same identity is not.
func checkStatusPriorityLevel(t *testing.T, srv *apiServer, c renderCase) {
	t.Helper()
	ctx := context.Background()
	name := fullname(c.release)
	uid := func(kind, objName string) string {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("flowcontrol.apiserver.k8s.io/v1")
		u.SetKind(kind)
		if err := srv.c.Get(ctx, client.ObjectKey{Name: objName}, u); err != nil {
			t.Fatalf("%s %s: %v", kind, objName, err)
		}
		return string(u.GetUID())
	}
	level := c.namespace + "-" + name + "-status"
	fsUID, plUID := uid("FlowSchema", level), uid("PriorityLevelConfiguration", level)

	up := &unstructured.Unstructured{}
	up.SetAPIVersion("poise.dev/v1alpha1")
	up.SetKind("Upstream")
	up.SetNamespace(c.namespace)
	up.SetName("apf-check")
	if err := srv.c.Create(ctx, up); err != nil {
		t.Fatal(err)
	}
	sa := releaseServiceAccount(t, srv, c)
	hc, err := rest.HTTPClientFor(sa.Config())
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSuffix(sa.Config().Host, "/") + "/apis/poise.dev/v1alpha1/namespaces/" + c.namespace + "/upstreams/apf-check"
	send := func(method, url string, body string) (fs, pl string) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s as the ServiceAccount: %s: %s", method, url, resp.Status, b)
		}
		return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	fs, pl := send(http.MethodPatch, path+"/status", `{"status":{"observedGeneration":1}}`)
	if fs != fsUID || pl != plUID {
		t.Errorf("a status write by the release's ServiceAccount went to FlowSchema %q, priority level %q; want the chart's %s-status (%s, %s)", fs, pl, name, fsUID, plUID)
	}
	if fs, pl := send(http.MethodGet, path, ""); fs == fsUID || pl == plUID {
		t.Errorf("a read by the release's ServiceAccount went to the chart's status priority level (FlowSchema %q, level %q); only status writes belong there", fs, pl)
	}
	t.Logf("status write by %s → FlowSchema and priority level %s", "system:serviceaccount:"+c.namespace+":"+name, level)
}

// releaseServiceAccount is a client of the apiserver with the identity of
// the release's ServiceAccount (its user name and groups), as its pods have.
func releaseServiceAccount(t *testing.T, srv *apiServer, c renderCase) *envtest.AuthenticatedUser {
	t.Helper()
	sa, err := srv.env.ControlPlane.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + c.namespace + ":" + fullname(c.release),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + c.namespace, "system:authenticated"},
	}, srv.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// checkKustomize: `kubectl apply -k config/default`, the install without
// Helm, builds (kustomize's own API, as kubectl embeds it) to the CRDs of
// config/crd, the generated least-privilege ClusterRole bound to the pods'
// ServiceAccount, and a Deployment in poise-system serving xDS with the
// chart's default authentication and TLS flags; the apiserver accepts
// every object (server-side apply, dry run: the chart's release already
// owns poise-system's objects of the same names).
func checkKustomize(t *testing.T, srv *apiServer) {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), kustomizeDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", kustomizeDir, err)
	}
	rendered, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, string(rendered))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind()]++
		if ns := str(o, "metadata", "namespace"); o.kind() != "Namespace" && o.kind() != "CustomResourceDefinition" &&
			!strings.HasPrefix(o.kind(), "Cluster") && ns != "poise-system" {
			t.Errorf("%s %s: namespace %q, want poise-system", o.kind(), o.name(), ns)
		}
	}
	gen, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if kinds["CustomResourceDefinition"] != len(gen) || kinds["Deployment"] != 1 || kinds["ClusterRole"] != 1 ||
		kinds["ClusterRoleBinding"] != 1 || kinds["ServiceAccount"] != 1 || kinds["Service"] != 2 || kinds["Namespace"] != 1 {
		t.Errorf("config/default builds %v: want %d CRDs, a Namespace, a ServiceAccount, a ClusterRole and its binding, a Deployment and two Services", kinds, len(gen))
	}
	raw, err := os.ReadFile(roleFile)
	if err != nil {
		t.Fatal(err)
	}
	var generated obj
	if err := yaml.Unmarshal(raw, &generated); err != nil {
		t.Fatal(err)
	}
	if got, want := set(grants(t, one(t, objs, "ClusterRole"))), set(grants(t, generated)); !slices.Equal(got, want) {
		t.Errorf("the kustomize ClusterRole grants %v, the generated role %v", got, want)
	}
	crb, sa := one(t, objs, "ClusterRoleBinding"), one(t, objs, "ServiceAccount")
	d := one(t, objs, "Deployment")
	if str(crb, "subjects", 0, "name") != sa.name() || str(crb, "subjects", 0, "namespace") != "poise-system" ||
		str(d, "spec", "template", "spec", "serviceAccountName") != sa.name() {
		t.Errorf("the binding's subject %v, the pods' ServiceAccount %q and the ServiceAccount %q do not agree",
			get(crb, "subjects"), str(d, "spec", "template", "spec", "serviceAccountName"), sa.name())
	}
	// The same authentication and TLS as the chart's defaults: token over
	// TLS, from a Secret of the name the chart's release poise would make.
	chart := one(t, parse(t, cases[0].render(t)), "Deployment")
	security := func(dep obj) (flags []string, secret, mount string) {
		for _, a := range strs(dep, "spec", "template", "spec", "containers", 0, "args") {
			if strings.HasPrefix(a, "--xds-auth") || strings.HasPrefix(a, "--xds-token-audience") || strings.HasPrefix(a, "--tls-") ||
				strings.HasPrefix(a, "--xds-allow-anonymous") {
				flags = append(flags, a)
			}
		}
		return flags, str(dep, "spec", "template", "spec", "volumes", 0, "secret", "secretName"),
			str(dep, "spec", "template", "spec", "containers", 0, "volumeMounts", 0, "mountPath")
	}
	kf, ks, km := security(d)
	cf, cs, cm := security(chart)
	if !slices.Equal(kf, cf) || ks != cs || km != cm {
		t.Errorf("config/default serves xDS with %v from Secret %q at %q; the chart's defaults with %v from Secret %q at %q", kf, ks, km, cf, cs, cm)
	}
	for _, u := range toUnstructured(t, objs) {
		if err := dryRunApply(srv, u); err != nil {
			t.Errorf("%s: %v", describe(u), err)
		}
	}
	t.Logf("kubectl apply -k %s: %d objects (%v) accepted (server-side apply, dry run); xDS %v from Secret %s", kustomizeDir, len(objs), kinds, kf, ks)
}

// checkCRDAccess: the release's ServiceAccount may read Poise's CRDs, each
// by name (a get, and a list and watch with the field selector
// metadata.name, as the replicas' schema check reads them), and no other
// CRD, nor the list of every CRD.
func checkCRDAccess(t *testing.T, srv *apiServer, c renderCase) {
	t.Helper()
	sa := releaseServiceAccount(t, srv, c)
	hc, err := rest.HTTPClientFor(sa.Config())
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(sa.Config().Host, "/") + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	code := func(url string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, tc := range []struct {
		what, url string
		want      int
	}{
		{"get upstreams.poise.dev", base + "/upstreams.poise.dev", http.StatusOK},
		{"list upstreams.poise.dev by name", base + "?fieldSelector=metadata.name%3Dupstreams.poise.dev", http.StatusOK},
		{"watch partitions.poise.dev by name", base + "?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dpartitions.poise.dev", http.StatusOK},
		{"list every CRD", base, http.StatusForbidden},
		{"get another CRD", base + "/flowschemas.example.com", http.StatusForbidden},
	} {
		if got := code(tc.url); got != tc.want {
			t.Errorf("%s as the release's ServiceAccount: %d, want %d", tc.what, got, tc.want)
		}
	}
}
