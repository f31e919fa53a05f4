package server_test

import (
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdstype"
)

// histogram is how many observations a histogram of one type has, and their sum.
func (h *harness) histogram(v *prometheus.HistogramVec, short string) (uint64, float64) {
	h.t.Helper()
	var m dto.Metric
	if err := v.WithLabelValues(short).(prometheus.Histogram).Write(&m); err != nil {
		h.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// servedTypes are the short names of the served types, which the metrics
// are made with, as the control plane makes them.
func servedTypes() []string { return xdstype.Shorts() }

// The client kinds the server records with are the ones created at 0 up front.
func TestMetricClientKindsAreTheServers(t *testing.T) {
	t.Parallel()
	if want := []string{server.KindEnvoy, server.KindGRPC, server.KindUnknown}; !slices.Equal(metrics.ClientKinds, want) {
		t.Errorf("metrics create client kinds %v, the server records %v", metrics.ClientKinds, want)
	}
}

// Convergence runs from a version's publication to a client's ACK of it
// or of a later one, once per client and version; a NACKed version
// converges with the next one the client accepts.
func TestConvergenceObservedOnACK(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, typ := range servedTypes() {
		if n, _ := h.histogram(h.metrics.Convergence, typ); n != 0 {
			t.Fatalf("%s: %d observations before any client", typ, n)
		}
	}
	if got := testutil.CollectAndCount(h.metrics.Convergence); got != len(servedTypes()) {
		t.Fatalf("%d convergence series before any client, want one per type at 0", got)
	}
	publishV1(t, h)
	env := startEnvoy(t, h, "envoy-1") // requests and ACKs CDS and EDS v1
	eventually(t, "the first ACKs observed", func() bool {
		c, _ := h.histogram(h.metrics.Convergence, "CDS")
		e, _ := h.histogram(h.metrics.Convergence, "EDS")
		return c == 1 && e == 1
	})

	// a change ACKed after a delay is observed with at least that delay
	const delay = 60 * time.Millisecond
	_, before := h.histogram(h.metrics.Convergence, "EDS")
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	eds := env.expect(EDS, "v2", "c1")
	// sleep: the ACK must come at least delay after the publication
	time.Sleep(delay)
	env.ack(eds)
	eventually(t, "the v2 ACK observed", func() bool { n, _ := h.histogram(h.metrics.Convergence, "EDS"); return n == 2 })
	if _, sum := h.histogram(h.metrics.Convergence, "EDS"); sum-before < delay.Seconds() || sum-before > 5 {
		t.Errorf("v2 converged in %.3fs, want at least %v", sum-before, delay)
	}
	// the same ACK again observes nothing more
	env.ack(eds)
	env.none(quiet)

	// v3 is NACKed: nothing converges; v4's ACK ends both
	h.apply("v3", put(0, EDS, entry(t, "v3", cla("c1", 9002))))
	bad := env.expect(EDS, "v3", "c1")
	env.nack(bad, "v2", "bad port")
	env.none(quiet)
	if n, _ := h.histogram(h.metrics.Convergence, "EDS"); n != 2 {
		t.Fatalf("%d EDS observations after a NACK, want still 2", n)
	}
	h.apply("v4", put(0, EDS, entry(t, "v4", cla("c1", 9003))))
	env.ack(env.expect(EDS, "v4", "c1"))
	eventually(t, "v3 and v4 converged on v4's ACK", func() bool { n, _ := h.histogram(h.metrics.Convergence, "EDS"); return n == 4 })
	if n, _ := h.histogram(h.metrics.Convergence, "CDS"); n != 1 {
		t.Errorf("%d CDS observations, want 1: no CDS version was sent since", n)
	}

	// every response sent was timed
	pushes := h.counter(h.metrics.Pushes.WithLabelValues("EDS"))
	if n, _ := h.histogram(h.metrics.PushDuration, "EDS"); float64(n) != pushes {
		t.Errorf("%d EDS push durations for %v pushes", n, pushes)
	}
	if n, _ := h.histogram(h.metrics.SendDuration, "EDS"); float64(n) != pushes {
		t.Errorf("%d EDS send durations for %v pushes", n, pushes)
	}
}

func TestConvergenceObservedOnDeltaACK(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	publishV1(t, h)
	d := h.delta(envoyNode("envoy-d"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1", "c2"}})
	d.ack(d.expect(EDS, at("v1", "c1", "c2"), nil))
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	d.ack(d.expect(EDS, at("v2", "c1"), nil))
	eventually(t, "both Delta ACKs observed", func() bool { n, _ := h.histogram(h.metrics.Convergence, "EDS"); return n == 2 })
}
