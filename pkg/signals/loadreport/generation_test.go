package loadreport

import (
	"slices"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
)

// generations is synthetic upstream 0 with its first endpoint (10.0.0.0)
// given generation gen ("" for none), applied to d.
func generations(t *testing.T, d *topology.Directory, gen string) *topology.Snapshot {
	t.Helper()
	b := topologytest.Batch(1)
	set := topologytest.Set(0, 0, nil)
	set.Endpoints[0].Generation = gen
	b.PutEndpointSet(set)
	snap, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// interval sets a report's load_report_interval.
func interval(cs *endpoint.ClusterStats, d time.Duration) *endpoint.ClusterStats {
	cs.LoadReportInterval = durationpb.New(d)
	return cs
}

// A new generation at an address starts with no counts, and a report whose
// interval began before the generation did is not counted for it, while
// the other endpoints keep theirs.
func TestNewGenerationStartsEmpty(t *testing.T) {
	t.Parallel()
	const cluster = "bench/svc-0000"
	d := topology.NewDirectory()
	s := NewStore(Config{})
	s.SetCatalog(NewCatalogAt(s.Catalog(), generations(t, d, "pod-a"), nil, t0))
	st := s.Open(Reporter{ID: "envoy-1"}, t0)
	st.Report(report(interval(envoyStats(cluster, "10.0.0.0", 100, 10, 90), 10*time.Second), interval(envoyStats(cluster, "10.0.0.1", 50, 50, 0), 10*time.Second)), t0.Add(10*time.Second))
	if e := at(t, s.Cluster(cluster, t0.Add(11*time.Second)), "10.0.0.0"); e.Errors != 90 || e.Generation != "pod-a" || e.GenerationSince == nil || !e.GenerationSince.Equal(t0) {
		t.Fatalf("generation pod-a: %+v", e)
	}

	// pod-b takes 10.0.0.0 at t0+12s
	changed := t0.Add(12 * time.Second)
	s.SetCatalog(NewCatalogAt(s.Catalog(), generations(t, d, "pod-b"), nil, changed))
	loads := s.Cluster(cluster, changed)
	if e := at(t, loads, "10.0.0.0"); !e.Load.zero() || e.Reporters != 0 || e.Generation != "pod-b" || !e.GenerationSince.Equal(changed) {
		t.Errorf("pod-b right after the change: %+v, want no load", e)
	}
	if e := at(t, loads, "10.0.0.1"); e.Successes != 50 {
		t.Errorf("10.0.0.1 lost its counts with its neighbour's generation: %+v", e)
	}
	if g, since, ok := s.Catalog().Generation(cluster, "10.0.0.0", 8080); !ok || g != "pod-b" || !since.Equal(changed) {
		t.Errorf("Catalog.Generation = %q, %v, %v", g, since, ok)
	}

	// a late report of the interval [t0+10s, t0+20s): it began before pod-b
	st.Report(report(interval(envoyStats(cluster, "10.0.0.0", 100, 0, 100), 10*time.Second), interval(envoyStats(cluster, "10.0.0.1", 5, 5, 0), 10*time.Second)), t0.Add(20*time.Second))
	loads = s.Cluster(cluster, t0.Add(21*time.Second))
	if e := at(t, loads, "10.0.0.0"); !e.Load.zero() {
		t.Errorf("a report begun before the generation counted for it: %+v", e)
	}
	if e := at(t, loads, "10.0.0.1"); e.Successes != 55 {
		t.Errorf("10.0.0.1 = %+v, want the late report counted (55 successes)", e)
	}
	if got := s.Drops().OldGeneration; got != 1 {
		t.Errorf("Drops.OldGeneration = %d, want 1", got)
	}

	// the next interval, [t0+20s, t0+30s), is pod-b's own
	st.Report(report(interval(envoyStats(cluster, "10.0.0.0", 40, 40, 0), 10*time.Second)), t0.Add(30*time.Second))
	if e := at(t, s.Cluster(cluster, t0.Add(31*time.Second)), "10.0.0.0"); e.Successes != 40 || e.Errors != 0 {
		t.Errorf("pod-b's own report: %+v, want 40 successes and no errors", e)
	}
	r, _ := s.Reports(cluster, t0.Add(31*time.Second))
	if !slices.Contains(r.Endpoints, Endpoint{Address: "10.0.0.0", Port: 8080, Generation: "pod-b"}) || !slices.Contains(r.Endpoints, Endpoint{Address: "10.0.0.1", Port: 8080}) {
		t.Errorf("Reports names %+v, want 10.0.0.0 with pod-b's generation", r.Endpoints)
	}

	// the same generation again keeps its counts and its start
	s.SetCatalog(NewCatalogAt(s.Catalog(), generations(t, d, "pod-b"), nil, t0.Add(40*time.Second)))
	if e := at(t, s.Cluster(cluster, t0.Add(41*time.Second)), "10.0.0.0"); e.Successes != 40 || !e.GenerationSince.Equal(changed) {
		t.Errorf("an unchanged generation: %+v", e)
	}
}

// Endpoints of the first catalog, and unnamed endpoints that appear later,
// are not fresh: their first reports count whenever their interval began,
// as they always have.
func TestFirstCatalogAndUnnamedEndpointsCountAtOnce(t *testing.T) {
	t.Parallel()
	const cluster = "bench/svc-0000"
	d := topology.NewDirectory()
	s := NewStore(Config{})
	s.SetCatalog(NewCatalogAt(s.Catalog(), generations(t, d, "pod-a"), nil, t0.Add(time.Hour)))
	st := s.Open(Reporter{ID: "envoy-1"}, t0)
	st.Report(report(interval(envoyStats(cluster, "10.0.0.0", 10, 10, 0), 10*time.Second)), t0.Add(10*time.Second))
	if e := at(t, s.Cluster(cluster, t0.Add(11*time.Second)), "10.0.0.0"); e.Successes != 10 {
		t.Errorf("the first catalog's endpoint: %+v, want its report counted", e)
	}
	// the generation name goes away: "" is a new generation too
	s.SetCatalog(NewCatalogAt(s.Catalog(), generations(t, d, ""), nil, t0.Add(12*time.Second)))
	if e := at(t, s.Cluster(cluster, t0.Add(13*time.Second)), "10.0.0.0"); !e.Load.zero() || e.Generation != "" || e.GenerationSince != nil {
		t.Errorf("after the generation changed to none: %+v", e)
	}
	if d := s.Drops(); d != (Drops{}) {
		t.Errorf("drops = %+v, want none", d)
	}
}
