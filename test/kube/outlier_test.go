package kube_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/shares"
	"poise.dev/poise/pkg/signals/outlier"
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
	t.Parallel()
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
	// the RPCs whose split is checked after the ejection: about what plane
	// two's clients send in two seconds on a 2-core machine
	const afterEjection = 1000
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
	holds(t, 6*bucket, 100*time.Millisecond, "a window of traffic without failures ejects nothing", func() string {
		if st := outlierStatusOf(t, ns, "echo"); st != nil && len(st.Ejected) > 0 {
			return fmt.Sprintf("ejected without failures: %+v", st)
		}
		return ""
	})

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
	// the clients' pickers follow the ACKed split: 50 RPCs in a row of
	// every client reach no backend without a share
	clean := map[*splitcheck.Load]int{} // RPCs since the last to a backend without a share
	testkit.Eventually(t, 10*time.Second, "plane two's clients send nothing to the ejected backend", func() (bool, string) {
		done, detail := true, ""
		for _, l := range loads[two] {
			ok, _ := l.Take()
			total, stray := 0, 0
			for a, n := range ok {
				total += n
				if want.Share[a] == 0 && n > 0 {
					stray += n
					detail += fmt.Sprintf("%s: %d RPCs to %s; ", l.Node, n, a)
				}
			}
			if clean[l] += total; stray > 0 {
				clean[l] = 0
			}
			done = done && clean[l] >= 50
		}
		return done, detail
	})
	// then a sample of the split: afterEjection RPCs of the clients
	got := splitcheck.Tally{By: map[string]int{}}
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d RPCs of plane two's clients", afterEjection), func() (bool, string) {
		for _, l := range loads[two] {
			ok, _ := l.Take()
			for a, n := range ok {
				got.By[a] += n
				got.Total += n
			}
		}
		return got.Total >= afterEjection, fmt.Sprintf("%d", got.Total)
	})
	splitcheck.CheckSplit(t, "clients of plane two after the ejection", got, want)

	// the failures end; the leader goes away: the decision stays
	bad.SetFailures(0)
	one.stop(t)
	stopped := time.Now()
	var handover time.Duration
	holds(t, time.Until(until.Add(-time.Second)), 50*time.Millisecond, "plane two keeps the ejection until a second before its end", func() string {
		rep, err := two.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := outlierEjected(rep.Upstreams[0], bad); !ok {
			return fmt.Sprintf("%v after the leader stopped (%v before the ejection's end), plane two no longer ejects the backend: %s",
				time.Since(stopped).Round(time.Millisecond), time.Until(until).Round(time.Millisecond), why)
		}
		if handover == 0 && two.leads() {
			handover = time.Since(stopped)
		}
		return ""
	})
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

// reportLoads opens an LRS stream over conn as node and, until the test
// ends, reports every period the given requests per endpoint of cluster
// ("address:port" → successes, errors), as a client does once an interval.
func reportLoads(t *testing.T, conn *grpc.ClientConn, node *core.Node, cluster string, loads map[string][2]uint64, period time.Duration) {
	t.Helper()
	stats := clusterStats(cluster, loads, 0)
	streamLoads(t, conn, node, stats, period, func() *endpointv3.ClusterStats { return stats })
}

// clusterStats is one report's stats for cluster: the requests per
// endpoint ("address:port" → successes, errors), over interval when it is
// set (load_report_interval, as Envoy and gRPC send it).
func clusterStats(cluster string, loads map[string][2]uint64, interval time.Duration) *endpointv3.ClusterStats {
	stats := &endpointv3.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{}}}
	if interval > 0 {
		stats.LoadReportInterval = durationpb.New(interval)
	}
	for _, hp := range slices.Sorted(maps.Keys(loads)) {
		host, port, _ := net.SplitHostPort(hp)
		p, _ := strconv.ParseUint(port, 10, 32)
		se := loads[hp]
		stats.UpstreamLocalityStats[0].UpstreamEndpointStats = append(stats.UpstreamLocalityStats[0].UpstreamEndpointStats, &endpointv3.UpstreamEndpointStats{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(p)}}}},
			TotalIssuedRequests: se[0] + se[1], TotalSuccessfulRequests: se[0], TotalErrorRequests: se[1]})
	}
	return stats
}

// openLoadStream opens an LRS stream over conn as node, sends first and
// waits for the server's answer. The stream ends with the test, or when
// cancel is called.
func openLoadStream(t *testing.T, conn *grpc.ClientConn, node *core.Node, first *endpointv3.ClusterStats) (
	ctx context.Context, cancel context.CancelFunc, stream lrs.LoadReportingService_StreamLoadStatsClient) {
	t.Helper()
	ctx, cancel = context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&lrs.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{first}}); err != nil {
		t.Fatalf("LRS as %s: %v", node.GetId(), err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("LRS as %s: %v", node.GetId(), err)
	}
	return ctx, cancel, stream
}

// streamLoads opens an LRS stream over conn as node (its first request
// carries first) and, until the test ends, sends next's stats every
// period; a nil from next sends nothing that period.
func streamLoads(t *testing.T, conn *grpc.ClientConn, node *core.Node, first *endpointv3.ClusterStats, period time.Duration, next func() *endpointv3.ClusterStats) {
	t.Helper()
	ctx, cancel, stream := openLoadStream(t, conn, node, first)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				stats := next()
				if stats == nil {
					continue
				}
				if err := stream.Send(&lrs.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{stats}}); err != nil {
					if ctx.Err() == nil {
						t.Errorf("LRS as %s: %v", node.GetId(), err)
					}
					return
				}
			}
		}
	}()
}

// sharedFailing is what each replica's share says of an endpoint of
// upstream: its failing reporters and their instance set, by replica.
func sharedFailing(t *testing.T, ns, upstream, address string, port uint32) map[string]outlier.EndpointSummary {
	t.Helper()
	shares := &shares.Store{Writer: k8s, Reader: k8s, Namespace: ns, Lease: "poise-status-writer"}
	list, err := shares.List(t.Context(), time.Now(), 5*time.Second, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outlier.EndpointSummary{}
	for _, s := range list {
		sh, err := outlier.DecodeShared(s.Payload)
		if err != nil {
			t.Fatalf("replica %s's share: %v", s.Replica, err)
		}
		for _, e := range sh.Upstreams[upstream].Endpoints {
			if e.Address == address && e.Port == port && e.Failing > 0 {
				out[s.Replica] = e
			}
		}
	}
	return out
}

// TestOneInstanceIsOneReporterAcrossReplicas: minReporters counts workload
// instances across replicas. Two replicas verify client certificates
// (mTLS); minReporters is 2. One certificate reports errors on endpoint x
// to both replicas under two node IDs: both replicas' shares carry its
// failures, whose sum would have reached minReporters, and nothing is
// ejected for a window and more. Then two other certificates of the same
// service account (two pods of a Deployment), one on each replica, report
// errors on endpoint y: y is ejected, on both replicas, and x still not.
func TestOneInstanceIsOneReporterAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ca := newTokenCA(t)
	od := &v1alpha1.OutlierDetection{ErrorPercent: new(int32(20)), MinRequestVolume: new(int32(100)), MinReporters: new(int32(2)),
		BaseEjectionTime: &metav1.Duration{Duration: 30 * time.Second}, MaxEjectionTime: &metav1.Duration{Duration: time.Minute}, MaxEjectionPercent: new(int32(50))}
	var eps []v1alpha1.Endpoint
	for i := range 4 {
		eps = append(eps, v1alpha1.Endpoint{Address: "127.0.0.1", Port: int32(20001 + i)})
	}
	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}, LoadReporting: &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: time.Second}},
			OutlierDetection: od}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "echo", Locality: v1alpha1.LocalityID{Zone: "a"}, Endpoints: eps}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	const bucket = 500 * time.Millisecond // a 3 s window, decided twice a second
	const window = 6 * bucket
	tune := func(name string) func(*controlplane.Config) {
		return func(c *controlplane.Config) {
			c.ReplicaName, c.LoadReportBucket = name, bucket
			c.TLS, c.XDSAuth = ca.mtls(), []string{controlplane.AuthMTLS}
		}
	}
	one := startPlaneWith(t, ns, "one", tune("one"))
	testkit.Eventually(t, 10*time.Second, "plane one leads", func() (bool, string) { return one.leads(), one.logs.tail(5) })
	two := startPlaneWith(t, ns, "two", tune("two"))

	cluster, upstream := ns+"/echo", ns+"/echo"
	hostPort := func(e v1alpha1.Endpoint) string { return net.JoinHostPort(e.Address, strconv.Itoa(int(e.Port))) }
	// 50 requests an interval on every endpoint; 30 of them fail on bad
	failingOn := func(bad v1alpha1.Endpoint) map[string][2]uint64 {
		m := map[string][2]uint64{}
		for _, e := range eps {
			m[hostPort(e)] = [2]uint64{50, 0}
		}
		m[hostPort(bad)] = [2]uint64{20, 30}
		return m
	}
	x, y := eps[0], eps[1]
	ejectedNow := func() []string {
		var out []string
		if st := outlierStatusOf(t, ns, "echo"); st != nil {
			for _, e := range st.Ejected {
				out = append(out, fmt.Sprintf("%s:%d (%s)", e.Address, e.Port, e.Origin))
			}
		}
		return out
	}

	// one certificate, two node IDs, two replicas
	a := ca.workloadCert(t, ns, "checkout")
	reportLoads(t, ca.dialCert(t, one.addrs.XDS, a), claims("checkout-a.on-one", ns, "checkout"), cluster, failingOn(x), bucket/2)
	reportLoads(t, ca.dialCert(t, two.addrs.XDS, a), claims("checkout-a.on-two", ns, "checkout"), cluster, failingOn(x), bucket/2)
	start := time.Now()
	testkit.Eventually(t, 15*time.Second, "both replicas share the certificate's failures on x", func() (bool, string) {
		got := sharedFailing(t, ns, upstream, x.Address, uint32(x.Port))
		var failing, requests, errs uint64
		for _, e := range got {
			failing += e.Failing
			requests += e.Requests
			errs += e.Errors
		}
		// the rule before instances were counted: the replicas' sum
		summed := failing >= 2 && requests >= 100 && errs*100 >= requests*20
		one, two := got["one"], got["two"]
		same := len(one.Instances) == 1 && slices.Equal(one.Instances, two.Instances)
		return summed && same, fmt.Sprintf("%+v", got)
	})
	t.Logf("both shares hold one instance failing on x %v after the reports began; the replicas' failing reporters add up to 2",
		time.Since(start).Round(time.Millisecond))
	// a window and four evaluations on that evidence: nothing is ejected
	holds(t, window+4*bucket, 100*time.Millisecond, "one certificate on two replicas ejects nothing", func() string {
		if got := ejectedNow(); len(got) > 0 {
			return fmt.Sprintf("ejected %v", got)
		}
		return ""
	})
	for _, p := range []*plane{one, two} {
		rep, err := p.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range rep.Upstreams {
			for _, pr := range u.Priorities {
				for _, l := range pr.Localities {
					for _, e := range l.Endpoints {
						if !e.Eligible {
							t.Fatalf("plane %s: %s:%d not eligible: %s (from %s)", p.name, e.Address, e.Port, e.Reason, e.ReasonFrom)
						}
					}
				}
			}
		}
	}

	// two certificates of one service account, one on each replica
	reportLoads(t, ca.dialCert(t, one.addrs.XDS, ca.workloadCert(t, ns, "checkout")), claims("checkout-b", ns, "checkout"), cluster, failingOn(y), bucket/2)
	reportLoads(t, ca.dialCert(t, two.addrs.XDS, ca.workloadCert(t, ns, "checkout")), claims("checkout-c", ns, "checkout"), cluster, failingOn(y), bucket/2)
	start = time.Now()
	testkit.Eventually(t, 15*time.Second, "y ejected", func() (bool, string) {
		st := outlierStatusOf(t, ns, "echo")
		return st != nil && len(st.Ejected) > 0, fmt.Sprint(ejectedNow())
	})
	took := time.Since(start)
	st := outlierStatusOf(t, ns, "echo")
	if len(st.Ejected) != 1 || st.Ejected[0].Port != y.Port {
		t.Fatalf("ejected %v, want y (port %d) alone", ejectedNow(), y.Port)
	}
	// y: a and b on plane one, a and c on plane two
	if o := st.Ejected[0].Origin; !strings.HasPrefix(o, "load reports: 4 clients, at least 2 failing, ") {
		t.Errorf("origin %q", o)
	}
	t.Logf("two certificates on two replicas: y ejected %v after their reports began: %s", took.Round(time.Millisecond), st.Ejected[0].Origin)
	for _, p := range []*plane{one, two} {
		p.waitExplain(t, ns, "echo", "plane "+p.name+" publishes y's ejection", func(u explain.Upstream) (bool, string) {
			for _, pr := range u.Priorities {
				for _, l := range pr.Localities {
					for _, e := range l.Endpoints {
						if e.Port == uint32(y.Port) {
							return !e.Eligible && e.Reason == "OutlierEjected", fmt.Sprintf("%+v", e)
						}
					}
				}
			}
			return false, "y not explained"
		})
	}
	// x, failing on both replicas all along, still is not
	holds(t, 4*bucket, 100*time.Millisecond, "y alone ejected", func() string {
		if got := ejectedNow(); len(got) != 1 {
			return fmt.Sprintf("ejected %v, want y alone", got)
		}
		return ""
	})
}
