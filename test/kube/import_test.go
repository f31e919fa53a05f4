package kube_test

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/source/kube"
)

// hostIP is an address of this machine that an EndpointSlice may carry: the
// apiserver refuses loopback, link-local and unspecified endpoint addresses.
func hostIP(t *testing.T) (string, discoveryv1.AddressType) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP.String(), discoveryv1.AddressTypeIPv4
		}
		if v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	if v6 != "" {
		return v6, discoveryv1.AddressTypeIPv6
	}
	t.Skip("this machine has no non-loopback unicast address, and EndpointSlices may not carry loopback ones; the import suite needs one")
	return "", ""
}

// slice is the EndpointSlice the endpointslice controller would write for
// one backend (one port per slice, since every backend listens on its own).
func slice(ns, svc string, i int, b *backend, at discoveryv1.AddressType, node string, c discoveryv1.EndpointConditions) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc, i), Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "poise-test",
		}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(b.port), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{b.host}, NodeName: ptr(node), Conditions: c}},
	}
}

var (
	readyCond      = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	drainingCond   = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	notServingCond = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
)

func resolvedRefs(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(u.Status.Conditions, kube.ConditionResolvedRefs)
	if c != nil && c.ObservedGeneration != u.Generation {
		return nil
	}
	return c
}

// TestImportedService: an Upstream imports a Service's EndpointSlices; the
// node labels place each endpoint in its locality, the endpoint conditions
// become admin states, and the client follows.
func TestImportedService(t *testing.T) {
	ns := namespace(t)
	host, addrType := hostIP(t)
	b := startBackends(t, host, 3)

	nodes := map[string][2]string{ns + "-a": {"eu-west", "eu-west-a"}, ns + "-b": {"eu-west", "eu-west-b"}}
	for name, rz := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelRegion: rz[0], kube.LabelZone: rz[1]}}}
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
			Upstream: "echo", Weight: ptr(int64(3)), LocalityID: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-a"},
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
	p := startPlane(t, ns, "import")
	const node = "import-client"
	conn := newXDSClient(t, p.addrs.XDS, node, "echo."+ns)

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
		backends []*backend
	}{
		{"eu-west-a", 3, []string{"Locality " + ns + "/eu-west-a"}, b[:2]},
		{"eu-west-b", 1, []string{}, b[2:]},
	} {
		l := u.Priorities[0].Localities[i]
		var got []string
		for _, ep := range l.Endpoints {
			got = append(got, net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port)))
			if wantFrom := "Service " + ns + "/" + kube.ImportedSetName("echo", "echo-svc", "eu-west", want.zone); ep.From != wantFrom || ep.AdminState != "Ready" {
				t.Errorf("endpoint %s:%d: from %q admin %s, want from %q and Ready", ep.Address, ep.Port, ep.From, ep.AdminState, wantFrom)
			}
		}
		var wantAddrs []string
		for _, bk := range want.backends {
			wantAddrs = append(wantAddrs, bk.addr)
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
	p.waitAcked(t, node, rep.Revision)
	prev := expectationOf(rep)
	measure(t, "5a imported, all ready", conn, prev)
	eventually(t, 10*time.Second, "ResolvedRefs=True on echo", func() (bool, string) {
		c := resolvedRefs(t, ns, "echo")
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kube.ReasonResolved, fmt.Sprintf("%+v", c)
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
		cur := expectationOf(rep)
		if sameShares(prev, cur) {
			// Draining and Unavailable endpoints are both left out of EDS:
			// the assignment is byte-for-byte the same, so nothing new is sent
			t.Logf("%s: explain shows %s %v after the EndpointSlice update; the split (and EDS) is unchanged", tc.phase, tc.admin, took.Round(time.Millisecond))
		} else {
			p.waitAcked(t, node, rep.Revision)
			t.Logf("%s: explain shows %s %v, the client ACKed revision %d %v after the EndpointSlice update",
				tc.phase, tc.admin, took.Round(time.Millisecond), rep.Revision, time.Since(changed).Round(time.Millisecond))
		}
		measure(t, tc.phase, conn, cur)
		prev = cur
	}

	// an Upstream whose Service does not exist says so
	ghost := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
		EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "ghost-svc", Port: intstr.FromString("grpc")}},
	}}
	if err := k8s.Create(t.Context(), ghost); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 10*time.Second, "ResolvedRefs=False ServiceNotFound on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kube.ReasonServiceNotFound, fmt.Sprintf("%+v", c)
	})
	t.Logf("5e missing Service: ResolvedRefs=False ServiceNotFound %v after the Upstream was created", took.Round(time.Millisecond))
	// a Service without the port, then with it
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ghost-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
	}}
	if err := k8s.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 5*time.Second, "ResolvedRefs=False PortNotFound on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kube.ReasonPortNotFound, fmt.Sprintf("%+v", c)
	})
	t.Logf("5f Service without the port: ResolvedRefs=False PortNotFound %v after the Service was created", took.Round(time.Millisecond))
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 81})
	if err := k8s.Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 5*time.Second, "ResolvedRefs=True on ghost", func() (bool, string) {
		c := resolvedRefs(t, ns, "ghost")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	t.Logf("5g port added: ResolvedRefs=True %v after the Service update", took.Round(time.Millisecond))
}
