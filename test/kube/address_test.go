package kube_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/test/testkit"
)

// TestAddressRefusals: the apiserver turns away a DNS name and the cloud
// metadata address; a loopback address, which the CRD lets through because
// the Upstream decides on it, is refused by the control plane (Accepted=False,
// AddressNotAllowed, naming the field) and never published, while the last
// good version keeps serving and the Upstream is not Programmed for a
// generation that is refused. With spec.addressPolicy.allowLoopback it is
// published.
func TestAddressRefusals(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := startPlane(t, ns, "addr")
	cluster := ns + "/web"
	up := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	a := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
		Upstream: "web", Endpoints: []v1alpha1.Endpoint{{Address: "198.51.100.10", Port: 9090}},
	}}
	for _, o := range []client.Object{up, a} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	published := func(phase string, want ...string) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, phase, func() (bool, string) {
			got := addressesOf(fetchCLA(t, p.addrs.XDS, cluster))
			return slices.Equal(got, want), fmt.Sprintf("published %v, want %v", got, want)
		})
	}
	published("the first endpoint is published", "198.51.100.10:9090")

	// 1. the apiserver refuses what EDS cannot carry and the never-allowed ranges
	for _, addr := range []string{"vm1.example.internal", "169.254.169.254"} {
		bad := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.Name}}
		err := tryUpdateLatest(t, bad, func() { bad.Spec.Endpoints = append(bad.Spec.Endpoints, v1alpha1.Endpoint{Address: addr, Port: 80}) })
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.endpoints[1].address") {
			t.Fatalf("update with %s: got %v, want Invalid naming spec.endpoints[1].address", addr, err)
		}
	}

	// 2. loopback in a new set and in the accepted one: both refused by the
	//    control plane, naming the field; the first version keeps serving
	local := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "web-local", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
		Upstream: "web", Locality: v1alpha1.LocalityID{Zone: "b"}, Endpoints: []v1alpha1.Endpoint{{Address: "127.0.0.1", Port: 8080}},
	}}
	if err := k8s.Create(t.Context(), local); err != nil {
		t.Fatalf("the CRD leaves loopback to the Upstream, yet: %v", err)
	}
	updateLatest(t, a, func() { a.Spec.Endpoints = append(a.Spec.Endpoints, v1alpha1.Endpoint{Address: "::1", Port: 8080}) })
	for _, tc := range []struct {
		set   *v1alpha1.EndpointSet
		field string
	}{{local, "spec.endpoints[0].address"}, {a, "spec.endpoints[1].address"}} {
		testkit.Eventually(t, 15*time.Second, tc.set.Name+" AddressNotAllowed", func() (bool, string) {
			c := accepted(t, tc.set)
			ok := c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonAddressNotAllowed &&
				strings.Contains(c.Message, tc.field) && strings.Contains(c.Message, "spec.addressPolicy.allowLoopback") &&
				c.ObservedGeneration == tc.set.GetGeneration()
			return ok, fmt.Sprintf("%+v", c)
		})
		t.Logf("%s: %s", tc.set.Name, accepted(t, tc.set).Message)
	}
	if got := addressesOf(fetchCLA(t, p.addrs.XDS, cluster)); !slices.Equal(got, []string{"198.51.100.10:9090"}) {
		t.Fatalf("while refused, published %v; want the last good version alone", got)
	}

	// 3. the opt-in publishes both; taking it away again is refused, the
	//    Upstream is not Programmed for that generation, and nothing moves
	updateLatest(t, up, func() { up.Spec.AddressPolicy = &v1alpha1.AddressPolicy{AllowLoopback: true} })
	published("loopback allowed", "127.0.0.1:8080", "198.51.100.10:9090", "[::1]:8080")
	for _, s := range []*v1alpha1.EndpointSet{a, local} {
		testkit.Eventually(t, 15*time.Second, s.Name+" accepted", func() (bool, string) {
			c := accepted(t, s)
			return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
		})
	}
	updateLatest(t, up, func() { up.Spec.AddressPolicy = nil })
	testkit.Eventually(t, 15*time.Second, "the Upstream without the opt-in is refused and not Programmed", func() (bool, string) {
		c := accepted(t, up)
		prog := meta.FindStatusCondition(up.Status.Conditions, v1alpha1.ConditionProgrammed)
		ok := c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonAddressNotAllowed && c.ObservedGeneration == up.Generation &&
			prog != nil && prog.Status == metav1.ConditionFalse && prog.ObservedGeneration == up.Generation
		return ok, fmt.Sprintf("Accepted %+v; Programmed %+v", c, prog)
	})
	if got := addressesOf(fetchCLA(t, p.addrs.XDS, cluster)); len(got) != 3 {
		t.Fatalf("the refused Upstream change moved what is published: %v", got)
	}
}

// addressesOf lists the endpoints fetchCLA found, sorted.
func addressesOf(published map[string]uint32) []string {
	return slices.Sorted(maps.Keys(published))
}
