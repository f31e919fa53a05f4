package status

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

func TestPercent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    uint64
		want string
	}{{0, "0.0%"}, {1_000_000, "100.0%"}, {428_571, "42.9%"}, {999_949, "99.9%"}, {999_999, "99.9%"}, {1, "0.1%"}, {449, "0.1%"}, {50_000, "5.0%"}, {300_000, "30.0%"}} {
		if got := percent(tc.m); got != tc.want {
			t.Errorf("percent(%d) = %q; want %q", tc.m, got, tc.want)
		}
	}
}

// result builds a weights result of priorities; withLocalities gives each
// priority its localities.
func result(outcome weights.Outcome, dropped uint64, prios ...weights.PriorityResult) *weights.Result {
	return &weights.Result{Outcome: outcome, DroppedMillionths: dropped, Priorities: prios}
}

func withLocalities(r *weights.Result, perPriority ...[]weights.LocalityResult) *weights.Result {
	for i, locs := range perPriority {
		r.Priorities[i].FirstLocality, r.Priorities[i].LocalityCount = len(r.Localities), len(locs)
		for _, l := range locs {
			l.Priority = r.Priorities[i].Priority
			r.Localities = append(r.Localities, l)
		}
	}
	return r
}

// loc is a locality of region eu: its locality weight, configured
// (endpoint) weight, share of its priority and availability.
func loc(zone string, weight, configured, share, avail uint64) weights.LocalityResult {
	return weights.LocalityResult{Locality: weights.Locality{Region: "eu", Zone: zone}, LocalityWeight: weight, ConfiguredWeight: configured,
		ShareInPriority: share, Availability: avail}
}

func TestDegradedCondition(t *testing.T) {
	t.Parallel()
	full := func(p uint32, load uint64) weights.PriorityResult {
		return weights.PriorityResult{Priority: p, Health: 1_000_000, Load: load}
	}
	for _, tc := range []struct {
		name    string
		r       *weights.Result
		status  metav1.ConditionStatus
		reason  string
		message string // a part of the message
	}{
		{"not in the topology", nil, metav1.ConditionUnknown, v1alpha1.ReasonPending, "not in the topology"},
		{"healthy", withLocalities(result(weights.Routable, 0, full(0, 1_000_000)),
			[]weights.LocalityResult{loc("a", 1, 2, 333_333, 1_000_000), loc("b", 2, 2, 666_667, 1_000_000)}),
			metav1.ConditionFalse, v1alpha1.ReasonHealthy, "configured share"},
		{"a locality without endpoints is not short", withLocalities(result(weights.Routable, 0, full(0, 1_000_000)),
			[]weights.LocalityResult{loc("a", 1, 2, 1_000_000, 1_000_000), loc("b", 2, 0, 0, 0)}),
			metav1.ConditionFalse, v1alpha1.ReasonHealthy, ""},
		{"a locality short of its share", withLocalities(result(weights.Routable, 0, full(0, 1_000_000)),
			[]weights.LocalityResult{loc("a", 1, 2, 259_259, 700_000), loc("b", 2, 2, 740_741, 1_000_000)}),
			metav1.ConditionTrue, v1alpha1.ReasonSpilling, `locality "eu/a/" gets 25.9% of priority 0, configured 33.3% (availability 70.0%)`},
		{"spill to priority 1", withLocalities(result(weights.Routable, 0, full(0, 700_000), full(1, 300_000)),
			[]weights.LocalityResult{loc("a", 1, 2, 1_000_000, 700_000)}, []weights.LocalityResult{loc("c", 1, 2, 1_000_000, 1_000_000)}),
			metav1.ConditionTrue, v1alpha1.ReasonSpilling, "priority 1 receives 30.0%"},
		{"panic", result(weights.Routable, 0, weights.PriorityResult{Priority: 0, Health: 200_000, Load: 1_000_000, InPanic: true}),
			metav1.ConditionTrue, v1alpha1.ReasonPanic, "priority 0 (health 20.0%, load 100.0%)"},
		{"panic of a priority without traffic is not", result(weights.Routable, 0, full(0, 1_000_000),
			weights.PriorityResult{Priority: 1, Health: 0, InPanic: true}),
			metav1.ConditionFalse, v1alpha1.ReasonHealthy, ""},
		{"dropping beats panic", result(weights.Routable, 400_000, full(0, 600_000),
			weights.PriorityResult{Priority: 1, Load: 400_000, Dropped: 400_000, InPanic: true}),
			metav1.ConditionTrue, v1alpha1.ReasonDropping, "drops 40.0% of the traffic: priority 1 drops 40.0%"},
		{"panic rejected", result(weights.PanicRejected, 1_000_000, weights.PriorityResult{Priority: 0, Load: 1_000_000, Dropped: 1_000_000, InPanic: true}),
			metav1.ConditionTrue, v1alpha1.ReasonDropping, "drops 100.0%"},
		{"no capacity", result(weights.NoCapacity, 0, weights.PriorityResult{Priority: 0}),
			metav1.ConditionTrue, v1alpha1.ReasonNoCapacity, "no endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := degradedCondition(3, tc.r)
			if c.Type != v1alpha1.ConditionDegraded || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.message) {
				t.Fatalf("got %+v; want %s %s with %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}

func TestDegradedMessageIsBounded(t *testing.T) {
	t.Parallel()
	r := result(weights.Routable, 0, weights.PriorityResult{Priority: 0, Load: 100_000})
	var locs []weights.LocalityResult
	for i := range 10 {
		r.Priorities = append(r.Priorities, weights.PriorityResult{Priority: uint32(i + 1), Load: 90_000})
		locs = append(locs, loc(strings.Repeat("z", 128)+string(rune('a'+i)), 1, 1, 0, 0))
	}
	locs = append(locs, loc("full", 1, 1, 1_000_000, 1_000_000))
	r.Priorities[0].LocalityCount, r.Localities = len(locs), locs
	c := degradedCondition(1, r)
	if c.Reason != v1alpha1.ReasonSpilling || len(c.Message) > maxMessage || !strings.HasSuffix(c.Message, "and 17 more") {
		t.Fatalf("got %s, %d bytes: %q; want Spilling, at most %d bytes, ending in a count", c.Reason, len(c.Message), c.Message, maxMessage)
	}
}

// TestLocalityAndEndpointSetFigures: a Locality's status carries what its
// group receives, an EndpointSet's its counts, and both follow health.
func TestLocalityAndEndpointSetFigures(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 1, Budget{QPS: 1e6, Burst: 1e6})
	get := func() (a, b v1alpha1.LocalityObjectStatus, sa v1alpha1.EndpointSetStatus, deg *metav1.Condition) {
		snap := fx.dir.Current()
		var la, lb v1alpha1.Locality
		var ea v1alpha1.EndpointSet
		mustGet(t, fx, "u-0-a", &la)
		mustGet(t, fx, "u-0-b", &lb)
		mustGet(t, fx, "u-0-a", &ea)
		u := fx.upstream("u-0")
		st := upstreamStatus(&u, snap.Upstream(topology.Key{Namespace: "ns", Name: "u-0"}), nil, nil, true, "")
		return localityStatus(&la, snap, nil), localityStatus(&lb, snap, nil), endpointSetStatus(&ea, snap, nil),
			meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
	}
	a, b, sa, deg := get()
	if *a.Traffic != 333_333 || a.TrafficPercent != "33.3%" || *b.Traffic != 666_667 || b.AvailabilityPercent != "100.0%" ||
		*a.ShareInPriority != 333_333 || *a.EffectiveWeight != 1_000_000 {
		t.Errorf("healthy: locality a %+v, b %+v; want 1/3 and 2/3 of the traffic at full availability", a, b)
	}
	if *sa.Total != 2 || *sa.Ready != 2 || *sa.Eligible != 2 {
		t.Errorf("healthy: EndpointSet a counts %d/%d/%d; want 2 total, 2 ready, 2 eligible", *sa.Total, *sa.Ready, *sa.Eligible)
	}
	if deg == nil || deg.Status != metav1.ConditionFalse {
		t.Errorf("healthy: Degraded %+v; want False", deg)
	}

	fx.setHealth(0, v1alpha1.ProbeUnhealthy)
	a, _, sa, deg = get()
	if *a.Availability != 700_000 || a.AvailabilityPercent != "70.0%" || *a.Traffic >= 333_333 {
		t.Errorf("one of two unhealthy: locality a %+v; want availability 70%% and less than a third of the traffic", a)
	}
	if *sa.Total != 2 || *sa.Ready != 2 || *sa.Eligible != 1 {
		t.Errorf("one of two unhealthy: counts %d/%d/%d; want 2 total, 2 ready, 1 eligible", *sa.Total, *sa.Ready, *sa.Eligible)
	}
	if deg == nil || deg.Status != metav1.ConditionTrue || deg.Reason != v1alpha1.ReasonSpilling {
		t.Errorf("one of two unhealthy: Degraded %+v; want True, Spilling", deg)
	}

	// a Locality of an Upstream that does not exist has no figures
	orphan := v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Generation: 1}, Spec: v1alpha1.LocalitySpec{Upstream: "nope"}}
	if st := localityStatus(&orphan, fx.dir.Current(), nil); st.Traffic != nil || st.TrafficPercent != "" {
		t.Errorf("orphan Locality: %+v; want no figures", st)
	}
}

func mustGet(t *testing.T, fx *statusFixture, name string, obj client.Object) {
	t.Helper()
	if err := fx.c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, obj); err != nil {
		t.Fatal(err)
	}
}

// TestProgrammed: Programmed is True only when the upstream's state is
// published, accepted, its references resolve and no client of this
// replica rejects it.
func TestProgrammed(t *testing.T) {
	t.Parallel()
	u := v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "u", Namespace: "n", Generation: 2},
		Spec: v1alpha1.UpstreamSpec{EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "svc"}}}}
	state := &topology.UpstreamState{Revision: 7, Result: &weights.Result{}}
	resolved := &metav1.Condition{Type: conditions.ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: conditions.ReasonResolved}
	missing := &metav1.Condition{Type: conditions.ConditionResolvedRefs, Status: metav1.ConditionFalse, Reason: conditions.ReasonServiceNotFound}
	for _, tc := range []struct {
		name       string
		rej        *conditions.Rejection
		refs       *metav1.Condition
		published  bool
		rejectedBy string
		status     metav1.ConditionStatus
		reason     string
		message    string
	}{
		{"published", nil, resolved, true, "", metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "published over xDS at revision 7"},
		{"not yet published", nil, resolved, false, "", metav1.ConditionFalse, v1alpha1.ReasonPending, "not yet published"},
		{"not accepted", &conditions.Rejection{Reason: v1alpha1.ReasonInvalid}, resolved, true, "", metav1.ConditionFalse, v1alpha1.ReasonInvalid, "not accepted"},
		{"the Service is missing", nil, missing, true, "", metav1.ConditionFalse, v1alpha1.ReasonRefsNotResolved, "without the endpoints of Service n/svc"},
		{"clients reject it", nil, resolved, true, "2 xDS stream(s); resource n/u: bad", metav1.ConditionFalse, conditions.ReasonRejectedByClients,
			"revision 7, but rejected (NACK) by 2 xDS stream(s); resource n/u: bad"},
		{"a NACK of a version not yet published does not count", nil, resolved, false, "1 xDS stream(s)", metav1.ConditionFalse, v1alpha1.ReasonPending, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := upstreamStatus(&u, state, tc.rej, tc.refs, tc.published, tc.rejectedBy)
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgrammed)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 2 || !strings.Contains(c.Message, tc.message) {
				t.Fatalf("Programmed = %+v; want %s %s with %q", c, tc.status, tc.reason, tc.message)
			}
			if a := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAccepted); (a.Status == metav1.ConditionTrue) != (tc.rej == nil) {
				t.Fatalf("Accepted = %+v", a)
			}
		})
	}
}

// TestPendingGenerations: a Locality or EndpointSet whose spec the topology
// does not hold yet waits (its figures would change right after).
func TestPendingGenerations(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 1, Budget{QPS: 1e6, Burst: 1e6})
	snap := fx.dir.Current()
	var l v1alpha1.Locality
	var s v1alpha1.EndpointSet
	mustGet(t, fx, "u-0-a", &l)
	mustGet(t, fx, "u-0-a", &s)
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.Locality, *v1alpha1.EndpointSet)
		want bool
	}{
		{"as applied", func(*v1alpha1.Locality, *v1alpha1.EndpointSet) {}, false},
		{"another weight", func(l *v1alpha1.Locality, _ *v1alpha1.EndpointSet) { l.Spec.Weight = new(int64(5)) }, true},
		{"another priority", func(l *v1alpha1.Locality, _ *v1alpha1.EndpointSet) { l.Spec.Priority = new(int32(1)) }, true},
		{"another upstream that does not exist", func(l *v1alpha1.Locality, s *v1alpha1.EndpointSet) { l.Spec.Upstream, s.Spec.Upstream = "nope", "nope" }, false},
		{"a new name", func(l *v1alpha1.Locality, s *v1alpha1.EndpointSet) { l.Name, s.Name = "new", "new" }, true},
		{"an endpoint more", func(_ *v1alpha1.Locality, s *v1alpha1.EndpointSet) {
			s.Spec.Endpoints = append(s.Spec.Endpoints, v1alpha1.Endpoint{Address: "10.9.9.9", Port: 80})
		}, true},
		{"an endpoint drains", func(_ *v1alpha1.Locality, s *v1alpha1.EndpointSet) {
			s.Spec.Endpoints[0].AdminState = v1alpha1.AdminStateDraining
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l2, s2 := l.DeepCopy(), s.DeepCopy()
			tc.edit(l2, s2)
			if got := localityPending(l2, snap) || endpointSetPending(s2, snap); got != tc.want {
				t.Fatalf("pending = %v; want %v", got, tc.want)
			}
		})
	}
}
