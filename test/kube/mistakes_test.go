package kube_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/testkit"
)

// TestMistakesStayConditionsInKubernetes: the one-character mistakes that
// manifest files refuse are, in a cluster where objects arrive in any order,
// what they were: an EndpointSet naming a mistyped Upstream, and a Locality
// whose Upstream is in another namespace, are Accepted=False UpstreamNotFound
// with a Warning Event, and the rest of the topology serves; a Locality
// whose zone is mistyped leaves its EndpointSet on the default weight
// (Accepted, DefaultLocality) and places nothing, which explain of the live
// cluster lists among the upstream's Locality objects that match nothing,
// and which its status says (ResolvedRefs=False MatchesNoEndpoints, with
// the zone it likely meant, in kubectl get's column) with one Warning
// Event, until the zone is fixed (ResolvedRefs=True, a Normal Event). A
// Locality applied a moment before its EndpointSet gets no Event.
func TestMistakesStayConditionsInKubernetes(t *testing.T) {
	t.Parallel()
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
	p := startPlane(t, ns, "one")

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
		{"EndpointSet", "checkout-eu-west-1a", metav1.ConditionTrue, conditions.ReasonDefaulted},
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
	// the Locality with the mistyped zone says so, and what was meant
	resolved := func(name string) (*metav1.Condition, error) {
		var l v1alpha1.Locality
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionResolvedRefs), nil
	}
	mistyped := `spec.zone: matches no endpoints of Upstream ` + ns + `/checkout: no endpoint set is in priority 0, locality region "eu-west" zone "eu-west-la" ` +
		`(did you mean zone "eu-west-1a"? EndpointSet ` + ns + `/checkout-eu-west-1a is there, and no Locality object places it)`
	for _, want := range []struct {
		name, status, reason, message string
	}{
		{"checkout-eu-west-1a", "False", v1alpha1.ReasonMatchesNoEndpoints, mistyped},
		{"checkout-eu-west-1b", "True", conditions.ReasonResolved, "endpoints of Upstream " + ns + "/checkout are in its priority and locality"},
		{"payments", "", "", ""}, // not in the topology: Accepted=False says why
	} {
		testkit.Eventually(t, 15*time.Second, fmt.Sprintf("Locality %s ResolvedRefs=%s %s", want.name, want.status, want.reason), func() (bool, string) {
			c, err := resolved(want.name)
			if err != nil {
				return false, err.Error()
			}
			if want.status == "" {
				return c == nil, fmt.Sprintf("%+v", c)
			}
			return c != nil && string(c.Status) == want.status && c.Reason == want.reason && c.Message == want.message, fmt.Sprintf("%+v", c)
		})
	}
	if ok, why := cellsMatch(table(t, ns, "localities"), "checkout-eu-west-1a", map[string]any{"Accepted": "True", "ResolvedRefs": "False"}); !ok {
		t.Errorf("kubectl get localities: %s", why)
	}
	events := waitEvents(t, ns, "EndpointSet/checkout-eu-west-1c Warning UpstreamNotFound", "Locality/payments Warning UpstreamNotFound",
		"Locality/checkout-eu-west-1a Warning MatchesNoEndpoints")
	if slices.Contains(events, "Locality/checkout-eu-west-1a Warning UpstreamNotFound") {
		t.Errorf("an Event for a Locality whose Upstream exists: %v", events)
	}
	for _, e := range events {
		if e != "Locality/checkout-eu-west-1a Warning MatchesNoEndpoints" && strings.HasSuffix(e, " MatchesNoEndpoints") {
			t.Errorf("Event %q for a Locality that matches endpoints (or is not in the topology): %v", e, events)
		}
	}

	// explain of the live cluster finds the mistyped zone
	snap, _, err := source.Live(t.Context(), k8s, ns, nil)
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

	// a Locality applied before its EndpointSet, batches apart (the plane
	// serves it, matching nothing, before the set is created), waits for
	// it, within the publish grace
	if err := k8s.Create(t.Context(), &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1d", Namespace: ns},
		Spec: v1alpha1.LocalitySpec{Upstream: "checkout", LocalityID: zone("eu-west-1d"), Weight: new(int64(2))}}); err != nil {
		t.Fatal(err)
	}
	p.waitExplain(t, ns, "checkout", "Locality checkout-eu-west-1d served alone, matching nothing", func(u explain.Upstream) (bool, string) {
		return slices.ContainsFunc(u.UnmatchedLocalities, func(l explain.UnmatchedLocality) bool {
			return l.Locality == "Locality "+ns+"/checkout-eu-west-1d"
		}), fmt.Sprintf("unmatched %+v", u.UnmatchedLocalities)
	})
	if err := k8s.Create(t.Context(), &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "checkout-eu-west-1d", Namespace: ns},
		Spec: v1alpha1.EndpointSetSpec{Upstream: "checkout", Locality: zone("eu-west-1d"), Endpoints: []v1alpha1.Endpoint{{Address: "10.25.4.1", Port: 80}}}}); err != nil {
		t.Fatal(err)
	}

	// fixing the zone resolves it, with a Normal Event, and places the set
	var l v1alpha1.Locality
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "checkout-eu-west-1a"}, &l); err != nil {
		t.Fatal(err)
	}
	l.Spec.Zone = "eu-west-1a"
	if err := k8s.Update(t.Context(), &l); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"checkout-eu-west-1a", "checkout-eu-west-1d"} {
		testkit.Eventually(t, 15*time.Second, "Locality "+name+" ResolvedRefs=True", func() (bool, string) {
			c, err := resolved(name)
			if err != nil {
				return false, err.Error()
			}
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == conditions.ReasonResolved, fmt.Sprintf("%+v", c)
		})
	}
	testkit.Eventually(t, 15*time.Second, "EndpointSet checkout-eu-west-1a Accepted=True Accepted", func() (bool, string) {
		c, err := accepted("EndpointSet", "checkout-eu-west-1a")
		if err != nil {
			return false, err.Error()
		}
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonAccepted, fmt.Sprintf("%+v", c)
	})
	events = waitEvents(t, ns, "Locality/checkout-eu-west-1a Normal Recovered")
	var list eventsv1.EventList
	if err := k8s.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	warnings := 0
	for _, e := range list.Items {
		if e.Reason == v1alpha1.ReasonMatchesNoEndpoints {
			warnings++
			if e.Regarding.Name != "checkout-eu-west-1a" || e.Series != nil {
				t.Errorf("Event %s on %s/%s (series %+v): one for the mistyped zone, once", e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Series)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d MatchesNoEndpoints Events, want 1: %v", warnings, events)
	}
}
