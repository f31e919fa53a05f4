package kube_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kubestatus"
	"poise.dev/poise/pkg/source/kube"
	"poise.dev/poise/test/testkit"
)

// TestMistakesStayConditionsInKubernetes: the one-character mistakes that
// manifest files refuse are, in a cluster where objects arrive in any order,
// what they were: an EndpointSet naming a mistyped Upstream, and a Locality
// whose Upstream is in another namespace, are Accepted=False UpstreamNotFound
// with a Warning Event, and the rest of the topology serves; a Locality
// whose zone is mistyped leaves its EndpointSet on the default weight
// (Accepted, DefaultLocality) and places nothing, which explain of the live
// cluster lists among the upstream's Locality objects that match nothing.
func TestMistakesStayConditionsInKubernetes(t *testing.T) {
	ns := namespace(t)
	elsewhere := namespace(t)
	zone := func(z string) v1alpha1.LocalityID { return v1alpha1.LocalityID{Region: "eu-west", Zone: z} }
	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: ns}},
		// the Upstream a manifest without metadata.namespace would create elsewhere
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: elsewhere}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1a", Namespace: ns},
			Spec: v1alpha1.LocalitySpec{Upstream: "checkout", LocalityID: zone("eu-west-la"), Weight: new(int64(3))}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1b", Namespace: ns},
			Spec: v1alpha1.LocalitySpec{Upstream: "checkout", LocalityID: zone("eu-west-1b"), Weight: new(int64(2))}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: ns},
			Spec: v1alpha1.LocalitySpec{Upstream: "payments", LocalityID: zone("eu-west-1a")}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "checkout",
			Locality: zone("eu-west-1a"), Endpoints: []v1alpha1.Endpoint{{Address: "10.25.1.1", Port: 80}}}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1b", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "checkout",
			Locality: zone("eu-west-1b"), Endpoints: []v1alpha1.Endpoint{{Address: "10.25.2.1", Port: 80}}}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1c", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "checkuot",
			Locality: zone("eu-west-1c"), Endpoints: []v1alpha1.Endpoint{{Address: "10.25.3.1", Port: 80}}}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	startPlane(t, ns, "one")

	accepted := func(kind, name string) (*metav1.Condition, error) {
		var conds []metav1.Condition
		switch kind {
		case "Locality":
			var l v1alpha1.Locality
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
				return nil, err
			}
			conds = l.Status.Conditions
		default:
			var s v1alpha1.EndpointSet
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
				return nil, err
			}
			conds = s.Status.Conditions
		}
		return meta.FindStatusCondition(conds, v1alpha1.ConditionAccepted), nil
	}
	for _, want := range []struct {
		kind, name string
		status     metav1.ConditionStatus
		reason     string
	}{
		{"EndpointSet", "checkout-eu-west-1c", metav1.ConditionFalse, v1alpha1.ReasonUpstreamNotFound},
		{"Locality", "payments", metav1.ConditionFalse, v1alpha1.ReasonUpstreamNotFound},
		{"EndpointSet", "checkout-eu-west-1a", metav1.ConditionTrue, kubestatus.ReasonDefaulted},
		{"EndpointSet", "checkout-eu-west-1b", metav1.ConditionTrue, v1alpha1.ReasonAccepted},
	} {
		testkit.Eventually(t, 15*time.Second, fmt.Sprintf("%s %s Accepted=%s %s", want.kind, want.name, want.status, want.reason), func() (bool, string) {
			c, err := accepted(want.kind, want.name)
			if err != nil {
				return false, err.Error()
			}
			return c != nil && c.Status == want.status && c.Reason == want.reason, fmt.Sprintf("%+v", c)
		})
	}
	events := waitEvents(t, ns, "EndpointSet/checkout-eu-west-1c Warning UpstreamNotFound", "Locality/payments Warning UpstreamNotFound")
	if slices.Contains(events, "Locality/checkout-eu-west-1a Warning UpstreamNotFound") {
		t.Errorf("an Event for a Locality whose Upstream exists: %v", events)
	}

	// explain of the live cluster finds the mistyped zone
	snap, _, err := kube.Live(t.Context(), k8s, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := explain.Build(snap)
	if len(rep.Upstreams) != 1 {
		t.Fatalf("upstreams %+v", rep.Upstreams)
	}
	want := []explain.UnmatchedLocality{{Locality: "Locality " + ns + "/checkout-eu-west-1a", Region: "eu-west", Zone: "eu-west-la", LocalityWeight: 3}}
	if got := rep.Upstreams[0].UnmatchedLocalities; !slices.Equal(got, want) {
		t.Errorf("unmatched localities %+v, want %+v", got, want)
	}
	if !slices.Contains(rep.Orphans, "EndpointSet "+ns+"/checkout-eu-west-1c") || !slices.Contains(rep.Orphans, "Locality "+ns+"/payments") {
		t.Errorf("orphans %v", rep.Orphans)
	}
}
