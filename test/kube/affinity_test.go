package kube_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/testkit"
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
// Over xDS, while the Service prefers close, an Envoy of each zone is sent its
// own zone alone at priority 0 (what explain says its class receives) and one
// naming no locality every zone; once the preference is removed every client
// is sent the same.
func TestServiceTrafficDistribution(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	b := importedBackends(2)
	for name, zone := range map[string]string{ns + "-a": "eu-west-a", ns + "-b": "eu-west-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{source.LabelRegion: "eu-west", source.LabelZone: zone}}}
		if err := k8s.Create(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(t.Context(), n) })
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "checkout-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
		Ports:               []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
		TrafficDistribution: new(corev1.ServiceTrafficDistributionPreferClose),
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

	// Envoy clients of each zone and one naming no locality, each on one
	// stream held for the rest of the test: the first client of a zone
	// creates its class, whose variant then reaches it as an update.
	clients := servedClients{plain: watchEDS(t, p.addrs.XDS, &core.Node{Id: "envoy-nowhere", Cluster: "affinity", UserAgentName: "envoy"},
		ns+"/checkout", ns+"/pinned")}
	for _, z := range zones {
		region, zone, _ := strings.Cut(z, "/")
		clients.zoned = append(clients.zoned, watchEDS(t, p.addrs.XDS, &core.Node{Id: "envoy-" + zone, Cluster: "affinity", UserAgentName: "envoy",
			Locality: &core.Locality{Region: region, Zone: zone}}, ns+"/checkout", ns+"/pinned"))
	}
	start := time.Now()
	checkServed(t, p, ns, "PreferClose", "PreferSameZone", zones, clients)
	t.Logf("PreferClose: each zone's client holds its own zone's split %v after connecting, after %d and %d responses (the first may be the base)",
		time.Since(start).Round(time.Millisecond), clients.zoned[0].received(), clients.zoned[1].received())
	inA, inB, none := clients.zoned[0].last(ns+"/checkout"), clients.zoned[1].last(ns+"/checkout"), clients.plain.last(ns+"/checkout")
	if proto.Equal(inA, inB) || proto.Equal(inA, none) || proto.Equal(inB, none) {
		t.Errorf("PreferClose: the zones' and the no-locality client's ClusterLoadAssignments are not all different:\n%s: %s\n%s: %s\nno locality: %s",
			zones[0], describeCLA(inA), zones[1], describeCLA(inB), describeCLA(none))
	}

	// status.clientZones says what each zone's clients keep local, and an
	// Upstream without affinity says nothing
	waitClientZones(t, ns, "checkout", "PreferClose", []v1alpha1.ClientZoneStatus{
		{Zone: zones[0], LocalMillionths: 1_000_000}, {Zone: zones[1], LocalMillionths: 1_000_000}})
	waitClientZones(t, ns, "pinned", "PreferClose: pinned", nil)

	// each change of the field re-renders: a new revision whose origin names it
	prev := first.report.Revision
	for _, step := range []struct {
		td           *string
		mode, origin string
	}{
		{new(corev1.ServiceTrafficDistributionPreferSameNode), "PreferSameZone", from("PreferSameNode")},
		{new(corev1.ServiceTrafficDistributionPreferSameZone), "PreferSameZone", from("PreferSameZone")},
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
		checkServed(t, p, ns, phase, step.mode, zones, clients)
	}
	waitClientZones(t, ns, "checkout", "trafficDistribution removed", nil)
}

// waitClientZones waits until Upstream ns/name's status.clientZones is want.
func waitClientZones(t *testing.T, ns, name, phase string, want []v1alpha1.ClientZoneStatus) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, phase+": status.clientZones of "+name, func() (bool, string) {
		var u v1alpha1.Upstream
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
			return false, err.Error()
		}
		got := u.Status.ClientZones
		return slices.Equal(got, want) && u.Status.MoreClientZones == 0, fmt.Sprintf("%+v (%d more), want %+v", got, u.Status.MoreClientZones, want)
	})
}

// servedClients are the xDS clients of TestServiceTrafficDistribution:
// zoned[i] is in zones[i], plain names no locality.
type servedClients struct {
	plain *edsStream
	zoned []*edsStream
}

// checkServed waits until every client holds what the upstream "checkout"
// in mode gives its class, and what /debug/explain?from= says that class
// receives: under PreferSameZone a zoned client's priority 0 is its own zone
// alone (the other kept as a standby priority), under None the no-locality
// client's assignment; the no-locality client has every zone at priority 0.
// "pinned" (None) is the same for every client.
func checkServed(t *testing.T, p *plane, ns, phase, mode string, zones []string, c servedClients) {
	t.Helper()
	const within = 15 * time.Second
	checkout, pinned := ns+"/checkout", ns+"/pinned"
	base := c.plain.waitFor(t, within, phase+": every zone at priority 0, as explain says", checkout, func(cla *endpointv3.ClusterLoadAssignment) (bool, string) {
		p0 := priorityZero(cla)
		if !slices.Equal(slices.Sorted(maps.Keys(p0)), zones) || sumWeights(p0) != 1_000_000 {
			return false, fmt.Sprintf("want priority 0 %v weighing 1000000 in all", zones)
		}
		return matchesExplain(p, ns, "checkout", "", p0)
	})
	for i, w := range c.zoned {
		zone := zones[i]
		what := phase + ": priority 0 only " + zone + ", as explain says"
		if mode == "None" {
			what = phase + ": what the no-locality client receives, as explain says"
		}
		w.waitFor(t, within, what, checkout, func(cla *endpointv3.ClusterLoadAssignment) (bool, string) {
			p0 := priorityZero(cla)
			switch mode {
			case "PreferSameZone":
				if len(p0) != 1 || p0[zone] != 1_000_000 {
					return false, fmt.Sprintf("want priority 0 %s=1000000 alone", zone)
				}
				if standby := standbyZones(cla); !slices.Equal(standby, otherZones(zones, zone)) {
					return false, fmt.Sprintf("standby priorities hold %v, want %v", standby, otherZones(zones, zone))
				}
			case "None":
				if !proto.Equal(cla, base) {
					return false, "want the no-locality client's " + describeCLA(base)
				}
			default:
				t.Fatalf("checkServed: no expectation for mode %s", mode)
			}
			return matchesExplain(p, ns, "checkout", zone, p0)
		})
		w.waitFor(t, within, phase+": pinned is the no-locality client's", pinned, func(cla *endpointv3.ClusterLoadAssignment) (bool, string) {
			none := c.plain.last(pinned)
			if none == nil {
				return false, "the no-locality client holds no " + pinned
			}
			return proto.Equal(cla, none), "the no-locality client holds " + describeCLA(none)
		})
	}
}

// matchesExplain says whether a client's priority 0 is what
// /debug/explain?from=from (none: the upstream's own split) says the clients
// of that locality receive: each locality with traffic, weighted by it.
func matchesExplain(p *plane, ns, name, from string, p0 map[string]uint32) (bool, string) {
	url := p.adminURL + "/debug/explain?upstream=" + ns + "/" + name
	if from != "" {
		url += "&from=" + from
	}
	var rep explain.Report
	if err := testkit.GetJSON(url, &rep); err != nil {
		return false, err.Error()
	}
	if len(rep.Upstreams) != 1 {
		return false, fmt.Sprintf("explain %s: %d upstreams", url, len(rep.Upstreams))
	}
	u := rep.Upstreams[0]
	split := u.Split
	if u.Class != nil && !u.Class.ReceivesNone && u.Class.Split != nil {
		split = *u.Class.Split
	}
	want := map[string]uint32{}
	for _, pr := range split.Priorities {
		for _, l := range pr.Localities {
			if l.Traffic > 0 {
				want[localityKey(l.Region, l.Zone, l.SubZone)] = uint32(l.Traffic)
			}
		}
	}
	return maps.Equal(p0, want), fmt.Sprintf("explain (revision %d, from %q) gives priority 0 %v", rep.Revision, from, want)
}

func sumWeights(m map[string]uint32) (sum uint64) {
	for _, w := range m {
		sum += uint64(w)
	}
	return sum
}

// standbyZones lists, sorted, the localities of the priorities after 0.
func standbyZones(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, lle := range cla.GetEndpoints() {
		if l := lle.GetLocality(); lle.GetPriority() > 0 {
			out = append(out, localityKey(l.GetRegion(), l.GetZone(), l.GetSubZone()))
		}
	}
	slices.Sort(out)
	return out
}

func otherZones(zones []string, zone string) []string {
	return slices.DeleteFunc(slices.Clone(zones), func(z string) bool { return z == zone })
}
