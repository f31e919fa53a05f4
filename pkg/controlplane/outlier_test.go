package controlplane

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// outlierTopology is Upstream shop/api over 4 endpoints 10.1.0.1-4:80,
// with load reporting and, when od is set, outlier detection.
func outlierTopology(od *topology.OutlierDetection) topology.Batch {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "api"}, Policy: weights.Policy{OverprovisioningFactor: 140, PanicThreshold: 50},
		LoadReportInterval: time.Second, OutlierDetection: od})
	s := topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "api-a"}, Upstream: "api", Locality: weights.Locality{Region: "r1"}}
	for i := 1; i <= 4; i++ {
		s.Endpoints = append(s.Endpoints, topology.Endpoint{Address: fmt.Sprintf("10.1.0.%d", i), Port: 80, Weight: 1})
	}
	b.PutEndpointSet(s)
	return b
}

// grpcReport is a gRPC client's report: per endpoint i (1-based) the
// successes and errors in ok[i-1], errs[i-1].
func grpcReport(ok, errs []uint64) *lrs.LoadStatsRequest {
	cs := &endpoint.ClusterStats{ClusterName: "shop/api"}
	for i := range ok {
		cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &endpoint.UpstreamLocalityStats{
			Locality:                &core.Locality{Region: "r1", SubZone: fmt.Sprintf("~ep~10.1.0.%d:80", i+1)},
			TotalSuccessfulRequests: ok[i], TotalErrorRequests: errs[i], TotalIssuedRequests: ok[i] + errs[i]})
	}
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{cs}}
}

func ejectedIn(t *testing.T, snap *topology.Snapshot) map[string]string {
	t.Helper()
	u := snap.Upstream(topology.Key{Namespace: "shop", Name: "api"})
	out := map[string]string{}
	for i, e := range u.Endpoints {
		if e.Ejected {
			out[e.Address] = u.Origins[i].Health.OutlierOrigin
		}
	}
	return out
}

// TestOutlierLoopInFilesMode drives the files-mode loop by hand: three
// clients see 10.1.0.2 fail half its calls and a fourth fails everywhere;
// the endpoint is ejected with the figures of the trusted three, the bad
// client is counted untrusted, the ejection ends by itself, and removing
// the detection withdraws an ejection and its series.
func TestOutlierLoopInFilesMode(t *testing.T) {
	t.Parallel()
	dir := topology.NewDirectory()
	od := &topology.OutlierDetection{ErrorPercent: 20, MinRequestVolume: 100, MinReporters: 3,
		BaseEjectionTime: 5 * time.Second, MaxEjectionTime: time.Minute, MaxEjectionPercent: 10}
	snap, err := dir.Apply(outlierTopology(od))
	if err != nil {
		t.Fatal(err)
	}
	loads := loadreport.NewStore(loadreport.Config{Bucket: time.Second})
	loads.SetCatalog(loadreport.NewCatalog(nil, snap, reportsLoad))
	m := metrics.New(metrics.Options{})
	o := newOutliers(dir, loads, m.Outliers, slog.New(slog.DiscardHandler))
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 {
		st := loads.Open(loadreport.Reporter{ID: fmt.Sprintf("client-%d", i)}, now)
		st.Report(grpcReport([]uint64{50, 25, 50, 50}, []uint64{0, 25, 0, 0}), now)
	}
	bad := loads.Open(loadreport.Reporter{ID: "bad"}, now)
	bad.Report(grpcReport([]uint64{0, 0, 0, 0}, []uint64{40, 40, 40, 40}), now)

	o.evaluate(now)
	got := ejectedIn(t, dir.Current())
	want := map[string]string{"10.1.0.2": "load reports: 3 clients, at least 3 failing, 150 requests, 50 % errors, window 6 s"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ejected %v, want %v", got, want)
	}
	if v := testutil.ToFloat64(m.Outliers.Ejected.WithLabelValues("shop/api")); v != 1 {
		t.Errorf("ejected gauge %v", v)
	}
	if v := testutil.ToFloat64(m.Outliers.Ejections.WithLabelValues("shop/api")); v != 1 {
		t.Errorf("ejections counter %v", v)
	}
	if v := testutil.ToFloat64(m.Outliers.UntrustedReporters.WithLabelValues("shop/api")); v != 1 {
		t.Errorf("untrusted gauge %v", v)
	}
	if st, ok := o.Status(topology.Key{Namespace: "shop", Name: "api"}); !ok || st.Reporters != 3 || st.Untrusted != 1 ||
		len(st.Ejections) != 1 || st.Ejections[0].Until != now.Add(5*time.Second) || !st.EvaluatedAt.Equal(now) {
		t.Errorf("status %+v, %v", st, ok)
	}
	// nothing new: no Apply
	rev := dir.Current().Revision
	o.evaluate(now.Add(time.Second))
	if dir.Current().Revision != rev {
		t.Error("an evaluation without a change applied a batch")
	}
	// the time is up: it returns
	o.evaluate(now.Add(5 * time.Second))
	if got := ejectedIn(t, dir.Current()); len(got) != 0 {
		t.Fatalf("after the ejection time: %v", got)
	}
	if v := testutil.ToFloat64(m.Outliers.Ejected.WithLabelValues("shop/api")); v != 0 {
		t.Errorf("ejected gauge %v after the return", v)
	}

	// ejected again on new evidence, then the detection is removed
	later := now.Add(10 * time.Second)
	for i := range 3 {
		st := loads.Open(loadreport.Reporter{ID: fmt.Sprintf("client-%d", i)}, later)
		st.Report(grpcReport([]uint64{50, 0, 50, 50}, []uint64{0, 50, 0, 0}), later)
	}
	o.evaluate(later)
	if got := ejectedIn(t, dir.Current()); len(got) != 1 {
		t.Fatalf("not ejected again: %v", got)
	}
	if _, err := dir.Apply(outlierTopology(nil)); err != nil {
		t.Fatal(err)
	}
	o.evaluate(later.Add(time.Second))
	if got := ejectedIn(t, dir.Current()); len(got) != 0 {
		t.Fatalf("the detection is gone but %v stays ejected", got)
	}
	if _, ok := o.Status(topology.Key{Namespace: "shop", Name: "api"}); ok {
		t.Error("a status kept for an upstream without a detection")
	}
	if n := testutil.CollectAndCount(m.Registry, "poise_outlier_ejected_endpoints"); n != 0 {
		t.Errorf("%d ejected series after the detection went", n)
	}
}
