package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/crdschema"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// crdClient reads and writes CRDs, which the suite's client (the poise.dev
// scheme) does not know.
func crdClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(restConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// generatedCRD is a CRD of config/crd, as `make generate` wrote it.
func generatedCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// withoutSpecField is crd as an older generation would have made it: the
// field of spec removed, and the schema version of what is left.
func withoutSpecField(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, field string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	old := crd.DeepCopy()
	root := old.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	if _, ok := spec.Properties[field]; !ok {
		t.Fatalf("CRD %s has no spec.%s", crd.Name, field)
	}
	delete(spec.Properties, field)
	root.Properties["spec"] = spec
	v, err := crdschema.Version(old.Spec)
	if err != nil {
		t.Fatal(err)
	}
	old.Annotations[crdschema.Annotation] = v
	return old
}

// installCRD replaces the cluster's CRD of that name with crd (spec and
// annotations), as `kubectl apply` or `helm upgrade` would, and waits until
// the apiserver serves objects with its schema: exportTo kept or pruned.
func installCRD(t *testing.T, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, ns string, keepsExportTo bool) {
	t.Helper()
	ctx := context.Background()
	cur := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec, cur.Annotations = crd.Spec, crd.Annotations
	if err := c.Update(ctx, cur); err != nil {
		t.Fatalf("update CRD %s: %v", crd.Name, err)
	}
	testkit.Eventually(t, 15*time.Second, fmt.Sprintf("the apiserver serves Upstreams with the new schema (exportTo kept: %v)", keepsExportTo), func() (bool, string) {
		probe := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{ExportTo: []string{"."}}}
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return (len(probe.Spec.ExportTo) > 0) == keepsExportTo, fmt.Sprintf("a dry run keeps exportTo %v", probe.Spec.ExportTo)
	})
}

// TestCRDSchemaOlderThanTheBinary: with an Upstream CRD one generation
// older than the binary (spec.exportTo missing), the apiserver prunes
// exportTo from an Upstream that sets it, and a plane that starts says so
// before it serves: a /readyz warning (ready all the same), the gauges
// poise_crd_schema_outdated and poise_crd_pruned_fields, a Warning Event
// on its Lease, a WARN log line naming the CRD, both versions and the
// field, and a row of `controlplane status`. Once the current CRD is
// applied, every one of them clears (a Recovered Event), and an Upstream
// that sets exportTo keeps it, in the apiserver and in what the plane
// serves.
// It runs alone (not in parallel): it changes the cluster's Upstream CRD,
// which every plane watches.
func TestCRDSchemaOlderThanTheBinary(t *testing.T) {
	ns := namespace(t)
	built := time.Now()
	bin := cpbinary.Build(t)
	t.Logf("controlplane built in %v", time.Since(built).Round(time.Millisecond))
	crds := crdClient(t)
	current := generatedCRD(t, "poise.dev_upstreams.yaml")
	old := withoutSpecField(t, current, "exportTo")
	binary, installed := current.Annotations[crdschema.Annotation], old.Annotations[crdschema.Annotation]
	t.Cleanup(func() { installCRD(t, crds, current, ns, true) }) // whatever happens, the next tests get the current CRD
	start := time.Now()
	installCRD(t, crds, old, ns, false)
	t.Logf("older CRD served in %v: installed %s, binary %s", time.Since(start).Round(time.Millisecond), installed, binary)

	ctx := t.Context()
	up := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{ExportTo: []string{"."}}}
	if err := k8s.Create(ctx, up); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Upstream
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(up), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ExportTo != nil {
		t.Fatalf("the older CRD kept spec.exportTo %v: nothing is pruned, the test proves nothing", got.Spec.ExportTo)
	}

	start = time.Now()
	p := startPlane(t, ns, "crd")
	t.Logf("plane ready in %v", time.Since(start).Round(time.Millisecond))
	warning := fmt.Sprintf("warning: CRD upstreams.poise.dev is older than this binary's (installed %s, binary %s): the apiserver prunes spec.exportTo from every object written", installed, binary)
	// at its first readiness already: the check comes before the first publication
	if body := readyz(t, p); !strings.Contains(body, warning) || !strings.HasPrefix(body, "ok\n") {
		t.Errorf("/readyz at start:\n%s\nwant ok and the line %q", body, warning)
	}
	if n := strings.Count(readyz(t, p), "CRD "); n != 1 {
		t.Errorf("/readyz warns of %d CRDs, want only the Upstream's:\n%s", n, readyz(t, p))
	}
	wantGauges := func(outdated, pruned float64) func() (bool, string) {
		return func() (bool, string) {
			g := crdGauges(t, p)
			for _, name := range []string{"endpointsets", "localities", "partitions", "spatialdomains", "upstreams"} {
				o, p := 0.0, 0.0
				if name == "upstreams" {
					o, p = outdated, pruned
				}
				crd := name + ".poise.dev"
				if g["outdated "+crd] != o || g["pruned "+crd] != p {
					return false, fmt.Sprintf("%s: outdated %v, pruned fields %v (want %v, %v); all: %v", crd, g["outdated "+crd], g["pruned "+crd], o, p, g)
				}
			}
			return len(g) == 10, fmt.Sprintf("%d series, want 10: %v", len(g), g)
		}
	}
	testkit.Eventually(t, 5*time.Second, "the CRD gauges", wantGauges(1, 1))
	logLine := fmt.Sprintf(`crd=upstreams.poise.dev installedVersion=%s binaryVersion=%s prunedFields=spec.exportTo`, installed, binary)
	if !p.logs.contains("level=WARN msg=\"CRD schema older than this binary's") || !p.logs.contains(logLine) {
		t.Errorf("no WARN line with %q in the plane's logs:\n%s", logLine, p.logs.tail(30))
	}
	outdatedEvent := crdEvent(t, ns, "Warning", "CRDSchemaOutdated")
	if !strings.Contains(outdatedEvent.Note, "spec.exportTo") || !strings.Contains(outdatedEvent.Note, installed) || !strings.Contains(outdatedEvent.Note, binary) {
		t.Errorf("Event note %q does not name the field and both versions", outdatedEvent.Note)
	}
	status := runBinary(t, bin, "status", "--admin-address", p.addrs.Admin)
	row := crdRow(status)
	if !slices.Equal(row[:5], []string{"upstreams.poise.dev", p.addrs.Admin, "Outdated", installed, binary}) ||
		!strings.Contains(status, "the apiserver prunes spec.exportTo: upgrade the CRDs") {
		t.Errorf("controlplane status:\n%s\nwant a row: upstreams.poise.dev %s Outdated %s %s … the apiserver prunes spec.exportTo", status, p.addrs.Admin, installed, binary)
	}
	// -o json lists the CRD under "crds" and says it on stderr too
	cmd := exec.Command(bin, "status", "--admin-address", p.addrs.Admin, "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("controlplane status -o json: %v\n%s", err, stderr.String())
	}
	var report struct {
		CRDs []struct {
			CRD crdschema.Status `json:"crd"`
		} `json:"crds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil || len(report.CRDs) != 1 ||
		report.CRDs[0].CRD.Name != "upstreams.poise.dev" || report.CRDs[0].CRD.State != crdschema.Outdated {
		t.Errorf("controlplane status -o json: want crds [upstreams.poise.dev Outdated], got %+v (%v)\n%s", report.CRDs, err, stdout.String())
	}
	if want := fmt.Sprintf("warning: replica %s: CRD upstreams.poise.dev is older than this binary's (installed %s, binary %s)", p.addrs.Admin, installed, binary); !strings.Contains(stderr.String(), want) {
		t.Errorf("controlplane status -o json: stderr\n%s\nwant %q", stderr.String(), want)
	}
	// what the plane serves holds no rule: the field never reached it, and
	// the warning says so
	if rep, err := p.explainOf(ns, "private"); err != nil || rep.Upstreams[0].Visibility != nil {
		t.Errorf("explain %s/private with exportTo pruned: visibility %+v, %v", ns, rep.Upstreams[0].Visibility, err)
	}

	// The CRDs are upgraded: everything clears.
	start = time.Now()
	installCRD(t, crds, current, ns, true)
	testkit.Eventually(t, 5*time.Second, "/readyz without the warning", func() (bool, string) {
		body := readyz(t, p)
		return body == "ok\n", body
	})
	t.Logf("warning cleared %v after the current CRD was applied", time.Since(start).Round(time.Millisecond))
	testkit.Eventually(t, 5*time.Second, "the CRD gauges at 0", wantGauges(0, 0))
	recovered := crdEvent(t, ns, "Normal", "Recovered")
	if !strings.Contains(recovered.Note, "upstreams.poise.dev") || !strings.Contains(recovered.Note, "Current") {
		t.Errorf("Recovered Event note %q", recovered.Note)
	}
	if !p.logs.contains(`level=INFO msg="CRD schema matches this binary's"`) || !p.logs.contains(fmt.Sprintf(`crd=upstreams.poise.dev installedVersion=%s binaryVersion=%s`, binary, binary)) {
		t.Errorf("no INFO line of the CRD matching again:\n%s", p.logs.tail(30))
	}
	if status := runBinary(t, bin, "status", "--admin-address", p.addrs.Admin); strings.Contains(status, "poise.dev") {
		t.Errorf("controlplane status still reports a CRD:\n%s", status)
	}
	// exportTo now reaches etcd and the plane
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(up), &got); err != nil {
		t.Fatal(err)
	}
	got.Spec.ExportTo = []string{"."}
	if err := k8s.Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.Upstream
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(up), &back); err != nil || !slices.Equal(back.Spec.ExportTo, []string{"."}) {
		t.Fatalf("read back after the upgrade: exportTo %v, %v", back.Spec.ExportTo, err)
	}
	// The watch the plane opened before the CRD changed delivered the
	// update pruned; it lists Upstreams again once the apiserver serves
	// the new schema, and serves the rule.
	_, took := p.waitExplain(t, ns, "private", "the plane serves exportTo", func(u explain.Upstream) (bool, string) {
		v := u.Visibility
		return v != nil && slices.Equal(v.Namespaces, []string{ns}), fmt.Sprintf("visibility %+v", v)
	})
	t.Logf("exportTo served %v after the update (%v after the CRD upgrade)", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if !p.logs.contains(`msg="listing a kind again: its CRD changed" plane=crd kind=Upstream`) {
		t.Errorf("the plane did not list Upstreams again after their CRD changed:\n%s", p.logs.tail(30))
	}
}

// crdGauges reads poise_crd_schema_outdated and poise_crd_pruned_fields
// from a plane's /metrics: "outdated CRD" and "pruned CRD" to the value.
func crdGauges(t *testing.T, p *plane) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range metricLines(t, p) {
		var crd string
		var v float64
		if n, _ := fmt.Sscanf(line, `poise_crd_schema_outdated{crd=%q} %g`, &crd, &v); n == 2 {
			out["outdated "+crd] = v
		}
		if n, _ := fmt.Sscanf(line, `poise_crd_pruned_fields{crd=%q} %g`, &crd, &v); n == 2 {
			out["pruned "+crd] = v
		}
	}
	return out
}

// crdEvent waits for an Event of that type and reason on the plane's Lease
// in ns whose related object is the Upstream CRD.
func crdEvent(t *testing.T, ns, eventtype, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	took := testkit.Eventually(t, 15*time.Second, eventtype+" "+reason+" Event", func() (bool, string) {
		var l eventsv1.EventList
		if err := k8s.List(t.Context(), &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range l.Items {
			seen = append(seen, fmt.Sprintf("%s/%s %s %s", e.Regarding.Kind, e.Regarding.Name, e.Type, e.Reason))
			if e.Type == eventtype && e.Reason == reason && e.Regarding.Kind == "Lease" && e.Regarding.Name == "poise-status-writer" &&
				e.Related != nil && e.Related.Kind == "CustomResourceDefinition" && e.Related.Name == "upstreams.poise.dev" {
				found = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("Events: %v", seen)
	})
	t.Logf("%s %s Event after %v: %s", eventtype, reason, took.Round(time.Millisecond), found.Note)
	return found
}

// crdRow is the first row of status's CRD table, split on its columns'
// spacing (empty when there is none).
func crdRow(status string) []string {
	lines := strings.Split(status, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "CRD ") && i+1 < len(lines) {
			return append(strings.Fields(lines[i+1]), "", "", "", "", "")
		}
	}
	return make([]string, 5)
}
