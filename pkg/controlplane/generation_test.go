package controlplane

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
)

// generationManifest is Upstream shop/api with load reporting and outlier
// detection over EndpointSet api-a of 10.1.0.1-4:80, 10.1.0.2 carrying the
// given generation and hash key.
func generationManifest(t *testing.T, dir, generation string) string {
	t.Helper()
	doc := fmt.Sprintf(`# the endpoint set first: files mode takes objects in any order
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata:
  name: api-a
  namespace: shop
spec:
  upstream: api
  locality:
    region: r1
  endpoints:
  - address: 10.1.0.1
    port: 80
  - address: 10.1.0.2
    port: 80
    hashKey: vm-api-2
    generation: %q
  - address: 10.1.0.3
    port: 80
  - address: 10.1.0.4
    port: 80
---
apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata:
  name: api
  namespace: shop
spec:
  protocol: GRPC
  loadReporting:
    interval: 1s
  outlierDetection:
    errorPercent: 20
    minRequestVolume: 100
    minReporters: 3
    baseEjectionTime: 60s
    maxEjectionTime: 10m
    maxEjectionPercent: 25
`, generation)
	path := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// applyManifest loads path as files mode does and applies it to d.
func applyManifest(t *testing.T, d *topology.Directory, path string) *topology.Snapshot {
	t.Helper()
	set, err := manifest.Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	snap, err := d.Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// withInterval sets every cluster stat's load_report_interval.
func withInterval(r *lrs.LoadStatsRequest, d time.Duration) *lrs.LoadStatsRequest {
	for _, cs := range r.ClusterStats {
		cs.LoadReportInterval = durationpb.New(d)
	}
	return r
}

// TestNewGenerationInFilesMode: files mode, the EndpointSet's generation
// field. Three clients' reports eject 10.1.0.2 (generation vm-7); the
// manifest then gives the address a new generation (vm-8): in the snapshot
// that carries it the endpoint is eligible, before any evaluation; the next
// evaluation withdraws the old ejection and does not eject on the old
// window, nor on late reports whose interval began before the change
// (dropped and counted); when the new backend fails on its own, its
// ejection is a first one.
func TestNewGenerationInFilesMode(t *testing.T) {
	t.Parallel()
	up := topology.Key{Namespace: "shop", Name: "api"}
	files := t.TempDir()
	dir := topology.NewDirectory()
	snap := applyManifest(t, dir, generationManifest(t, files, "vm-7"))
	if o := snap.Upstream(up).Origins[1]; o.Generation != "vm-7" || o.HashKey != "vm-api-2" {
		t.Fatalf("10.1.0.2's origin %+v, want the manifest's generation and hash key", o)
	}
	now := time.Unix(1_800_000_000, 0)
	loads := loadreport.NewStore(loadreport.Config{Bucket: time.Second})
	loads.SetCatalog(loadreport.NewCatalogAt(loads.Catalog(), snap, reportsLoad, now))
	m := metrics.New(metrics.Options{})
	o := newOutliers(dir, loads, m.Outliers, slog.New(slog.DiscardHandler))
	report := func(at time.Time, interval time.Duration, ok, errs []uint64, prefix string) {
		for i := range 3 {
			st := loads.Open(loadreport.Reporter{ID: fmt.Sprintf("%s-%d", prefix, i)}, at)
			st.Report(withInterval(grpcReport(ok, errs), interval), at)
		}
	}

	report(now, time.Second, []uint64{50, 25, 50, 50}, []uint64{0, 25, 0, 0}, "client")
	o.evaluate(now)
	if got := ejectedIn(t, dir.Current()); len(got) != 1 || got["10.1.0.2"] == "" {
		t.Fatalf("ejected %v, want 10.1.0.2", got)
	}
	if st, _ := o.Status(up); len(st.Ejections) != 1 || st.Ejections[0].Generation != "vm-7" {
		t.Fatalf("status %+v, want generation vm-7 ejected", st)
	}

	// a new backend at 10.1.0.2
	changed := now.Add(time.Second)
	snap = applyManifest(t, dir, generationManifest(t, files, "vm-8"))
	if got := ejectedIn(t, snap); len(got) != 0 {
		t.Fatalf("the snapshot with generation vm-8 ejects %v: the old backend's ejection applies to the new one", got)
	}
	loads.SetCatalog(loadreport.NewCatalogAt(loads.Catalog(), snap, reportsLoad, changed))
	if l := loads.Cluster("shop/api", changed)[1]; l.Errors != 0 || l.Successes != 0 || l.Generation != "vm-8" || !l.GenerationSince.Equal(changed) {
		t.Errorf("the new generation's load %+v, want none, begun at the change", l)
	}

	// late reports of an interval begun before the change
	late := now.Add(2 * time.Second)
	report(late, 5*time.Second, []uint64{0, 0, 0, 0}, []uint64{0, 100, 0, 0}, "late")
	if d := loads.Drops().OldGeneration; d != 3 {
		t.Errorf("Drops.OldGeneration = %d, want the 3 late stats on 10.1.0.2", d)
	}
	o.evaluate(late)
	if got := ejectedIn(t, dir.Current()); len(got) != 0 {
		t.Fatalf("after the evaluation: ejected %v", got)
	}
	if st, _ := o.Status(up); len(st.Ejections) != 0 {
		t.Fatalf("status %+v, want no ejection", st)
	}

	// the new backend fails on its own
	own := now.Add(3 * time.Second)
	report(own, time.Second, []uint64{50, 25, 50, 50}, []uint64{0, 25, 0, 0}, "client")
	o.evaluate(own)
	if got := ejectedIn(t, dir.Current()); len(got) != 1 || got["10.1.0.2"] == "" {
		t.Fatalf("ejected %v, want 10.1.0.2 on its own evidence", got)
	}
	st, _ := o.Status(up)
	if len(st.Ejections) != 1 || st.Ejections[0].Generation != "vm-8" || st.Ejections[0].Count != 1 || !st.Ejections[0].Until.Equal(own.Add(time.Minute)) {
		t.Errorf("ejection %+v, want vm-8's first: count 1, one base time", st.Ejections)
	}
}
