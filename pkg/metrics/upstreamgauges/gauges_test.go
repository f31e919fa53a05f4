package upstreamgauges_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/metrics/upstreamgauges"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// fixture publishes topology batches with the gauges following, as
// controlplane.Run wires them.
type fixture struct {
	t   *testing.T
	up  *upstreamgauges.Gauges
	reg *prometheus.Registry
	dir *topology.Directory
	pub *publish.Publisher
}

func newFixture(t *testing.T, o upstreamgauges.Options) *fixture {
	f := &fixture{t: t, up: upstreamgauges.New(o), reg: prometheus.NewRegistry(), dir: topology.NewDirectory()}
	f.reg.MustRegister(f.up)
	cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	f.pub = publish.New(cache, "test", nil)
	f.pub.OnPublish = func(st publish.Stats) {
		for _, c := range st.Changed {
			f.up.Queue(c.Old, c.Cur)
		}
	}
	return f
}

func (f *fixture) publish(b topology.Batch) {
	f.t.Helper()
	s, err := f.dir.Apply(b)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pub.Publish(s); err != nil {
		f.t.Fatal(err)
	}
	f.up.Flush()
}

func (f *fixture) count(name string) int {
	f.t.Helper()
	return testutil.CollectAndCount(f.reg, name)
}

func unhealthy(u, r int) topology.EndpointSet {
	return topologytest.Set(u, r, map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true})
}

// The gauges follow each publication, and go with the upstreams and
// localities that go.
func TestUpstreamGaugesFollowPublications(t *testing.T) {
	f := newFixture(t, upstreamgauges.Options{Localities: true, MaxUpstreams: upstreamgauges.DefaultMaxUpstreams})
	for _, name := range []string{"poise_upstream_priority_load", "poise_upstream_locality_traffic", "poise_upstream_dropped_fraction"} {
		if n := f.count(name); n != 0 {
			t.Fatalf("%s: %d series before any publication", name, n)
		}
	}
	f.publish(topologytest.Batch(3))
	up := f.up
	if n := f.count("poise_upstream_locality_traffic"); n != 9 {
		t.Fatalf("%d locality series, want 3 upstreams × 3 localities", n)
	}
	if v := testutil.ToFloat64(up.PriorityLoad.WithLabelValues("bench", "svc-0000", "0")); v != 1 {
		t.Errorf("priority 0 load %v, want 1", v)
	}
	var sum float64
	for _, r := range topologytest.Regions {
		sum += testutil.ToFloat64(up.LocalityTraffic.WithLabelValues("bench", "svc-0001", "0", r, "", ""))
	}
	if sum < 0.999 || sum > 1.001 {
		t.Errorf("svc-0001's localities carry %v of its traffic, want 1", sum)
	}

	// svc-0001 loses every endpoint: its only priority panics
	var b topology.Batch
	for r := range topologytest.Regions {
		b.PutEndpointSet(unhealthy(1, r))
	}
	f.publish(b)
	if v := testutil.ToFloat64(up.PriorityPanic.WithLabelValues("bench", "svc-0001", "0")); v != 1 {
		t.Errorf("svc-0001 priority 0 panic = %v, want 1", v)
	}
	if v := testutil.ToFloat64(up.PriorityPanic.WithLabelValues("bench", "svc-0000", "0")); v != 0 {
		t.Errorf("svc-0000 priority 0 panic = %v, want 0", v)
	}

	// a locality goes, then a whole upstream
	b = topology.Batch{}
	b.DeleteEndpointSet(topologytest.Set(0, 2, nil).Key)
	f.publish(b)
	if n := f.count("poise_upstream_locality_traffic"); n != 8 {
		t.Fatalf("%d locality series after one locality went, want 8", n)
	}
	b = topology.Batch{}
	b.DeleteUpstream(topologytest.Upstream(2).Key)
	for r := range topologytest.Regions {
		b.DeleteEndpointSet(topologytest.Set(2, r, nil).Key)
	}
	f.publish(b)
	for name, want := range map[string]int{"poise_upstream_locality_traffic": 5, "poise_upstream_priority_load": 2,
		"poise_upstream_priority_panic": 2, "poise_upstream_total_panic": 2, "poise_upstream_dropped_fraction": 2} {
		if n := f.count(name); n != want {
			t.Errorf("%s: %d series after svc-0002 went, want %d", name, n, want)
		}
	}
}

// --metrics-locality-gauges=false and --metrics-max-upstreams bound the series.
func TestUpstreamGaugesBounded(t *testing.T) {
	var log bytes.Buffer
	f := newFixture(t, upstreamgauges.Options{Localities: false, MaxUpstreams: 2, Log: slog.New(slog.NewTextHandler(&log, nil))})
	f.publish(topologytest.Batch(4))
	if n := f.count("poise_upstream_locality_traffic"); n != 0 {
		t.Errorf("%d locality series with the locality gauges off", n)
	}
	if n := f.count("poise_upstream_priority_load"); n != 2 {
		t.Errorf("%d upstreams exported, want the bound, 2", n)
	}
	if v := testutil.ToFloat64(f.up.PriorityLoad.WithLabelValues("bench", "svc-0001", "0")); v != 1 {
		t.Errorf("the first upstreams in key order are exported; svc-0001 load %v", v)
	}
	f.publish(topologytest.Flip(3, 1)) // a left-out upstream changes again: no second line
	if lines := strings.Count(log.String(), "metrics-max-upstreams"); lines != 1 {
		t.Errorf("%d log lines about the bound, want 1:\n%s", lines, log.String())
	}
	// a removed upstream frees its slot for the next that changes
	var b topology.Batch
	b.DeleteUpstream(topologytest.Upstream(0).Key)
	for r := range topologytest.Regions {
		b.DeleteEndpointSet(topologytest.Set(0, r, nil).Key)
	}
	f.publish(b)
	f.publish(topologytest.Flip(3, 0))
	if v := testutil.ToFloat64(f.up.PriorityLoad.WithLabelValues("bench", "svc-0003", "0")); v != 1 {
		t.Errorf("svc-0003 not exported once a slot freed: load %v", v)
	}
	if n := f.count("poise_upstream_priority_load"); n != 2 {
		t.Errorf("%d upstreams exported, want 2", n)
	}
}
