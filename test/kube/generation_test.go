package kube_test

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/test/testkit"
)

// lrsReporter reports load over an LRS stream every period, each report
// covering the interval since the previous one (load_report_interval set,
// as Envoy and gRPC set it), with the loads set last ("address:port" →
// successes, errors); no loads sends nothing.
type lrsReporter struct {
	mu    sync.Mutex
	loads map[string][2]uint64
}

func (r *lrsReporter) set(loads map[string][2]uint64) {
	r.mu.Lock()
	r.loads = loads
	r.mu.Unlock()
}

// plainConn is a plaintext connection to xdsAddr, closed when the test ends.
func plainConn(t *testing.T, xdsAddr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// report starts reporting every period as node until the test ends.
func (r *lrsReporter) report(t *testing.T, xdsAddr, node, cluster string, period time.Duration) {
	t.Helper()
	streamLoads(t, plainConn(t, xdsAddr), &core.Node{Id: node}, &endpointv3.ClusterStats{ClusterName: cluster}, period, func() *endpointv3.ClusterStats {
		r.mu.Lock()
		loads := r.loads
		r.mu.Unlock()
		if len(loads) == 0 {
			return nil
		}
		return clusterStats(cluster, loads, period)
	})
}

// podSlice is the EndpointSlice of Service svc with one ready endpoint per
// address, each pointing at its Pod (name, uid).
func podSlice(ns, svc string, port int32, pods []podAt) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-0", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "poise-test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(port), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.ip}, Conditions: readyCond,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.name, UID: types.UID(p.uid)}})
	}
	return s
}

type podAt struct{ ip, name, uid string }

// explainedAt is the explained endpoint at ip.
func explainedAt(u explain.Upstream, ip string) (explain.Endpoint, bool) {
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, e := range l.Endpoints {
				if e.Address == ip {
					return e, true
				}
			}
		}
	}
	return explain.Endpoint{}, false
}

// TestNewPodAtReusedIPStartsClean: endpoints imported from a Service's
// EndpointSlices are named by their Pod (hashKeyFrom: PodName, published as
// the envoy.lb hash_key) and their generation is the Pod's uid. Three
// clients' load reports (LRS) eject the Pod at X. The Pod is replaced by a
// new one at the same IP (a new targetRef uid): in the very snapshot that
// carries the new generation, X is eligible; the leader withdraws the old
// Pod's ejection; late reports whose interval began before the change
// (heavy errors on X) are dropped, not counted, and eject nothing; and when
// the new Pod fails on its own, it is ejected as a first ejection (count 1),
// the old Pod's count not carried over.
func TestNewPodAtReusedIPStartsClean(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	const port = 9090
	pods := []podAt{
		{"198.51.100.20", "db-0", "uid-db-0-a"},
		{"198.51.100.21", "db-1", "uid-db-1-a"},
		{"198.51.100.22", "db-2", "uid-db-2-a"},
		{"198.51.100.23", "db-3", "uid-db-3-a"},
	}
	x := pods[0]
	base := 2 * time.Minute // no ejection ends while the test runs
	od := &v1alpha1.OutlierDetection{ErrorPercent: new(int32(20)), MinRequestVolume: new(int32(100)), MinReporters: new(int32(2)),
		BaseEjectionTime: &metav1.Duration{Duration: base}, MaxEjectionTime: &metav1.Duration{Duration: 10 * time.Minute}, MaxEjectionPercent: new(int32(25))}
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
		}},
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol: v1alpha1.ProtocolGRPC,
			EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "db", Port: intstr.FromString("grpc")},
				HashKeyFrom: v1alpha1.HashKeyFromPodName},
			LoadReporting:    &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: time.Second}},
			OutlierDetection: od,
		}},
		podSlice(ns, "db", port, pods),
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	const bucket = 500 * time.Millisecond // a 3 s window, decided twice a second
	const window = 6 * bucket
	p := startPlaneWith(t, ns, "one", func(c *controlplane.Config) { c.ReplicaName, c.LoadReportBucket = "one", bucket })
	testkit.Eventually(t, 10*time.Second, "the plane leads", func() (bool, string) { return p.leads(), p.logs.tail(5) })
	cluster := ns + "/db"
	hp := func(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

	// the published EDS names each endpoint by its Pod
	testkit.Eventually(t, 10*time.Second, "EDS carries each Pod's name as its hash_key", func() (bool, string) {
		node := &core.Node{Id: "hash-key-reader", UserAgentName: "gRPC Go", ClientFeatures: []string{translate.FeatureNoOverprovisioning}}
		keys := map[string]string{}
		for _, a := range fetchADS(t, p.addrs.XDS, node, resource.EndpointType, cluster) {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, lle := range cla.GetEndpoints() {
				for _, ep := range lle.GetLbEndpoints() {
					key := ep.GetMetadata().GetFilterMetadata()[translate.HashKeyFilter].GetFields()[translate.HashKeyField].GetStringValue()
					keys[ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = key
				}
			}
		}
		for _, pod := range pods {
			if keys[pod.ip] != pod.name {
				return false, fmt.Sprint(keys)
			}
		}
		return true, ""
	})

	// three clients: 50 requests an interval on every endpoint, 30 of them
	// failing on X
	failingOnX := map[string][2]uint64{}
	for _, pod := range pods {
		failingOnX[hp(pod.ip)] = [2]uint64{50, 0}
	}
	failingOnX[hp(x.ip)] = [2]uint64{20, 30}
	healthy := maps.Clone(failingOnX)
	healthy[hp(x.ip)] = [2]uint64{50, 0}
	var reporters []*lrsReporter
	for i := range 3 {
		r := &lrsReporter{}
		r.set(failingOnX)
		r.report(t, p.addrs.XDS, fmt.Sprintf("client-%d", i), cluster, bucket/2)
		reporters = append(reporters, r)
	}
	p.waitExplain(t, ns, "db", "the Pod at X ejected", func(u explain.Upstream) (bool, string) {
		e, ok := explainedAt(u, x.ip)
		return ok && e.Reason == "OutlierEjected" && e.Generation == x.uid && e.HashKey == x.name, fmt.Sprintf("%+v", e)
	})
	testkit.Eventually(t, 10*time.Second, "status names the old Pod's generation", func() (bool, string) {
		st := outlierStatusOf(t, ns, "db")
		return st != nil && len(st.Ejected) == 1 && st.Ejected[0].Generation == x.uid && st.Ejected[0].Count == 1, fmt.Sprintf("%+v", st)
	})

	// the clients stop failing on X; the window still holds the failures.
	// The Pod is replaced by a new one at the same IP.
	for _, r := range reporters {
		r.set(healthy)
	}
	replaced := slices.Clone(pods)
	replaced[0].uid = "uid-db-0-b"
	var sl discoveryv1.EndpointSlice
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "db-0"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = podSlice(ns, "db", port, replaced).Endpoints
	if err := k8s.Update(t.Context(), &sl); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	// the first snapshot with the new generation has X eligible
	p.waitExplain(t, ns, "db", "the new Pod's generation published", func(u explain.Upstream) (bool, string) {
		e, ok := explainedAt(u, x.ip)
		if ok && e.Generation == replaced[0].uid && !e.Eligible {
			t.Fatalf("the new Pod at X is not eligible in the snapshot that carries it: %+v", e)
		}
		return ok && e.Generation == replaced[0].uid, fmt.Sprintf("%+v", e)
	})
	t.Logf("the new Pod at X eligible %v after the EndpointSlice update", time.Since(changed).Round(time.Millisecond))
	testkit.Eventually(t, 10*time.Second, "the old Pod's ejection withdrawn from status", func() (bool, string) {
		st := outlierStatusOf(t, ns, "db")
		return st == nil || len(st.Ejected) == 0, fmt.Sprintf("%+v", st)
	})

	// late reports: three clients report an interval that began before the
	// change, with heavy errors on X
	var loads admin.Loads
	if err := testkit.GetJSON(p.adminURL+"/debug/loads?cluster="+cluster, &loads); err != nil {
		t.Fatal(err)
	}
	droppedBefore := loads.Drops.OldGeneration
	lateInterval := time.Since(changed) + 10*time.Second
	for i := range 3 {
		node := &core.Node{Id: fmt.Sprintf("late-client-%d", i)}
		_, _, s := openLoadStream(t, plainConn(t, p.addrs.XDS), node, &endpointv3.ClusterStats{ClusterName: cluster})
		if err := s.Send(&lrs.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{clusterStats(cluster, map[string][2]uint64{hp(x.ip): {0, 500}}, lateInterval)}}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the late reports dropped as the old generation's", func() (bool, string) {
		if err := testkit.GetJSON(p.adminURL+"/debug/loads?cluster="+cluster, &loads); err != nil {
			return false, err.Error()
		}
		return loads.Drops.OldGeneration >= droppedBefore+3, fmt.Sprintf("%+v", loads.Drops)
	})
	for _, e := range loads.Endpoints {
		if e.Address == x.ip {
			if e.Generation != replaced[0].uid || e.GenerationSince == nil || e.GenerationSince.Before(changed.Add(-time.Second)) || e.Errors != 0 {
				t.Errorf("/debug/loads of X: %+v, want the new generation, begun at the change, with no errors", e)
			}
		}
	}
	holds(t, window+4*bucket, 100*time.Millisecond, "neither the old window nor the late reports eject the new Pod", func() string {
		rep, err := p.explainOf(ns, "db")
		if err != nil {
			return err.Error()
		}
		if e, _ := explainedAt(rep.Upstreams[0], x.ip); !e.Eligible {
			return fmt.Sprintf("X not eligible: %+v", e)
		}
		if st := outlierStatusOf(t, ns, "db"); st != nil && len(st.Ejected) > 0 {
			return fmt.Sprintf("ejected: %+v", st)
		}
		return ""
	})

	// the new Pod fails on its own: a first ejection
	for _, r := range reporters {
		r.set(failingOnX)
	}
	ejectedAt := time.Now()
	testkit.Eventually(t, 15*time.Second, "the new Pod ejected on its own evidence", func() (bool, string) {
		st := outlierStatusOf(t, ns, "db")
		return st != nil && len(st.Ejected) == 1, fmt.Sprintf("%+v", st)
	})
	st := outlierStatusOf(t, ns, "db")
	e := st.Ejected[0]
	if e.Address != x.ip || e.Generation != replaced[0].uid || e.Count != 1 || e.Until.Time.After(time.Now().Add(base+time.Second)) || e.Until.Time.Before(ejectedAt.Add(base-2*time.Second)) {
		t.Errorf("ejection %+v, want the new generation's first (count 1, until about %v from now)", e, base)
	}
}
