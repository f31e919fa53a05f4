package kube_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/source/kube"
)

// affinityState is what a running plane serves for one importing Upstream:
// the snapshot as /debug/explain shows it, and the plane itself, whose xDS
// address (p.addrs.XDS) gives what a client of a zone receives once the
// publisher renders per client zone.
type affinityState struct {
	p        *plane
	report   explain.Report
	upstream explain.Upstream
}

// waitAffinity waits until the plane's snapshot gives the upstream the mode
// and origin wanted, with its imported endpoints in zones, and returns it.
func waitAffinity(t *testing.T, p *plane, ns, name, phase, mode, origin string, zones []string) affinityState {
	t.Helper()
	rep, took := p.waitExplain(t, ns, name, phase, func(u explain.Upstream) (bool, string) {
		var got []string
		for _, pr := range u.Priorities {
			for _, l := range pr.Localities {
				if len(l.Endpoints) > 0 {
					got = append(got, l.Region+"/"+l.Zone)
				}
			}
		}
		return u.Affinity.Mode == mode && u.Affinity.Origin == origin && slices.Equal(got, zones),
			fmt.Sprintf("affinity %+v, endpoints in %v; want %s from %q in %v", u.Affinity, got, mode, origin, zones)
	})
	t.Logf("%s: explain shows %s from %q after %v", phase, mode, origin, took.Round(time.Millisecond))
	return affinityState{p: p, report: rep, upstream: rep.Upstreams[0]}
}

// TestServiceTrafficDistribution: against a real apiserver, an Upstream
// importing a Service without spec.localityAffinity takes its mode from the
// Service's trafficDistribution, follows it as it changes, and says where it
// came from; an Upstream that sets None keeps None whatever the Service says.
func TestServiceTrafficDistribution(t *testing.T) {
	ns := namespace(t)
	b := importedBackends(2)
	for name, zone := range map[string]string{ns + "-a": "eu-west-a", ns + "-b": "eu-west-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelRegion: "eu-west", kube.LabelZone: zone}}}
		if err := k8s.Create(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(t.Context(), n) })
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "checkout-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
		Ports:               []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
		TrafficDistribution: ptr(corev1.ServiceTrafficDistributionPreferClose),
	}}
	imports := &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "checkout-svc", Port: intstr.FromString("grpc")}}
	objs := []client.Object{
		svc,
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol: v1alpha1.ProtocolGRPC, EndpointsFrom: imports,
		}},
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol: v1alpha1.ProtocolGRPC, EndpointsFrom: imports,
			LocalityAffinity: &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityNone},
		}},
		slice(ns, "checkout-svc", 0, b[0], discoveryv1.AddressTypeIPv4, ns+"-a", readyCond),
		slice(ns, "checkout-svc", 1, b[1], discoveryv1.AddressTypeIPv4, ns+"-b", readyCond),
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	p := startPlane(t, ns, "affinity")
	zones := []string{"eu-west/eu-west-a", "eu-west/eu-west-b"}
	from := func(td string) string { return "Service " + ns + "/checkout-svc trafficDistribution " + td }

	first := waitAffinity(t, p, ns, "checkout", "PreferClose", "PreferSameZone", from("PreferClose"), zones)
	waitAffinity(t, p, ns, "pinned", "explicit None beside PreferClose", "None", "spec.localityAffinity", zones)
	if n := len(first.upstream.Affinity.FailoverRegions); n != 0 {
		t.Errorf("a Service's preference names no failover regions: %+v", first.upstream.Affinity)
	}

	// each change of the field re-renders: a new revision whose origin names it
	prev := first.report.Revision
	for _, step := range []struct {
		td           *string
		mode, origin string
	}{
		{ptr(corev1.ServiceTrafficDistributionPreferSameNode), "PreferSameZone", from("PreferSameNode")},
		{ptr(corev1.ServiceTrafficDistributionPreferSameZone), "PreferSameZone", from("PreferSameZone")},
		{nil, "None", explain.AffinityDefault},
	} {
		phase := "trafficDistribution removed"
		if step.td != nil {
			phase = "trafficDistribution " + *step.td
		}
		base := svc.DeepCopy()
		svc.Spec.TrafficDistribution = step.td
		if err := k8s.Patch(t.Context(), svc, client.MergeFrom(base)); err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		st := waitAffinity(t, p, ns, "checkout", phase, step.mode, step.origin, zones)
		if st.report.Revision <= prev {
			t.Errorf("%s: revision %d, not after %d", phase, st.report.Revision, prev)
		}
		prev = st.report.Revision
		waitAffinity(t, p, ns, "pinned", phase+": pinned keeps None", "None", "spec.localityAffinity", zones)
	}
}
