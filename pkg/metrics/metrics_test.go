package metrics

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The label values the domain defines, as the control plane passes them
// (the xDS types served, the kinds of topology object).
var (
	types = []string{"CDS", "EDS", "LDS", "RDS"}
	kinds = []string{"Upstream", "Locality", "EndpointSet", "SpatialDomain", "Partition"}
)

// Alerts on rate() or absent() need series before the first event: every
// labelled series whose values are known up front is there at 0.
func TestSeriesExistAtZeroBeforeAnyEvent(t *testing.T) {
	m := New(Options{Types: types, Kinds: kinds, Source: "files"})
	for name, want := range map[string]int{
		"poise_xds_pushes_total":                    len(types),
		"poise_xds_nacks_total":                     len(types),
		"poise_xds_resource_changes_total":          len(types),
		"poise_xds_convergence_seconds":             len(types),
		"poise_xds_push_duration_seconds":           len(types),
		"poise_xds_send_duration_seconds":           len(types),
		"poise_xds_connected_clients":               len(ClientKinds),
		"poise_xds_snapshot_builds_total":           len(BuildResults),
		"poise_source_batches_total":                len(SourceResults),
		"poise_source_refusing":                     1,
		"poise_source_invalid_objects":              len(kinds),
		"poise_status_leader":                       1,
		"poise_build_info":                          1,
		"poise_status_writes_total":                 0, // the files source writes no status
		"poise_xds_snapshot_build_duration_seconds": 1,
		"poise_loadreport_capped_requests_total":    1,
		"poise_xds_streams_waiting":                 1,
	} {
		if got := testutil.CollectAndCount(m.Registry, name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	for _, typ := range types {
		if v := testutil.ToFloat64(m.XDS.NACKs.WithLabelValues(typ)); v != 0 {
			t.Errorf("NACKs{type=%s} = %v", typ, v)
		}
	}
	m = New(Options{Types: types, Kinds: kinds, Source: "kubernetes", WritesStatus: true})
	if got, want := testutil.CollectAndCount(m.Registry, "poise_status_write_errors_total"), len(kinds)*len(StatusErrorReasons); got != want {
		t.Errorf("status write errors: %d series, want %d", got, want)
	}
}

func TestInvalidObjectsReportEveryKind(t *testing.T) {
	m := New(Options{Kinds: kinds})
	m.Source.SetInvalidObjects(func() map[string]float64 { return map[string]float64{"EndpointSet": 2} })
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP poise_source_invalid_objects Objects the source sets aside because they are invalid (each has a status condition saying why; the rest of the topology serves), by kind. The files source refuses a whole change instead (poise_source_refusing), so it reports 0.
# TYPE poise_source_invalid_objects gauge
poise_source_invalid_objects{kind="EndpointSet"} 2
poise_source_invalid_objects{kind="Locality"} 0
poise_source_invalid_objects{kind="Partition"} 0
poise_source_invalid_objects{kind="SpatialDomain"} 0
poise_source_invalid_objects{kind="Upstream"} 0
`), "poise_source_invalid_objects"); err != nil {
		t.Error(err)
	}
}

func TestBuildInfo(t *testing.T) {
	m := New(Options{Version: "v1.2.3"})
	if got := testutil.CollectAndCount(m.BuildInfo); got != 1 {
		t.Fatalf("%d build info series, want 1", got)
	}
	if v := testutil.ToFloat64(m.BuildInfo.WithLabelValues("v1.2.3", runtime.Version(), "unknown")); v != 1 {
		// a test binary records no VCS revision
		t.Errorf("poise_build_info{version=v1.2.3,goversion=%s,revision=unknown} = %v, want 1", runtime.Version(), v)
	}
}

// A library registry with Go and process collectors of its own is served
// beside ours without repeating them, which would fail the whole scrape.
func TestIncludedRegistryWithoutItsGoCollector(t *testing.T) {
	m := New(Options{})
	lib := prometheus.NewRegistry()
	lib.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "rest_client_requests_total", Help: "h"}))
	m.Include(prometheus.Gatherers{lib}) // the raw one first: it must fail
	if _, err := m.Gatherer().Gather(); err == nil {
		t.Fatal("repeated Go collector gathered without error; the filter below proves nothing")
	}
	m = New(Options{})
	m.Include(Without(lib, "go_", "process_"))
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		found = found || mf.GetName() == "rest_client_requests_total"
	}
	if !found {
		t.Error("the included registry's own metric is not served")
	}
}

// TestOutlierSeriesFollowTheDetection: an upstream's outlier series exist
// at 0 from InitOutlier and go with ForgetOutlier.
func TestOutlierSeriesFollowTheDetection(t *testing.T) {
	m := New(Options{})
	names := []string{"poise_outlier_ejections_total", "poise_outlier_ejected_endpoints", "poise_loadreport_untrusted_reporters"}
	count := func() (n int) {
		for _, name := range names {
			n += testutil.CollectAndCount(m.Registry, name)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d series before any detection", n)
	}
	m.Outliers.Init("ns/a")
	m.Outliers.Init("ns/b")
	m.Outliers.Ejections.WithLabelValues("ns/a").Inc()
	if n := count(); n != 6 {
		t.Fatalf("%d series for two upstreams, want 6", n)
	}
	m.Outliers.Forget("ns/a")
	if n := count(); n != 3 {
		t.Fatalf("%d series after forgetting one, want 3", n)
	}
}

// The capped requests are the store's count, read at each scrape.
func TestCappedRequestsReadAtScrape(t *testing.T) {
	m := New(Options{})
	if v := testutil.ToFloat64(m.Outliers.capped); v != 0 {
		t.Errorf("before the store is set: %v", v)
	}
	n := uint64(0)
	m.Outliers.SetCappedRequests(func() uint64 { return n })
	n = 12_345
	if v := testutil.ToFloat64(m.Outliers.capped); v != 12_345 {
		t.Errorf("capped = %v, want the store's 12345", v)
	}
}

// The CRD schema gauges are the Kubernetes source's: none until it sets
// them, then one series per CRD it reports.
func TestCRDSchemaGauges(t *testing.T) {
	m := New(Options{Kinds: kinds})
	for _, name := range []string{"poise_crd_schema_outdated", "poise_crd_pruned_fields"} {
		if got := testutil.CollectAndCount(m.Registry, name); got != 0 {
			t.Errorf("%s before the source sets it: %d series, want none", name, got)
		}
	}
	m.Source.SetCRDSchemas(
		func() map[string]float64 {
			return map[string]float64{"upstreams.poise.dev": 1, "localities.poise.dev": 0}
		},
		func() map[string]float64 {
			return map[string]float64{"upstreams.poise.dev": 2, "localities.poise.dev": 0}
		})
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP poise_crd_pruned_fields Fields this binary knows that the cluster's CRD lacks, which the apiserver prunes; Kubernetes source only, one series per CRD.
# TYPE poise_crd_pruned_fields gauge
poise_crd_pruned_fields{crd="localities.poise.dev"} 0
poise_crd_pruned_fields{crd="upstreams.poise.dev"} 2
# HELP poise_crd_schema_outdated 1 while the cluster's CRD lacks fields this binary knows (the apiserver prunes them from every object written) or is not installed, else 0; Kubernetes source only, one series per CRD.
# TYPE poise_crd_schema_outdated gauge
poise_crd_schema_outdated{crd="localities.poise.dev"} 0
poise_crd_schema_outdated{crd="upstreams.poise.dev"} 1
`), "poise_crd_schema_outdated", "poise_crd_pruned_fields"); err != nil {
		t.Error(err)
	}
}
