package kube_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// brokenPath is the header the clients of plane two send: the backend that
// fails, fails only their RPCs, as if the path from their zone were broken.
const brokenPath = "x-zone-b"

// outlierEjectedBy says whether an explained endpoint is ejected by fleet
// outlier detection on the evidence of clients reporting to both replicas.
func outlierEjected(u explain.Upstream, b *splitcheck.Backend) (bool, string) {
	ep, ok := endpointOf(u, b)
	return ok && !ep.Eligible && ep.Reason == "OutlierEjected" && strings.HasPrefix(ep.ReasonFrom, "load reports: 4 clients, "),
		fmt.Sprintf("%+v", ep)
}

func outlierStatusOf(t *testing.T, ns, name string) *v1alpha1.OutlierEjectionStatus {
	t.Helper()
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	return u.Status.OutlierEjections
}

// TestFleetOutlierDetectionAcrossReplicas: two replicas, two grpc-go
// clients reporting load (LRS) to each. A backend fails 80 % of the RPCs of
// plane two's clients only: plane two's own view has the failing clients,
// plane one's the requests that succeed. Each replica shares its aggregate
// (a ConfigMap), the leader (plane one) sums them, ejects the backend on the
// evidence of all four clients and writes the decision to the Upstream's
// status; both replicas publish the same ejection, with an Event. The
// leader is killed: the ejection stays on plane two throughout, and plane
// two, now deciding, returns the backend when its time is up.
func TestFleetOutlierDetectionAcrossReplicas(t *testing.T) {
	ns := namespace(t)
	b := splitcheck.StartBackends(t, "127.0.0.1", 4)
	const base = 10 * time.Second
	od := &v1alpha1.OutlierDetection{ErrorPercent: new(int32(20)), MinRequestVolume: new(int32(100)), MinReporters: new(int32(2)),
		BaseEjectionTime: &metav1.Duration{Duration: base}, MaxEjectionTime: &metav1.Duration{Duration: time.Minute}, MaxEjectionPercent: new(int32(25))}
	var eps []v1alpha1.Endpoint
	for _, x := range b {
		eps = append(eps, v1alpha1.Endpoint{Address: x.Host, Port: x.Port})
	}
	objs := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC,
			AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}, LoadReporting: &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: time.Second}},
			OutlierDetection: od}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "echo", Locality: v1alpha1.LocalityID{Zone: "a"}, Endpoints: eps}},
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	const bucket = 500 * time.Millisecond // a 3 s window, decided twice a second
	tune := func(name string) func(*controlplane.Config) {
		return func(c *controlplane.Config) { c.ReplicaName, c.LoadReportBucket = name, bucket }
	}
	one := startPlaneWith(t, ns, "one", tune("one"))
	testkit.Eventually(t, 10*time.Second, "plane one leads", func() (bool, string) { return one.leads(), one.logs.tail(5) })
	two := startPlaneWith(t, ns, "two", tune("two"))

	listener := "echo." + ns
	loads := map[*plane][]*splitcheck.Load{}
	for i := range 2 {
		node := fmt.Sprintf("client-of-one-%d", i)
		loads[one] = append(loads[one], splitcheck.StartLoad(t, splitcheck.NewXDSClient(t, one.addrs.XDS, node, listener), node))
		node = fmt.Sprintf("client-of-two-%d", i)
		loads[two] = append(loads[two], splitcheck.StartLoad(t, splitcheck.NewXDSClient(t, two.addrs.XDS, node, listener), node, brokenPath, "1"))
	}
	testkit.Eventually(t, 20*time.Second, "every client reaches every backend", func() (bool, string) {
		for _, ls := range loads {
			for _, l := range ls {
				ok, _ := l.Take()
				for _, x := range b {
					if ok[x.Addr] == 0 {
						return false, l.Node + " does not reach " + x.Addr
					}
				}
			}
		}
		return true, ""
	})
	time.Sleep(6 * bucket) // a window of traffic without failures
	if st := outlierStatusOf(t, ns, "echo"); st != nil && len(st.Ejected) > 0 {
		t.Fatalf("ejected without failures: %+v", st)
	}

	bad := b[1]
	bad.SetFailures(800, brokenPath)
	start := time.Now()
	var rep explain.Report
	for _, p := range []*plane{one, two} {
		rep, _ = p.waitExplain(t, ns, "echo", "plane "+p.name+" ejects the failing backend", func(u explain.Upstream) (bool, string) {
			return outlierEjected(u, bad)
		})
		ep, _ := endpointOf(rep.Upstreams[0], bad)
		t.Logf("plane %s: ejected %v after the failures began: %s (from %s)", p.name, time.Since(start).Round(time.Millisecond), ep.Reason, ep.ReasonFrom)
	}
	// a window, an evaluation, a share's period and a status round trip
	if took := time.Since(start); took > 6*bucket+3*bucket+3*time.Second {
		t.Errorf("ejected on both replicas %v after the failures began", took)
	}
	st := outlierStatusOf(t, ns, "echo")
	if st == nil || len(st.Ejected) != 1 || st.Ejected[0].Port != bad.Port || st.Ejected[0].Count != 1 {
		t.Fatalf("status.outlierEjections %+v, want the failing backend alone", st)
	}
	until := st.Ejected[0].Until.Time
	waitEvents(t, ns, "Upstream/echo Warning OutlierEjected")

	// plane two's clients follow the split without it
	want := splitcheck.ExpectationOf(t, rep)
	if want.Share[bad.Addr] != 0 {
		t.Fatalf("the served split still sends to the ejected backend: %+v", want)
	}
	for _, l := range loads[two] {
		two.waitAcked(t, l.Node, rep.Revision)
	}
	time.Sleep(200 * time.Millisecond)
	for _, l := range loads[two] {
		l.Take()
	}
	time.Sleep(2 * time.Second)
	got := splitcheck.Tally{By: map[string]int{}}
	for _, l := range loads[two] {
		ok, _ := l.Take()
		for a, n := range ok {
			got.By[a] += n
			got.Total += n
		}
	}
	splitcheck.CheckSplit(t, "clients of plane two after the ejection", got, want)

	// the failures end; the leader goes away: the decision stays
	bad.SetFailures(0)
	one.stop(t)
	stopped := time.Now()
	var handover time.Duration
	for time.Now().Before(until.Add(-time.Second)) {
		rep, err := two.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := outlierEjected(rep.Upstreams[0], bad); !ok {
			t.Fatalf("%v after the leader stopped (%v before the ejection's end), plane two no longer ejects the backend: %s",
				time.Since(stopped).Round(time.Millisecond), time.Until(until).Round(time.Millisecond), why)
		}
		if handover == 0 && two.leads() {
			handover = time.Since(stopped)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if handover == 0 {
		t.Fatal("plane two did not take over before the ejection's end")
	}
	t.Logf("plane two leads %v after plane one stopped; the ejection held until a second before its end", handover.Round(time.Millisecond))
	// the new leader returns it when its time is up
	two.waitExplain(t, ns, "echo", "plane two returns the backend", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, bad)
		return ep.Eligible, fmt.Sprintf("%+v", ep)
	})
	late := time.Since(until)
	t.Logf("plane two returned the backend %v after its ejection's end", late.Round(time.Millisecond))
	if late > 2*time.Second {
		t.Errorf("returned %v after the ejection's end", late)
	}
	testkit.Eventually(t, 10*time.Second, "status.outlierEjections gone", func() (bool, string) {
		st := outlierStatusOf(t, ns, "echo")
		return st == nil, fmt.Sprintf("%+v", st)
	})
	waitEvents(t, ns, "Upstream/echo Normal OutlierReturned")
}
