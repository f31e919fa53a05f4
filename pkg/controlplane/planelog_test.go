package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/testkit"
)

// startPlane runs the control plane with cfg on loopback ports (the admin
// port where cfg names one), logging into the Logs it returns, until the
// test ends.
func startPlane(t *testing.T, cfg controlplane.Config) (controlplane.Addrs, *testkit.Logs) {
	t.Helper()
	sink := &testkit.Logs{}
	cfg.Log = slog.New(slog.NewJSONHandler(sink, nil))
	cfg.XDSAddress = "127.0.0.1:0"
	if cfg.AdminAddress == "" {
		cfg.AdminAddress = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	var done <-chan error
	t.Cleanup(func() {
		cancel()
		if done == nil {
			return // it did not start
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	var a controlplane.Addrs
	a, done = runPlane(t, ctx, cfg)
	return a, sink
}

// runPlane runs the control plane with cfg until ctx ends: it returns the
// addresses it serves on once it has started, and the channel of Run's
// result. A plane that does not start within 30 s fails the test.
func runPlane(t *testing.T, ctx context.Context, cfg controlplane.Config) (controlplane.Addrs, <-chan error) {
	t.Helper()
	started := make(chan controlplane.Addrs, 1)
	cfg.Started = func(a controlplane.Addrs) { started <- a }
	done := make(chan error, 1)
	go func() { done <- controlplane.Run(ctx, cfg) }()
	select {
	case a := <-started:
		return a, done
	case err := <-done:
		t.Fatalf("control plane: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not start")
	}
	return controlplane.Addrs{}, nil
}

// explained is an upstream's report from /debug/explain.
func explained(t *testing.T, admin, upstream string) explain.Upstream {
	t.Helper()
	var rep explain.Report
	testkit.MustGetJSON(t, "http://"+admin+"/debug/explain?upstream="+upstream, &rep)
	if len(rep.Upstreams) != 1 {
		t.Fatalf("explain %s: %d upstreams", upstream, len(rep.Upstreams))
	}
	return rep.Upstreams[0]
}

// localityTraffic is each locality's traffic in an explain report, by the
// name the log gives it.
func localityTraffic(u explain.Upstream) map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			name := l.Region
			if l.Zone != "" || l.SubZone != "" {
				name += "/" + l.Zone
			}
			if l.SubZone != "" {
				name += "/" + l.SubZone
			}
			if p.Priority != 0 {
				name += fmt.Sprintf(" (priority %d)", p.Priority)
			}
			out[name] = l.Traffic
		}
	}
	return out
}

const planeManifests = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: checkout, namespace: shop}
spec: {protocol: GRPC}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: checkout-1a, namespace: shop}
spec: {upstream: checkout, region: eu-west, zone: eu-west-1a, weight: 3}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: checkout-1b, namespace: shop}
spec: {upstream: checkout, region: eu-west, zone: eu-west-1b, weight: 2}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: checkout-1c, namespace: shop}
spec: {upstream: checkout, region: eu-west, zone: eu-west-1c, weight: 1}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: checkout-1a, namespace: shop}
spec:
  upstream: checkout
  locality: {region: eu-west, zone: eu-west-1a}
  endpoints: [{address: 10.1.1.10, port: 9090}, {address: 10.1.1.11, port: 9090}]
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: checkout-1b, namespace: shop}
spec:
  upstream: checkout
  locality: {region: eu-west, zone: eu-west-1b}
  endpoints: [{address: 10.1.2.10, port: 9090}, {address: 10.1.2.11, port: 9090}]
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: checkout-1c, namespace: shop}
spec:
  upstream: checkout
  locality: {region: eu-west, zone: eu-west-1c}
  endpoints: [{address: 10.1.3.10, port: 9090}]
`

const cartManifests = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: cart, namespace: shop}
spec: {protocol: GRPC}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: cart-z1, namespace: shop}
spec: {upstream: cart, region: r1, zone: z1, weight: 1}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: cart-z1, namespace: shop}
spec: {upstream: cart, locality: {region: r1, zone: z1}, endpoints: [{address: 10.2.1.10, port: 8080}]}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: cart-z2, namespace: shop}
spec: {upstream: cart, locality: {region: r1, zone: z2}, endpoints: [{address: 10.2.2.10, port: 8080}]}
---
apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: still, namespace: shop}
spec: {protocol: GRPC}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: still, namespace: shop}
spec: {upstream: still, locality: {region: r1}, endpoints: [{address: 10.3.1.10, port: 8080}]}
`

// TestPlaneLogInFilesMode: the start is one line saying what was loaded
// and what was not read; an edit that moves shares in two upstreams writes
// exactly one line for each, with explain's figures before and after, and
// none for the upstream it left alone; objects of other kinds are logged
// once for what they are, not on every save.
func TestPlaneLogInFilesMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("checkout.yaml", planeManifests)
	write("cart.yaml", cartManifests)
	write("README.md", "not a manifest\n")
	if err := os.Mkdir(filepath.Join(dir, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, log := startPlane(t, controlplane.Config{Paths: []string{dir}, Debounce: 20 * time.Millisecond})

	loaded := log.Records(t, "manifests loaded")
	if len(loaded) != 1 {
		t.Fatalf("start-up lines: %v", loaded)
	}
	for k, v := range map[string]any{"files": 2.0, "upstreams": 3.0, "localities": 4.0, "endpointSets": 6.0, "endpoints": 8.0,
		"spatialDomains": 0.0, "partitions": 0.0, "orphans": 0.0, "skipped": "1 object of other kinds (Namespace 1) in 1 file",
		"notRead": filepath.Join(dir, "README.md") + " (not .yaml, .yml or .json), " + filepath.Join(dir, "old") + " (a directory: subdirectories are not read)"} {
		if loaded[0][k] != v {
			t.Errorf("start-up %s = %v, want %v", k, loaded[0][k], v)
		}
	}

	upstreams := []string{"shop/checkout", "shop/cart", "shop/still"}
	before := map[string]explain.Upstream{}
	for _, u := range upstreams {
		before[u] = explained(t, a.Admin, u)
	}
	write("checkout.yaml", strings.Replace(planeManifests, "zone: eu-west-1a, weight: 3", "zone: eu-west-1a, weight: 1", 1))
	write("cart.yaml", strings.Replace(cartManifests, "zone: z1, weight: 1", "zone: z1, weight: 3", 1))
	moved := func() []map[string]any { return log.Records(t, "upstream shares moved") }
	testkit.Eventually(t, 10*time.Second, "two summaries", func() (bool, string) {
		return len(moved()) >= 2, fmt.Sprint(moved())
	})
	// sleep: the plane log looks at the publications at most once a second
	// and nothing says a look found nothing new; a third line would show
	// within the next look
	time.Sleep(1500 * time.Millisecond)
	lines := moved()
	if len(lines) != 2 {
		t.Fatalf("summaries: %v", lines)
	}
	for _, l := range lines {
		u := l["upstream"].(string)
		was, now := localityTraffic(before[u]), localityTraffic(explained(t, a.Admin, u))
		changed := 0
		for name, n := range now {
			if was[name] != n {
				changed++
			}
		}
		named := strings.Split(l["moved"].(string), ", ")
		if len(named)+int(l["moreLocalities"].(float64)) != changed || changed == 0 {
			t.Errorf("%s: %d localities moved per explain; the line: %v", u, changed, l)
		}
		for _, m := range named {
			name, figures, _ := strings.Cut(m, " ")
			if want := explain.Percent(was[name]) + " → " + explain.Percent(now[name]); figures != want {
				t.Errorf("%s: %s moved %s, explain says %s", u, name, figures, want)
			}
		}
		if l["level"] != "INFO" || l["changes"] != 1.0 {
			t.Errorf("line %v", l)
		}
	}
	if lines[0]["upstream"] != "shop/cart" || lines[1]["upstream"] != "shop/checkout" {
		t.Errorf("summaries of %v and %v, want shop/cart and shop/checkout", lines[0]["upstream"], lines[1]["upstream"])
	}

	// Saves that keep the other kinds as they were are not logged; one that
	// changes them is, once.
	skipped := func() int { return len(log.Records(t, "manifest objects of other kinds skipped")) }
	rev := explained(t, a.Admin, "shop/checkout")
	for i := range 3 {
		write("checkout.yaml", strings.Replace(planeManifests, "weight: 2", fmt.Sprintf("weight: %d", 4+i), 1))
		testkit.Eventually(t, 10*time.Second, "the save applied", func() (bool, string) {
			u := explained(t, a.Admin, "shop/checkout")
			return fmt.Sprint(localityTraffic(u)) != fmt.Sprint(localityTraffic(rev)), ""
		})
		rev = explained(t, a.Admin, "shop/checkout")
	}
	if n := skipped(); n != 0 {
		t.Fatalf("%d lines of other kinds skipped after saves that kept them", n)
	}
	withMap := planeManifests + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n"
	for i := range 3 {
		write("checkout.yaml", strings.Replace(withMap, "weight: 2", fmt.Sprintf("weight: %d", 7+i), 1))
		testkit.Eventually(t, 10*time.Second, "the save applied", func() (bool, string) {
			u := explained(t, a.Admin, "shop/checkout")
			return fmt.Sprint(localityTraffic(u)) != fmt.Sprint(localityTraffic(rev)), ""
		})
		rev = explained(t, a.Admin, "shop/checkout")
	}
	if got := log.Records(t, "manifest objects of other kinds skipped"); len(got) != 1 ||
		got[0]["skipped"] != "2 objects of other kinds (ConfigMap 1, Namespace 1)" || got[0]["file"] != filepath.Join(dir, "checkout.yaml") {
		t.Fatalf("other kinds skipped: %v", got)
	}
}
