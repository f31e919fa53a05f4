package files

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/test/testkit"
)

const upstreamYAML = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: web, namespace: shop}
`

// domainYAML is a SpatialDomain with one replica on Upstream shop/web.
const domainYAML = `apiVersion: poise.dev/v1alpha1
kind: SpatialDomain
metadata: {name: cadastre, namespace: shop}
spec:
  replicas: [{name: eu-1, upstream: web, region: r1}]
  products: [{name: parcels, pathPrefix: /parcels, allowedRegions: [r1]}]
`

func setYAML(name, weight string) string {
	return `apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: ` + name + `, namespace: shop}
spec:
  upstream: web
  locality: {region: r1, zone: ` + name + `}
  endpoints:
  - {address: 10.0.0.1, port: 80, weight: ` + weight + `}
`
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the directory's current snapshot satisfies cond.
func waitFor(t *testing.T, d *topology.Directory, what string, cond func(*topology.Snapshot) bool) *topology.Snapshot {
	t.Helper()
	var s *topology.Snapshot
	testkit.Eventually(t, 10*time.Second, "waiting for "+what, func() (bool, string) {
		s = d.Current()
		return cond(s), fmt.Sprintf("revision %d", s.Revision)
	})
	return s
}

func endpointWeight(s *topology.Snapshot) uint64 {
	u := s.Upstream(topology.Key{Namespace: "shop", Name: "web"})
	if u == nil || len(u.Endpoints) == 0 {
		return 0
	}
	return u.Endpoints[0].Weight
}

// watched runs a source on dir, holding an upstream and a set "a" of weight
// 1, until the test ends.
func watched(t *testing.T, dir string) (*Source, *topology.Directory, *metrics.Source) {
	t.Helper()
	write(t, filepath.Join(dir, "upstream.yaml"), upstreamYAML)
	write(t, filepath.Join(dir, "a.yaml"), setYAML("a", "1"))
	m := metrics.New(metrics.Options{}).Source // no series yet: see run
	d := topology.NewDirectory()
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 10 * time.Millisecond, Metrics: m}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	return src, d, m
}

func TestWatchAppliesChangesAndRefusesBadOnes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, d, m := watched(t, dir)

	// an edit is applied as one batch
	write(t, filepath.Join(dir, "a.yaml"), setYAML("a", "5"))
	waitFor(t, d, "weight 5", func(s *topology.Snapshot) bool { return endpointWeight(s) == 5 })

	// an invalid edit is refused and counted; what is served stays. (The
	// snapshot is compared by what it serves: a look again at a file just
	// written, which the watch may take after the test has seen weight 5,
	// is no edit.)
	write(t, filepath.Join(dir, "a.yaml"), setYAML("a", "0"))
	waitRefused(t, m, 0, "invalid edit")
	if w := endpointWeight(d.Current()); w != 5 {
		t.Fatalf("a refused edit changed what is served: weight %d, want 5", w)
	}

	// a new file is seen; a conflicting one is refused
	sub := dir
	before := testutil.ToFloat64(m.Batches.WithLabelValues("files", "rejected"))
	write(t, filepath.Join(dir, "a.yaml"), setYAML("a", "7"))
	write(t, filepath.Join(sub, "b.yaml"), setYAML("b", "2")) // same address as a: DuplicateEndpoint
	waitRefused(t, m, before, "duplicate endpoint")
	if w := endpointWeight(d.Current()); w != 5 {
		t.Fatalf("a refused edit changed what is served: weight %d, want 5", w)
	}

	// removing the offending file applies the rest; removing a file deletes its objects
	if err := os.Remove(filepath.Join(sub, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, d, "weight 7", func(s *topology.Snapshot) bool { return endpointWeight(s) == 7 })
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, d, "set removed", func(s *topology.Snapshot) bool {
		u := s.Upstream(topology.Key{Namespace: "shop", Name: "web"})
		return u != nil && len(u.Endpoints) == 0
	})
}

// waitRefused waits until the source has refused more batches than before.
func waitRefused(t *testing.T, m *metrics.Source, before float64, what string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, what+" refused", func() (bool, string) {
		return testutil.ToFloat64(m.Batches.WithLabelValues("files", "rejected")) != before, "no more batches rejected"
	})
}

// TestWatchRefusesAddresses: an endpoint address EDS cannot carry, a range
// no client should be sent to, and loopback without the Upstream's opt-in
// are never published; the last good snapshot keeps serving.
func TestWatchRefusesAddresses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, d, m := watched(t, dir)
	web := topology.Key{Namespace: "shop", Name: "web"}
	setWith := func(address string) {
		write(t, filepath.Join(dir, "a.yaml"), strings.Replace(setYAML("a", "3"), "10.0.0.1", address, 1))
	}
	refused := func(good *topology.Snapshot, address string) {
		t.Helper()
		before := testutil.ToFloat64(m.Batches.WithLabelValues("files", "rejected"))
		setWith(address)
		waitRefused(t, m, before, address)
		if d.Current() != good {
			t.Fatalf("%s: a refused edit changed the snapshot", address)
		}
	}
	good := d.Current()
	for _, a := range []string{"vm1.example.internal", "169.254.169.254", "127.0.0.1", "::1"} {
		refused(good, a)
	}

	// with the Upstream's opt-in loopback is published; the rest is not
	setWith("10.0.0.1")
	write(t, filepath.Join(dir, "upstream.yaml"), upstreamYAML+"spec: {addressPolicy: {allowLoopback: true}}\n")
	good = waitFor(t, d, "the opt-in", func(s *topology.Snapshot) bool {
		u := s.Upstream(web)
		return u != nil && u.Upstream.AllowLoopback && endpointWeight(s) == 3
	})
	for _, a := range []string{"169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1"} {
		refused(good, a)
	}
	setWith("127.0.0.1")
	waitFor(t, d, "the loopback endpoint, allowed", func(s *topology.Snapshot) bool {
		u := s.Upstream(web)
		return u != nil && len(u.Endpoints) == 1 && u.Endpoints[0].Address == "127.0.0.1"
	})
}

// TestRemoveCoversEveryKind: an object of any kind the manifests hold is
// deleted from the directory once it is in no file.
func TestRemoveCoversEveryKind(t *testing.T) {
	t.Parallel()
	set, err := manifest.Decode("all.yaml", []byte(upstreamYAML+"---\n"+setYAML("a", "1")+`---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: web-r1, namespace: shop}
spec: {upstream: web, region: r1}
---
`+domainYAML+`---
apiVersion: poise.dev/v1alpha1
kind: Partition
metadata: {name: europe, namespace: shop}
spec: {domain: cadastre, extent: {west: -10, south: 35, east: 30, north: 70}, replicas: [eu-1]}
`))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range set.Objects {
		kinds[o.Kind] = true
		var b topology.Batch
		deleteFromBatch(&b, o.Ref())
		if b.Len() != 1 {
			t.Errorf("%s gone from the files: batch touches %d objects, want its deletion", o, b.Len())
		}
	}
	if len(kinds) != 5 {
		t.Errorf("kinds %v: want all five", kinds)
	}
}

// TestLoadFollowsSpatialObjects: SpatialDomains and Partitions are loaded from the
// files, and deleted from the directory with their file.
func TestLoadFollowsSpatialObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "upstream.yaml"), upstreamYAML)
	write(t, filepath.Join(dir, "domain.yaml"), domainYAML)
	write(t, filepath.Join(dir, "partition.yaml"), `apiVersion: poise.dev/v1alpha1
kind: Partition
metadata: {name: europe, namespace: shop}
spec: {domain: cadastre, extent: {west: -10, south: 35, east: 30, north: 70}, replicas: [eu-1]}
`)
	src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
	key := topology.Key{Namespace: "shop", Name: "cadastre"}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st := snap.SpatialDomain(key); st == nil || len(st.Partitions) != 1 || st.Partitions[0].Partition.Key.Name != "europe" {
		t.Fatalf("after the first load: %+v", st)
	}
	if err := os.Remove(filepath.Join(dir, "partition.yaml")); err != nil {
		t.Fatal(err)
	}
	if snap, err = src.Load(); err != nil {
		t.Fatal(err)
	}
	if st := snap.SpatialDomain(key); st == nil || len(st.Partitions) != 0 {
		t.Fatalf("the Partition's file is gone, the directory has %+v", st)
	}
	if err := os.Remove(filepath.Join(dir, "domain.yaml")); err != nil {
		t.Fatal(err)
	}
	if snap, err = src.Load(); err != nil {
		t.Fatal(err)
	}
	if st := snap.SpatialDomain(key); st != nil {
		t.Fatalf("the SpatialDomain's file is gone, the directory has %+v", st)
	}
}

// TestSpatialProblemsAreLoggedOnce: a product no replica may serve is logged
// with its file and field, once, and the change is still applied.
func TestSpatialProblemsAreLoggedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "upstream.yaml"), upstreamYAML)
	write(t, filepath.Join(dir, "spatial.yaml"), strings.Replace(domainYAML, "allowedRegions: [r1]", "allowedRegions: [r9]", 1)+`---
apiVersion: poise.dev/v1alpha1
kind: Partition
metadata: {name: europe, namespace: shop}
spec: {domain: cadastre, extent: {west: -10, south: 35, east: 30, north: 70}, replicas: [eu-1]}
`)
	var logs bytes.Buffer
	src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory(), Log: slog.New(slog.NewTextHandler(&logs, nil))}
	for range 2 {
		if _, err := src.Load(); err != nil {
			t.Fatal(err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "spatial routing problem"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, out)
	}
	for _, want := range []string{"object=\"SpatialDomain shop/cadastre\"", "spatial.yaml document 1", "field=spec.products[parcels].allowedRegions", "reason=NoLawfulReplica"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// A FIFO or a link to a device among the manifests is refused, not read: the
// source neither blocks nor crashes, says why through Refusal (what /readyz
// shows) and poise_source_refusing, and recovers when the path is fixed.
func TestUnreadablePathsAreRefusedAndShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, d, m := watched(t, dir)
	good := d.Current()
	refusing := func() float64 { return testutil.ToFloat64(m.Refusing.WithLabelValues("files")) }

	for _, bad := range []struct {
		name   string
		create func(path string) error
	}{
		{"fifo.yaml", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"zero.yaml", func(p string) error { return os.Symlink("/dev/zero", p) }},
	} {
		path := filepath.Join(dir, bad.name)
		if err := bad.create(path); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, bad.name+" refused", func() (bool, string) {
			return strings.Contains(src.Refusal(), bad.name) && refusing() == 1,
				fmt.Sprintf("refusal %q, poise_source_refusing %v", src.Refusal(), refusing())
		})
		if r := src.Refusal(); !strings.Contains(r, "not a regular file") || d.Current() != good {
			t.Fatalf("%s: refusal %q; the snapshot must stay", bad.name, r)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		waitFor(t, d, "the path removed", func(*topology.Snapshot) bool { return src.Refusal() == "" && refusing() == 0 })
	}
	// the source still applies changes
	write(t, filepath.Join(dir, "a.yaml"), setYAML("a", "4"))
	waitFor(t, d, "weight 4", func(s *topology.Snapshot) bool { return endpointWeight(s) == 4 })
}
