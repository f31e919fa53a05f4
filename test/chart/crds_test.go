package chart_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/pkg/kube/crdschema"
	"poise.dev/poise/test/testkit"
)

// olderCRD is a CRD of config/crd as an older generation made it: the
// Upstream's without spec.exportTo, versioned (the annotation of what is
// left) or, as before CRDs carried one, without a schema version.
func olderCRD(t *testing.T, file string, versioned bool) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatal(err)
	}
	if crd.Name == "upstreams.poise.dev" {
		root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		spec := root.Properties["spec"]
		delete(spec.Properties, "exportTo")
		root.Properties["spec"] = spec
	}
	delete(crd.Annotations, crdschema.Annotation)
	if versioned {
		v, err := crdschema.Version(crd.Spec)
		if err != nil {
			t.Fatal(err)
		}
		crd.Annotations[crdschema.Annotation] = v
	}
	return crd
}

// olderChart copies the chart in src and writes the older CRDs into its
// dir (crds/ of the poise chart as it was, or the CRD chart's templates/,
// with helm.sh/resource-policy: keep), at version 0.0.9.
func olderChart(t *testing.T, src, dir string, versioned, keep bool) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(out, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		crd := olderCRD(t, filepath.Base(f), versioned)
		if keep {
			crd.Annotations["helm.sh/resource-policy"] = "keep"
		}
		b, err := yaml.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta := filepath.Join(out, "Chart.yaml")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, []byte(strings.Replace(string(b), "\nversion: 0.1.0\n", "\nversion: 0.0.9\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// servedUpstreamCRD is the Upstream CRD the apiserver holds.
func servedUpstreamCRD(t *testing.T, srv *apiServer) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := srv.c.Get(t.Context(), client.ObjectKey{Name: "upstreams.poise.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// hasExportTo reports whether a served Upstream CRD's schema has spec.exportTo.
func hasExportTo(crd *apiextensionsv1.CustomResourceDefinition) bool {
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["exportTo"]
	return ok
}

// applyExportTo writes an Upstream in ns that sets spec.exportTo, as
// `kubectl apply` (client-side) does (a create, or a patch of spec), and
// reads it back: the exportTo the apiserver kept. (A server-side apply is
// refused outright for a field the schema lacks; every other write drops
// it silently.)
func applyExportTo(t *testing.T, srv *apiServer, ns, name string) []any {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "poise.dev/v1alpha1", "kind": "Upstream",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"exportTo": []any{"."}},
	}}
	err := srv.c.Create(t.Context(), u)
	if apierrors.IsAlreadyExists(err) {
		err = srv.c.Patch(t.Context(), u, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"exportTo":["."]}}`)))
	}
	if err != nil {
		t.Fatalf("write Upstream %s/%s: %v", ns, name, err)
	}
	return upstreamExportTo(t, srv, ns, name)
}

// upstreamExportTo reads an Upstream's spec.exportTo through the API.
func upstreamExportTo(t *testing.T, srv *apiServer, ns, name string) []any {
	t.Helper()
	back := &unstructured.Unstructured{}
	back.SetAPIVersion("poise.dev/v1alpha1")
	back.SetKind("Upstream")
	if err := srv.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, back); err != nil {
		t.Fatalf("read back Upstream %s/%s: %v", ns, name, err)
	}
	v, _, _ := unstructured.NestedSlice(back.Object, "spec", "exportTo")
	return v
}

// keepsExportTo applies an Upstream that sets exportTo until the
// apiserver keeps it: right after a CRD changes, it takes the apiserver a
// moment to serve objects with the new schema.
func keepsExportTo(t *testing.T, srv *apiServer, ns, name string) {
	t.Helper()
	took := testkit.Eventually(t, 10*time.Second, "Upstream "+name+" keeps spec.exportTo", func() (bool, string) {
		got := applyExportTo(t, srv, ns, name)
		return slices.Equal(got, []any{"."}), fmt.Sprintf("read back exportTo %v", got)
	})
	t.Logf("Upstream %s/%s keeps spec.exportTo (read back through the API), %v after the upgrade", ns, name, took.Round(time.Millisecond))
}

// TestCRDChartUpgrades follows a cluster's CRDs through upgrades with real
// helm and a real apiserver: installed by the poise chart's crds/ (as the
// chart did before the CRD chart; an older schema without spec.exportTo,
// which the apiserver prunes), left in place when the poise chart is
// upgraded to one without CRDs, refused by `helm install poise-crds` (Helm
// owns them not) and taken over with --take-ownership, which applies the
// current schemas; kept when the CRD chart is uninstalled; replaced by an
// older schema as `kubectl replace` would, adopted by the CRD chart once
// labelled and annotated as docs/helm.md says, and upgraded from a CRD
// chart whose Upstream CRD lacks the field to the current one. After each
// upgrade an Upstream applied with spec.exportTo keeps it. What an older
// schema does to objects that have the field, as docs/helm.md says: they
// are read without it, and keep it stored unless written meanwhile (a
// status write included), which drops it for good.
func TestCRDChartUpgrades(t *testing.T) {
	helm(t)
	srv := startAPIServer(t)
	ctx := t.Context()
	const ns, release = "poise-system", "poise-crds"
	helmIn := func(args ...string) (string, error) {
		return runHelm(t, append(args, "--namespace", ns, "--kubeconfig", srv.kubeconfig)...)
	}
	mustHelm := func(args ...string) {
		t.Helper()
		if _, err := helmIn(args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shopNS}}); err != nil {
		t.Fatal(err)
	}

	// The poise chart as it was: its CRDs in crds/, which Helm creates at
	// the first install and never touches again.
	mustHelm("install", "poise", olderChart(t, chartDir, "crds", false, false), "--create-namespace", "--wait=false")
	crd := servedUpstreamCRD(t, srv)
	if hasExportTo(crd) || crd.Labels["app.kubernetes.io/managed-by"] != "" || crd.Annotations[crdschema.Annotation] != "" {
		t.Fatalf("the older chart's crds/ made an Upstream CRD with spec.exportTo %v, labels %v, annotations %v; want none", hasExportTo(crd), crd.Labels, crd.Annotations)
	}
	if got := applyExportTo(t, srv, shopNS, "early"); got != nil {
		t.Fatalf("the older CRD kept spec.exportTo %v: nothing is pruned, the test proves nothing", got)
	}

	// This version of the poise chart has no CRDs: the upgrade leaves them.
	mustHelm("upgrade", "poise", chartDir, "--wait=false")
	if crd := servedUpstreamCRD(t, srv); hasExportTo(crd) {
		t.Fatal("upgrading the poise chart changed the CRDs")
	}

	// The CRD chart refuses CRDs Helm does not own...
	_, err := helmIn("install", release, crdChartDir)
	if err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition") || !strings.Contains(err.Error(), "invalid ownership metadata") {
		t.Fatalf("helm install %s over CRDs another chart's crds/ made: %v; want Helm's refusal for invalid ownership metadata", release, err)
	}
	t.Logf("helm install %s over unowned CRDs refused, as docs/helm.md says: %s", release, firstLine(err.Error(), "Error:"))
	// ...and takes them over when told to, applying the current schemas.
	mustHelm("install", release, crdChartDir, "--take-ownership")
	t.Run("served-after-take-ownership", func(t *testing.T) { checkServedCRDs(t, srv) })
	keepsExportTo(t, srv, shopNS, "adopted")
	keepsExportTo(t, srv, shopNS, "status-written")
	if got := upstreamExportTo(t, srv, shopNS, "early"); got != nil {
		t.Errorf("Upstream early, written while the CRD pruned spec.exportTo, has exportTo %v after the upgrade: pruning should have dropped it for good", got)
	}

	// Uninstalling the CRD chart keeps the CRDs, and every object of their kinds.
	mustHelm("uninstall", release)
	if crd := servedUpstreamCRD(t, srv); !hasExportTo(crd) || crd.DeletionTimestamp != nil {
		t.Fatalf("helm uninstall %s removed or changed the Upstream CRD (deletion %v)", release, crd.DeletionTimestamp)
	}
	if got := upstreamExportTo(t, srv, shopNS, "adopted"); !slices.Equal(got, []any{"."}) {
		t.Fatalf("after helm uninstall %s, Upstream adopted has exportTo %v", release, got)
	}

	// Older CRDs as `kubectl replace` (or apply) leaves them: no Helm metadata.
	for _, f := range crdFiles(t) {
		old := olderCRD(t, f, true)
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := srv.c.Get(ctx, client.ObjectKey{Name: old.Name}, cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec, cur.Labels, cur.Annotations = old.Spec, nil, old.Annotations
		if err := srv.c.Update(ctx, cur); err != nil {
			t.Fatalf("replace CRD %s: %v", old.Name, err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the older schema served", func() (bool, string) {
		got := upstreamExportTo(t, srv, shopNS, "adopted")
		return got == nil, fmt.Sprintf("Upstream adopted read with exportTo %v", got)
	})
	t.Log("with the older schema, Upstream adopted is read without spec.exportTo (pruned on read)")
	// a status write (as a plane's leader makes) stores the object as the
	// older schema reads it
	statusPatch := &unstructured.Unstructured{}
	statusPatch.SetAPIVersion("poise.dev/v1alpha1")
	statusPatch.SetKind("Upstream")
	statusPatch.SetNamespace(shopNS)
	statusPatch.SetName("status-written")
	if err := srv.c.Status().Patch(ctx, statusPatch, client.RawPatch("application/merge-patch+json", []byte(`{"status":{"observedGeneration":1}}`))); err != nil {
		t.Fatal(err)
	}
	// docs/helm.md's adoption without --take-ownership: the label and the
	// two annotations Helm looks for (kubectl label / kubectl annotate)
	for _, f := range crdFiles(t) {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "poise.dev_"), ".yaml") + ".poise.dev"
		patch := fmt.Sprintf(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{"meta.helm.sh/release-name":%q,"meta.helm.sh/release-namespace":%q}}}`, release, ns)
		if err := srv.c.Patch(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}},
			client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Fatalf("label and annotate CRD %s: %v", name, err)
		}
	}
	// A CRD chart whose Upstream CRD lacks spec.exportTo adopts them...
	older := olderChart(t, crdChartDir, "templates", true, true)
	mustHelm("install", release, older)
	if crd := servedUpstreamCRD(t, srv); hasExportTo(crd) || crd.Annotations[crdschema.Annotation] != olderCRD(t, "poise.dev_upstreams.yaml", true).Annotations[crdschema.Annotation] {
		t.Fatalf("after installing the older CRD chart: spec.exportTo %v, schema version %s", hasExportTo(crd), crd.Annotations[crdschema.Annotation])
	}
	if got := applyExportTo(t, srv, shopNS, "pruned"); got != nil {
		t.Fatalf("the older CRD chart's schema kept spec.exportTo %v", got)
	}
	// ...and `helm upgrade` to the current one applies the new schemas.
	mustHelm("upgrade", release, crdChartDir)
	t.Run("served-after-upgrade", func(t *testing.T) { checkServedCRDs(t, srv) })
	keepsExportTo(t, srv, shopNS, "upgraded")
	// an object no one wrote while the older schema pruned on read has its
	// field back: pruning on read drops nothing stored
	if got := upstreamExportTo(t, srv, shopNS, "adopted"); !slices.Equal(got, []any{"."}) {
		t.Errorf("Upstream adopted, not written while the older schema was served, has exportTo %v after the upgrade", got)
	}
	// but one whose status was written then lost it for good
	if got := upstreamExportTo(t, srv, shopNS, "status-written"); got != nil {
		t.Errorf("Upstream status-written, whose status was written while the older schema was served, has exportTo %v after the upgrade", got)
	}
}

// crdFiles are the file names of config/crd's CRDs.
func crdFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdDir, err)
	}
	for i := range files {
		files[i] = filepath.Base(files[i])
	}
	return files
}

// firstLine is the line of s that starts with prefix, or s's first line.
func firstLine(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return lines[0]
}
