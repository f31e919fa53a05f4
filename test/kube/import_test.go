package kube_test

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// importedBackends are addresses an EndpointSlice may carry (the apiserver
// refuses loopback ones) that nothing ever dials: TEST-NET-2, reserved for
// documentation. The suite reads what is published for them from the xDS
// server itself (a raw ADS stream on loopback) instead of sending RPCs.
func importedBackends(n int) []*splitcheck.Backend {
	var out []*splitcheck.Backend
	for i := range n {
		host := fmt.Sprintf("198.51.100.%d", 10+i)
		out = append(out, &splitcheck.Backend{Host: host, Port: 9090, Addr: net.JoinHostPort(host, "9090")})
	}
	return out
}

// slice is the EndpointSlice the endpointslice controller would write for
// one backend (one port per slice, since every backend listens on its own).
func slice(ns, svc string, i int, b *splitcheck.Backend, at discoveryv1.AddressType, node string, c discoveryv1.EndpointConditions) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc, i), Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "poise-test",
		}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(b.Port), Protocol: new(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{b.Host}, NodeName: new(node), Conditions: c}},
	}
}

var (
	readyCond      = discoveryv1.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)}
	drainingCond   = discoveryv1.EndpointConditions{Ready: new(false), Serving: new(true), Terminating: new(true)}
	notServingCond = discoveryv1.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(false)}
)

func resolvedRefs(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(u.Status.Conditions, conditions.ConditionResolvedRefs)
	if c != nil && c.ObservedGeneration != u.Generation {
		return nil
	}
	return c
}

// TestImportedService: an Upstream imports a Service's EndpointSlices; the
// node labels place each endpoint in its locality, the endpoint conditions
// become admin states, and the client follows.
// createEchoImport creates the objects of an imported Service: Nodes in
// eu-west-a and eu-west-b, Service echo-svc whose three slices place b0 and
// b1 in eu-west-a and b2 in eu-west-b (and a slice of another Service),
// Upstream echo importing it, and Locality eu-west-a of weight 3. It
// returns the backends.
func createEchoImport(t *testing.T, ns string) []*splitcheck.Backend {
	t.Helper()
	b := importedBackends(3)
	addrType := discoveryv1.AddressTypeIPv4

	nodes := map[string][2]string{ns + "-a": {"eu-west", "eu-west-a"}, ns + "-b": {"eu-west", "eu-west-b"}}
	for name, rz := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{source.LabelRegion: rz[0], source.LabelZone: rz[1]}}}
		if err := k8s.Create(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(t.Context(), n) })
	}
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
		}},
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol:      v1alpha1.ProtocolGRPC,
			EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "echo-svc", Port: intstr.FromString("grpc")}},
		}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-a", Namespace: ns}, Spec: v1alpha1.LocalitySpec{
			Upstream: "echo", Weight: new(int64(3)), LocalityID: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-a"},
		}},
		slice(ns, "echo-svc", 0, b[0], addrType, ns+"-a", readyCond),
		slice(ns, "echo-svc", 1, b[1], addrType, ns+"-a", readyCond),
		slice(ns, "echo-svc", 2, b[2], addrType, ns+"-b", readyCond),
		// a slice of another Service is not imported
		slice(ns, "unrelated", 0, b[2], addrType, ns+"-b", readyCond),
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	return b
}

func TestImportedService(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	b := createEchoImport(t, ns)
	p := startPlane(t, ns, "import")

	// placement: eu-west-a (weight 3) holds b0 and b1, eu-west-b (no
	// Locality object: weight 1) holds b2
	rep, took := p.waitExplain(t, ns, "echo", "three imported endpoints", func(u explain.Upstream) (bool, string) {
		n := 0
		for _, p := range u.Priorities {
			for _, l := range p.Localities {
				n += len(l.Endpoints)
			}
		}
		return n == 3, fmt.Sprintf("%d endpoints: %+v", n, u.Priorities)
	})
	t.Logf("5 import: explain shows the three imported endpoints %v after the plane was ready", took.Round(time.Millisecond))
	u := rep.Upstreams[0]
	if len(u.Priorities) != 1 || len(u.Priorities[0].Localities) != 2 {
		t.Fatalf("want priority 0 with two localities, got %+v", u.Priorities)
	}
	for i, want := range []struct {
		zone     string
		weight   uint64
		from     []string
		backends []*splitcheck.Backend
	}{
		{"eu-west-a", 3, []string{"Locality " + ns + "/eu-west-a"}, b[:2]},
		{"eu-west-b", 1, []string{}, b[2:]},
	} {
		l := u.Priorities[0].Localities[i]
		var got []string
		for _, ep := range l.Endpoints {
			got = append(got, net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port)))
			if wantFrom := "Service " + ns + "/" + source.ImportedSetName("echo", "echo-svc", "eu-west", want.zone); ep.From != wantFrom || ep.AdminState != "Ready" {
				t.Errorf("endpoint %s:%d: from %q admin %s, want from %q and Ready", ep.Address, ep.Port, ep.From, ep.AdminState, wantFrom)
			}
		}
		var wantAddrs []string
		for _, bk := range want.backends {
			wantAddrs = append(wantAddrs, bk.Addr)
		}
		slices.Sort(got)
		slices.Sort(wantAddrs)
		if l.Region != "eu-west" || l.Zone != want.zone || l.LocalityWeight != want.weight || !slices.Equal(l.LocalityFrom, want.from) || !slices.Equal(got, wantAddrs) {
			t.Errorf("locality %d: %s/%s weight %d from %v endpoints %v; want eu-west/%s weight %d from %v endpoints %v",
				i, l.Region, l.Zone, l.LocalityWeight, l.LocalityFrom, got, want.zone, want.weight, want.from, wantAddrs)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	prev := splitcheck.ExpectationOf(t, rep)
	waitPublished(t, p.addrs.XDS, ns+"/echo", "5a imported, all ready", prev)
	testkit.Eventually(t, 10*time.Second, "ResolvedRefs=True on echo", func() (bool, string) {
		c := resolvedRefs(t, ns, "echo")
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == conditions.ReasonResolved, fmt.Sprintf("%+v", c)
	})

	// the endpoint's conditions become its admin state
	for _, tc := range []struct {
		phase, admin string
		cond         discoveryv1.EndpointConditions
	}{
		{"5b ready=false serving=true terminating=true", "Draining", drainingCond},
		{"5c ready=false serving=false", "Unavailable", notServingCond},
		{"5d ready again", "Ready", readyCond},
	} {
		var sl discoveryv1.EndpointSlice
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "echo-svc-1"}, &sl); err != nil {
			t.Fatal(err)
		}
		sl.Endpoints[0].Conditions = tc.cond
		changed := time.Now()
		if err := k8s.Update(t.Context(), &sl); err != nil {
			t.Fatal(err)
		}
		rep, took := p.waitExplain(t, ns, "echo", tc.phase+": explain shows "+tc.admin, func(u explain.Upstream) (bool, string) {
			ep, ok := endpointOf(u, b[1])
			return ok && ep.AdminState == tc.admin && (tc.admin == "Ready") == (ep.Share > 0), fmt.Sprintf("%+v", ep)
		})
		cur := splitcheck.ExpectationOf(t, rep)
		waitPublished(t, p.addrs.XDS, ns+"/echo", tc.phase, cur)
		t.Logf("%s: explain shows %s %v, and the published EDS carries the new split %v after the EndpointSlice update",
			tc.phase, tc.admin, took.Round(time.Millisecond), time.Since(changed).Round(time.Millisecond))
		prev = cur
	}

	// an Upstream whose Service does not exist says so
	ghost := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
		EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "ghost-svc", Port: intstr.FromString("grpc")}},
	}}
	if err := k8s.Create(t.Context(), ghost); err != nil {
		t.Fatal(err)
	}
	took = testkit.Eventually(t, 10*time.Second, "ResolvedRefs=False ServiceNotFound on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonServiceNotFound, fmt.Sprintf("%+v", c)
	})
	t.Logf("5e missing Service: ResolvedRefs=False ServiceNotFound %v after the Upstream was created", took.Round(time.Millisecond))
	// a Service without the port, then with it
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ghost-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
	}}
	if err := k8s.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	took = testkit.Eventually(t, 5*time.Second, "ResolvedRefs=False PortNotFound on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonPortNotFound, fmt.Sprintf("%+v", c)
	})
	t.Logf("5f Service without the port: ResolvedRefs=False PortNotFound %v after the Service was created", took.Round(time.Millisecond))
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 81})
	if err := k8s.Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	took = testkit.Eventually(t, 5*time.Second, "ResolvedRefs=True on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	t.Logf("5g port added: ResolvedRefs=True %v after the Service update", took.Round(time.Millisecond))
}

// waitPublished reads the cluster's ClusterLoadAssignment as a proxyless gRPC
// node receives it (one locality per endpoint, weighted by its share) until
// it carries exactly the expected shares.
func waitPublished(t *testing.T, xdsAddr, cluster, phase string, want splitcheck.Expectation) {
	t.Helper()
	wantWeights := map[string]uint32{}
	for addr, s := range want.Share {
		if s > 0 {
			wantWeights[addr] = uint32(s)
		}
	}
	var got map[string]uint32
	testkit.Eventually(t, 10*time.Second, phase+": published EDS carries the computed shares", func() (bool, string) {
		got = fetchCLA(t, xdsAddr, cluster)
		return maps.Equal(got, wantWeights), fmt.Sprintf("published %v, computed %v", got, wantWeights)
	})
}

// fetchCLA asks the xDS server for one ClusterLoadAssignment as a gRPC node and
// returns each endpoint's locality weight.
func fetchCLA(t *testing.T, xdsAddr, cluster string) map[string]uint32 {
	t.Helper()
	node := &core.Node{Id: "import-reader", UserAgentName: "gRPC Go", ClientFeatures: []string{translate.FeatureNoOverprovisioning}}
	resources := fetchADS(t, xdsAddr, node, resource.EndpointType, cluster)
	out := map[string]uint32{}
	for _, a := range resources {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		for _, lle := range cla.GetEndpoints() {
			if lle.GetPriority() != 0 {
				continue // standby
			}
			for _, ep := range lle.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				out[net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))] = lle.GetLoadBalancingWeight().GetValue()
			}
		}
	}
	return out
}
