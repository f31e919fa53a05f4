package kube_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/testkit"
)

// podOn is another pod of w's service account, on node.
func podOn(t *testing.T, w *workload, name, node string) *workload {
	t.Helper()
	pod, err := w.cs.CoreV1().Pods(w.ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: w.sa, NodeName: node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &workload{cs: w.cs, ns: w.ns, sa: w.sa, node: node, pod: name, podUID: string(pod.UID)}
}

// zonedNode is a node labelled with a region and a zone, deleted with the test.
func zonedNode(t *testing.T, name, region, zone string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{source.LabelRegion: region, source.LabelZone: zone}}}
	if err := k8s.Create(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
}

// zoneClaim is an Envoy node of w's namespace and service account that
// claims zone eu-west/zone and, when demand is set, a demand weight.
func zoneClaim(id, ns, sa, zone string, demand float64) *core.Node {
	n := claims(id, ns, sa)
	n.Locality = &core.Locality{Region: "eu-west", Zone: zone}
	if demand > 0 {
		n.Metadata.Fields["poise.dev/demand-weight"] = structpb.NewNumberValue(demand)
	}
	return n
}

// zoneDemand is the demand of each zone /debug/explain?from= uses for the
// class of from in a Balanced upstream.
func zoneDemand(p *plane, ns, name, from string) (map[string]uint64, error) {
	var rep explain.Report
	if err := testkit.GetJSON(p.adminURL+"/debug/explain?upstream="+ns+"/"+name+"&from="+from, &rep); err != nil {
		return nil, err
	}
	if len(rep.Upstreams) != 1 || rep.Upstreams[0].Class == nil || rep.Upstreams[0].Class.Balanced == nil {
		return nil, fmt.Errorf("no Balanced class from %s in %+v", from, rep.Upstreams)
	}
	out := map[string]uint64{}
	for _, z := range rep.Upstreams[0].Class.Balanced.Zones {
		if z.Demand > 0 {
			out[z.Region+"/"+z.Zone] = z.Demand
		}
	}
	return out, nil
}

// TestTokenPlacesForgedZone: against a real apiserver, with --xds-auth=token
// over TLS and a Balanced upstream of two equal zones, a client whose
// pod-bound token names a pod on a node of zone a while its node claims zone
// b with poise.dev/demand-weight 1000000 is placed in zone a: it receives
// zone a's class, its demand counts there (at the 1 its identity is
// granted), /debug/clients shows the placed zone beside the claimed one, and
// the ClusterLoadAssignment the honest client of zone b receives is the
// same, to the unit, as before the forger connected. A token bound to no
// pod proves no locality: its node's claim stands, as docs/security.md says.
func TestTokenPlacesForgedZone(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	zoneA, zoneB := "eu-west/eu-west-a", "eu-west/eu-west-b"
	nodeA, nodeB := ns+"-a", ns+"-b"
	zonedNode(t, nodeA, "eu-west", "eu-west-a")
	zonedNode(t, nodeB, "eu-west", "eu-west-b")
	b := importedBackends(2)
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "checkout-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}}}},
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol:         v1alpha1.ProtocolGRPC,
			EndpointsFrom:    &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "checkout-svc", Port: intstr.FromString("grpc")}},
			LocalityAffinity: &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityBalanced},
		}},
		slice(ns, "checkout-svc", 0, b[0], discoveryv1.AddressTypeIPv4, nodeA, readyCond),
		slice(ns, "checkout-svc", 1, b[1], discoveryv1.AddressTypeIPv4, nodeB, readyCond),
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	w := newWorkload(t, ns)
	honestA, honestB, forger := podOn(t, w, "honest-a", nodeA), podOn(t, w, "honest-b", nodeB), podOn(t, w, "forger", nodeA)
	ca := newTokenCA(t)
	p := startPlaneWith(t, ns, "placed", func(c *controlplane.Config) {
		c.TLS = ca.files
		c.XDSAuth = []string{controlplane.AuthToken}
		c.XDSTokenAudience = "poise"
	})
	waitAffinity(t, p, ns, "checkout", "Balanced", "Balanced", "spec.localityAffinity", []string{zoneA, zoneB})
	cluster := ns + "/checkout"
	const within = 20 * time.Second
	split := func(want map[string]uint32, from string) func(*endpointv3.ClusterLoadAssignment) (bool, string) {
		return func(cla *endpointv3.ClusterLoadAssignment) (bool, string) {
			if p0 := priorityZero(cla); !maps.Equal(p0, want) {
				return false, fmt.Sprintf("want priority 0 %v", want)
			}
			return matchesExplain(p, ns, "checkout", from, priorityZero(cla))
		}
	}
	watch := func(pod *workload, node *core.Node) *edsStream {
		return watchEDSOn(t, ca.dialToken(t, p.addrs.XDS, pod.token(t, "poise")), node, cluster)
	}

	// one honest client in each zone: D = 2, each zone's supply 500000 ×
	// 2 covers its demand 1 × 1000000, so each keeps everything local
	inA := watch(honestA, zoneClaim("honest-a", ns, w.sa, "eu-west-a", 0))
	inB := watch(honestB, zoneClaim("honest-b", ns, w.sa, "eu-west-b", 0))
	inA.waitFor(t, within, "zone a keeps everything local", cluster, split(map[string]uint32{zoneA: 1_000_000}, zoneA))
	before := inB.waitFor(t, within, "zone b keeps everything local", cluster, split(map[string]uint32{zoneB: 1_000_000}, zoneB))
	t.Logf("without the forger, zone b's client receives %s", describeCLA(before))

	// the forger: its pod is on a node of zone a, its node claims zone b
	// and a demand of 1000000
	start := time.Now()
	forged := watch(forger, zoneClaim("forger", ns, w.sa, "eu-west-b", 1_000_000))
	// counted in zone a at 1: D = 3, zone a's 500000 × 3 no longer covers
	// its demand 2 × 1000000, so its clients send a quarter to zone b
	spilled := map[string]uint32{zoneA: 750_000, zoneB: 250_000}
	inA.waitFor(t, within, "zone a's clients spill a quarter once the forger counts there", cluster, split(spilled, zoneA))
	t.Logf("the forger's demand counted in zone a %v after it connected", time.Since(start).Round(time.Millisecond))
	forged.waitFor(t, within, "the forger receives zone a's class", cluster, split(spilled, zoneA))
	if d, err := zoneDemand(p, ns, "checkout", zoneB); err != nil || !maps.Equal(d, map[string]uint64{zoneA: 2, zoneB: 1}) {
		t.Errorf("explain's demand by zone %v (%v), want %s 2, %s 1", d, err, zoneA, zoneB)
	}
	after := inB.last(cluster)
	if !proto.Equal(after, before) {
		t.Errorf("zone b's client receives %s with the forger, %s without: want the same to the unit", describeCLA(after), describeCLA(before))
	}
	if ok, detail := matchesExplain(p, ns, "checkout", zoneB, priorityZero(after)); !ok {
		t.Errorf("zone b's client's split is not explain's: %s", detail)
	}

	clients, err := p.clients()
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, c := range clients {
		if c.NodeID != "forger" {
			continue
		}
		seen = true
		if c.Zone != zoneA || c.ZoneFrom != server.ZoneFromIdentity || c.ClaimedZone != zoneB || c.Class != zoneA ||
			c.DemandWeight != 1 || !strings.Contains(c.DemandNote, "capped at 1") || c.Identity == nil || c.Identity.Node != nodeA {
			t.Errorf("/debug/clients for the forger: zone %q from %q, claimed %q, class %q, demand %d (%q), identity %+v; "+
				"want %s from identity (node %s), claimed %s, demand 1 capped", c.Zone, c.ZoneFrom, c.ClaimedZone, c.Class,
				c.DemandWeight, c.DemandNote, c.Identity, zoneA, nodeA, zoneB)
		}
		t.Logf("/debug/clients for the forger: zone %s (from %s), claimedZone %s, class %s, demand %d: %s", c.Zone, c.ZoneFrom, c.ClaimedZone, c.Class, c.DemandWeight, c.DemandNote)
	}
	if !seen {
		t.Fatal("/debug/clients lists no forger")
	}

	// a token bound to no pod proves no locality: the claim of zone b
	// stands, and counts there (at 1): D = 4, both zones covered again
	tr, err := w.cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), w.sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"poise"}, ExpirationSeconds: new(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound := watchEDSOn(t, ca.dialToken(t, p.addrs.XDS, tr.Status.Token), zoneClaim("unbound", ns, w.sa, "eu-west-b", 0), cluster)
	unbound.waitFor(t, within, "a client of no pod is classed by its claim", cluster, split(map[string]uint32{zoneB: 1_000_000}, zoneB))
	inA.waitFor(t, within, "zone a keeps everything local again", cluster, split(map[string]uint32{zoneA: 1_000_000}, zoneA))
	testkit.Eventually(t, within, "/debug/clients classes the unbound client by its node", func() (bool, string) {
		clients, err := p.clients()
		if err != nil {
			return false, err.Error()
		}
		for _, c := range clients {
			if c.NodeID == "unbound" {
				return c.Zone == zoneB && c.ZoneFrom == server.ZoneFromNode && c.ClaimedZone == "" && c.Class == zoneB,
					fmt.Sprintf("zone %q from %q, claimed %q, class %q", c.Zone, c.ZoneFrom, c.ClaimedZone, c.Class)
			}
		}
		return false, "not listed"
	})
}

// TestRevokedTokenEndsStream: against a real apiserver, with a token review
// interval of 2 s, a stream of a pod-bound token stays open across review
// intervals while the pod exists, and ends with Unauthenticated bad-token
// within the stated bound of the pod's deletion: the review interval plus the
// apiserver's own token cache (10 s), plus a review's round trip. The
// refusal is counted; reconnecting with the same token is refused.
func TestRevokedTokenEndsStream(t *testing.T) {
	ns := namespace(t)
	createEchoImport(t, ns)
	w := newWorkload(t, ns)
	ca := newTokenCA(t)
	const interval, apiserverCache, roundTrip = 2 * time.Second, 10 * time.Second, 2 * time.Second
	var reviews atomic.Int64
	rc := rest.CopyConfig(restConfig)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return tokenReviews{rt: rt, n: &reviews} })
	banner := &logSink{}
	p := startPlaneWith(t, ns, "revoked", func(c *controlplane.Config) {
		c.RestConfig = rc
		c.TLS = ca.files
		c.XDSAuth = []string{controlplane.AuthToken}
		c.XDSTokenAudience = "poise"
		c.XDSTokenReviewInterval = interval
		c.Out = banner
	})
	if !banner.contains(`authentication: token (audience "poise", reviewed every 2s)`) {
		t.Errorf("the banner does not say the review interval:\n%s", banner.tail(20))
	}
	tok := w.token(t, "poise")
	conn := ca.dialToken(t, p.addrs.XDS, tok)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	node := claims("checkout-0.envoy", ns, w.sa)
	stream, _, err := sotwCDS(ctx, conn, node)
	if err != nil {
		t.Fatalf("SotW with the pod's token: %v", err)
	}
	type end struct {
		err error
		at  time.Time
	}
	ended := make(chan end, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				ended <- end{err, time.Now()}
				return
			}
		}
	}()

	// open across reviews while the pod exists: the token is reviewed again
	// (and again, so the first review's verdict has been acted on), and the
	// stream goes on
	testkit.Eventually(t, 4*interval, "the token reviewed twice again", func() (bool, string) {
		select {
		case e := <-ended:
			t.Fatalf("the stream of a valid token ended at a review: %v", e.err)
		default:
		}
		n := reviews.Load()
		return n >= 3, fmt.Sprintf("%d TokenReviews", n)
	})

	refused := metricValue(t, p, `poise_xds_refused_total{reason="bad-token"}`)
	if err := w.cs.CoreV1().Pods(ns).Delete(t.Context(), w.pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	bound := interval + apiserverCache + roundTrip
	var e end
	select {
	case e = <-ended:
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("the stream of a deleted pod's token still open %v after the deletion", bound+5*time.Second)
	}
	late := e.at.Sub(deleted)
	t.Logf("ended %v after the pod's deletion (bound %v), after %d TokenReviews: %v", late.Round(time.Millisecond), bound, reviews.Load(), e.err)
	if status.Code(e.err) != codes.Unauthenticated || !strings.Contains(e.err.Error(), "bad-token") {
		t.Errorf("the stream ended with %v, want Unauthenticated bad-token", e.err)
	}
	if late > bound {
		t.Errorf("the stream ended %v after the deletion, beyond the bound %v", late, bound)
	}
	if got := metricValue(t, p, `poise_xds_refused_total{reason="bad-token"}`) - refused; got != 1 {
		t.Errorf("poise_xds_refused_total{reason=\"bad-token\"} rose by %v, want 1", got)
	}
	if _, _, err := sotwCDS(ctx, conn, node); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "bad-token") {
		t.Errorf("reconnecting with the revoked token: %v, want Unauthenticated bad-token", err)
	}
}
