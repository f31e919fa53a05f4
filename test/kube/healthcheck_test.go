package kube_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// activeCheckOf reads an Upstream's status.activeChecks.
func activeCheckOf(t *testing.T, ns, name string) *v1alpha1.ActiveCheckStatus {
	t.Helper()
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	return u.Status.ActiveChecks
}

// ejectedBy says whether an explained endpoint is ineligible by the active
// check of the named replica.
func ejectedBy(u explain.Upstream, b *splitcheck.Backend, replica string) (bool, string) {
	ep, ok := endpointOf(u, b)
	return ok && !ep.Eligible && ep.Probe == "Unhealthy" && strings.HasPrefix(ep.ReasonFrom, "active check by "+replica+":"),
		fmt.Sprintf("%+v", ep)
}

// TestActiveChecksAcrossReplicas: with two replicas, the leader alone checks
// spec.healthCheck and writes its verdicts to status.activeChecks; a backend
// whose gRPC health turns NOT_SERVING is ineligible on both replicas within
// interval × unhealthyThreshold, with its origin, and their clients stop
// sending to it. When the leader is killed the decision stays on the
// survivor, which takes over the checking and brings the backend back when it
// serves again.
//
// It runs alone (not in parallel): its checks time out on the wall clock, and
// a machine busy with another test makes a healthy backend time out too
// (panic mode then sends to the ejected one).
func TestActiveChecksAcrossReplicas(t *testing.T) {
	ns := namespace(t)
	b := splitcheck.StartBackends(t, "127.0.0.1", 3)
	hc := &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckGRPC, Interval: &metav1.Duration{Duration: time.Second},
		Timeout: &metav1.Duration{Duration: 500 * time.Millisecond}, UnhealthyThreshold: new(int32(2)), HealthyThreshold: new(int32(2))}
	objs := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC,
			AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}, HealthCheck: hc}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "echo", Locality: v1alpha1.LocalityID{Zone: "a"},
			Endpoints: []v1alpha1.Endpoint{{Address: b[0].Host, Port: b[0].Port}, {Address: b[1].Host, Port: b[1].Port}, {Address: b[2].Host, Port: b[2].Port}}}},
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	named := func(name string) func(*controlplane.Config) {
		return func(c *controlplane.Config) { c.ReplicaName = name }
	}
	one := startPlaneWith(t, ns, "one", named("one"))
	testkit.Eventually(t, 10*time.Second, "plane one leads", func() (bool, string) { return one.leads(), one.logs.tail(5) })
	two := startPlaneWith(t, ns, "two", named("two"))
	testkit.Eventually(t, 15*time.Second, "the leader finds the three endpoints healthy", func() (bool, string) {
		v := metricValue(t, one, `poise_active_check_endpoints{state="healthy"}`)
		return v == 3, fmt.Sprintf("healthy %v", v)
	})
	if ac := activeCheckOf(t, ns, "echo"); ac != nil {
		t.Fatalf("status.activeChecks %+v while every endpoint is healthy: a healthy fleet writes nothing", ac)
	}
	if v := metricValue(t, two, `poise_active_checks_total{result="pass"}`); v != 0 {
		t.Fatalf("the follower ran %v checks", v)
	}
	if two.leads() {
		t.Fatal("both planes lead")
	}

	conns := map[*plane]*grpc.ClientConn{
		one: splitcheck.NewXDSClient(t, one.addrs.XDS, "client-of-one", "echo."+ns),
		two: splitcheck.NewXDSClient(t, two.addrs.XDS, "client-of-two", "echo."+ns),
	}

	// the check fails: both replicas eject it, by the leader's verdict
	flipped := time.Now()
	b[1].SetServing(false)
	var rep explain.Report
	for _, p := range []*plane{one, two} {
		rep, _ = p.waitExplain(t, ns, "echo", "plane "+p.name+" ejects the NOT_SERVING backend", func(u explain.Upstream) (bool, string) {
			return ejectedBy(u, b[1], "one")
		})
		took := time.Since(flipped)
		// interval × unhealthyThreshold, plus the jitter (10 %), a timeout,
		// the status round trip and a loaded machine's slack
		if limit := 2*1100*time.Millisecond + 500*time.Millisecond + 2*time.Second; took > limit {
			t.Errorf("plane %s ejected it %v after the flip, more than %v", p.name, took, limit)
		}
		ep, _ := endpointOf(rep.Upstreams[0], b[1])
		t.Logf("plane %s: ineligible %v after NOT_SERVING: %s (from %s)", p.name, took.Round(time.Millisecond), ep.Reason, ep.ReasonFrom)
	}
	ac := activeCheckOf(t, ns, "echo")
	if ac == nil || len(ac.Unhealthy) != 1 || ac.Unhealthy[0].Address != b[1].Host || ac.Unhealthy[0].Port != b[1].Port || ac.Unhealthy[0].Since == nil {
		t.Fatalf("status.activeChecks %+v, want backend 1 alone", ac)
	}
	since := ac.Unhealthy[0].Since.Time
	for p, conn := range conns {
		rep, err := p.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		want := splitcheck.ExpectationOf(t, rep)
		if want.Share[b[1].Addr] != 0 {
			t.Fatalf("expectation still sends to the ejected backend: %+v", want)
		}
		measure(t, "clients of plane "+p.name+" after the ejection", conn, want)
	}

	// the leader goes away: the decision stays, and the survivor checks on
	one.stop(t)
	stopped := time.Now()
	stillEjected := func() string {
		rep, err := two.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := ejectedBy(rep.Upstreams[0], b[1], "one"); !ok {
			return fmt.Sprintf("%v after the leader stopped, plane two no longer ejects the backend: %s", time.Since(stopped).Round(time.Millisecond), why)
		}
		return ""
	}
	handover := testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, "plane two takes over, the ejection held", func() (bool, string) {
		if why := stillEjected(); why != "" {
			t.Fatal(why)
		}
		return two.leads(), two.logs.tail(5)
	})
	holds(t, 3*time.Second, 50*time.Millisecond, "the ejection holds 3 s past the handover", stillEjected)
	ac = activeCheckOf(t, ns, "echo")
	if ac == nil || len(ac.Unhealthy) != 1 || !ac.Unhealthy[0].Since.Time.Equal(since) || !strings.HasPrefix(ac.Unhealthy[0].Origin, "active check by one:") {
		t.Fatalf("after the handover status.activeChecks is %+v, want the old leader's verdict kept", ac)
	}
	t.Logf("plane two leads %v after plane one stopped; the ejection held throughout and 3 s past it", handover.Round(time.Millisecond))
	measure(t, "clients of plane two after the handover", conns[two], splitcheck.ExpectationOf(t, rep))

	// it serves again: the new leader's checks bring it back
	b[1].SetServing(true)
	recovered := time.Now()
	rep, _ = two.waitExplain(t, ns, "echo", "plane two brings the backend back", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[1])
		return ep.Eligible, fmt.Sprintf("%+v", ep)
	})
	t.Logf("plane two: eligible again %v after SERVING", time.Since(recovered).Round(time.Millisecond))
	measure(t, "clients of plane two after recovery", conns[two], splitcheck.ExpectationOf(t, rep))
	testkit.Eventually(t, 10*time.Second, "status.activeChecks gone with the last Unhealthy endpoint", func() (bool, string) {
		ac := activeCheckOf(t, ns, "echo")
		return ac == nil, fmt.Sprintf("%+v", ac)
	})

	// it fails again, then the check is removed: its verdict and status go
	b[2].SetServing(false)
	two.waitExplain(t, ns, "echo", "plane two ejects backend 2", func(u explain.Upstream) (bool, string) {
		return ejectedBy(u, b[2], "two")
	})
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "echo"}, &u); err != nil {
		t.Fatal(err)
	}
	orig := u.DeepCopy()
	u.Spec.HealthCheck = nil
	// a patch, not an update: the leader writes status meanwhile
	if err := k8s.Patch(t.Context(), &u, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	two.waitExplain(t, ns, "echo", "without a check, backend 2 is eligible", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[2])
		return ep.Eligible, fmt.Sprintf("%+v", ep)
	})
	testkit.Eventually(t, 10*time.Second, "status.activeChecks removed with the check", func() (bool, string) {
		ac := activeCheckOf(t, ns, "echo")
		return ac == nil, fmt.Sprintf("%+v", ac)
	})
}

// metricLines are the lines of a plane's /metrics.
func metricLines(t *testing.T, p *plane) []string {
	t.Helper()
	resp, err := http.Get(p.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Split(string(body), "\n")
}

// metricValue reads one series of a plane's /metrics (0 when absent).
func metricValue(t *testing.T, p *plane, series string) float64 {
	t.Helper()
	for _, line := range metricLines(t, p) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
