package status

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
)

// TestLocalityMatchingNoEndpoints: a Locality that places no endpoints is
// ResolvedRefs=False MatchesNoEndpoints, naming the field at fault, with
// one Warning Event; one whose EndpointSet comes within the publish grace
// is written once, resolved, with no Event; fixing it writes ResolvedRefs
// True at once with a Normal Recovered Event.
func TestLocalityMatchingNoEndpoints(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 1, Budget{QPS: 1e6, Burst: 1e6})
	var events recordedEvents
	fx.run.w.Events = &events
	ref := topology.ObjectRef{Kind: topology.KindLocality, Key: topology.Key{Namespace: "ns", Name: "u-0-c"}}
	zoneC := v1alpha1.LocalityID{Region: "eu", Zone: "c"}
	apply := func(what string) {
		t.Helper()
		if err := fx.src.InitialSync(t.Context()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		fx.writes()
		if err := fx.run.process(t.Context(), ref); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refs := func() *metav1.Condition {
		var l v1alpha1.Locality
		mustGet(t, fx, "u-0-c", &l)
		return meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionResolvedRefs)
	}
	expect := func(what string, writes int, status metav1.ConditionStatus, reason, message string, evs ...string) {
		t.Helper()
		if got := fx.writes()["*v1alpha1.Locality/u-0-c"]; got != writes {
			t.Errorf("%s: %d writes, want %d", what, got, writes)
		}
		if c := refs(); status == "" && c != nil || status != "" && (c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, message)) {
			t.Errorf("%s: ResolvedRefs %+v, want %s %s with %q", what, c, status, reason, message)
		}
		if fmt.Sprint([]string(events)) != fmt.Sprint(evs) {
			t.Errorf("%s: Events %q, want %q", what, events, evs)
		}
		events = nil
	}

	// a Locality a moment before its EndpointSet: held, then written resolved
	loc := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u-0-c", Generation: 1},
		Spec: v1alpha1.LocalitySpec{Upstream: "u-0", LocalityID: zoneC}}
	if err := fx.c.Create(t.Context(), loc); err != nil {
		t.Fatal(err)
	}
	apply("the Locality alone")
	expect("the Locality alone, within the grace", 0, "", "", "")
	if err := fx.c.Create(t.Context(), &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u-0-c", Generation: 1},
		Spec: v1alpha1.EndpointSetSpec{Upstream: "u-0", Locality: zoneC, Endpoints: []v1alpha1.Endpoint{{Address: "10.0.0.9", Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	apply("its EndpointSet")
	expect("its EndpointSet within the grace", 1, metav1.ConditionTrue, conditions.ReasonResolved, "endpoints of Upstream ns/u-0 are in its priority and locality")

	// a mistyped zone: held for the grace, then False with a Warning
	setZone := func(zone string) {
		t.Helper()
		mustGet(t, fx, "u-0-c", loc)
		loc.Spec.Zone = zone
		if err := fx.c.Update(t.Context(), loc); err != nil {
			t.Fatal(err)
		}
	}
	setZone("cc")
	apply("the mistyped zone")
	expect("the mistyped zone, within the grace", 0, metav1.ConditionTrue, conditions.ReasonResolved, "")
	// the grace passes: the Locality's hold is moved back by it, as the
	// wall clock would move on
	fx.run.mu.Lock()
	since, held := fx.run.unmatched[ref]
	fx.run.unmatched[ref] = since.Add(-fx.run.grace)
	fx.run.mu.Unlock()
	if !held {
		t.Fatal("the mistyped zone is not held for the grace")
	}
	apply("the mistyped zone after the grace")
	expect("the mistyped zone after the grace", 1, metav1.ConditionFalse, v1alpha1.ReasonMatchesNoEndpoints,
		`spec.zone: matches no endpoints of Upstream ns/u-0: no endpoint set is in priority 0, locality region "eu" zone "cc" (did you mean zone "c"? EndpointSet ns/u-0-c is there, and no Locality object places it)`,
		`Warning MatchesNoEndpoints WriteStatus: ResolvedRefs=False: spec.zone: matches no endpoints of Upstream ns/u-0: no endpoint set is in priority 0, locality region "eu" zone "cc" (did you mean zone "c"? EndpointSet ns/u-0-c is there, and no Locality object places it)`)
	apply("the mistyped zone again")
	expect("the mistyped zone again", 0, metav1.ConditionFalse, v1alpha1.ReasonMatchesNoEndpoints, "")

	// fixed: resolved at once, and a Normal Event
	fx.run.grace = time.Hour
	setZone("c")
	apply("the zone fixed")
	expect("the zone fixed", 1, metav1.ConditionTrue, conditions.ReasonResolved, "",
		"Normal Recovered WriteStatus: ResolvedRefs=True: endpoints of Upstream ns/u-0 are in its priority and locality")
	fx.run.mu.Lock()
	if len(fx.run.unmatched) != 0 {
		t.Errorf("held Localities %v after all were written", fx.run.unmatched)
	}
	fx.run.mu.Unlock()

	// not in the topology (its Upstream does not exist): no ResolvedRefs,
	// Accepted=False says why
	mustGet(t, fx, "u-0-c", loc)
	loc.Spec.Upstream = "nope"
	if st := localityStatus(loc, fx.dir.Current(), nil); meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionResolvedRefs) != nil {
		t.Errorf("a Locality of a missing Upstream: %+v, want no ResolvedRefs", st.Conditions)
	}
}
