package kube_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// echoTopology creates Upstream echo over five backends: priority 0 is
// eu-west (zones a and b, locality weights 3 and 2, mixed endpoint
// weights), priority 1 is us-east-a.
func echoTopology(t *testing.T, ns string, b []*splitcheck.Backend) {
	t.Helper()
	objs := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC, AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}}},
	}
	for _, l := range []struct {
		zone     string
		priority int32
		weight   int64
	}{{"eu-west-a", 0, 3}, {"eu-west-b", 0, 2}, {"us-east-a", 1, 1}} {
		objs = append(objs, &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: l.zone, Namespace: ns}, Spec: v1alpha1.LocalitySpec{
			Upstream: "echo", Priority: new(l.priority), Weight: new(l.weight),
			LocalityID: v1alpha1.LocalityID{Region: l.zone[:7], Zone: l.zone},
		}})
	}
	type ep struct {
		i      int
		weight int64
	}
	for _, s := range []struct {
		zone string
		eps  []ep
	}{
		{"eu-west-a", []ep{{0, 1}, {1, 3}}},
		{"eu-west-b", []ep{{2, 2}, {3, 1}}},
		{"us-east-a", []ep{{4, 1}}},
	} {
		set := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: s.zone, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: "echo", Locality: v1alpha1.LocalityID{Region: s.zone[:7], Zone: s.zone},
		}}
		for _, e := range s.eps {
			set.Spec.Endpoints = append(set.Spec.Endpoints, v1alpha1.Endpoint{Address: b[e.i].Host, Port: b[e.i].Port, Weight: new(e.weight)})
		}
		objs = append(objs, set)
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// setHealth writes a prober's view into an EndpointSet's status (the status
// subresource), as a health checker would.
func setHealth(t *testing.T, ns, set string, health ...v1alpha1.EndpointHealth) {
	t.Helper()
	var es v1alpha1.EndpointSet
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: set}, &es); err != nil {
		t.Fatal(err)
	}
	orig := es.DeepCopy()
	es.Status.Health = health
	if err := k8s.Status().Patch(t.Context(), &es, client.MergeFrom(orig)); err != nil {
		t.Fatalf("patch status of EndpointSet %s: %v", set, err)
	}
}

func unhealthy(b *splitcheck.Backend) v1alpha1.EndpointHealth {
	return v1alpha1.EndpointHealth{Address: b.Host, Port: b.Port, Probe: v1alpha1.ProbeUnhealthy}
}

// statusMatches compares an Upstream's status with the explain report of the
// same computation: conditions, observedGeneration, revision and every figure.
// The revision is the plane's own, which holds while one plane has led from the start.
func statusMatches(u *v1alpha1.Upstream, rep explain.Report) (bool, string) {
	ok, why := figuresMatch(u, rep)
	if u.Status.Revision <= 0 || uint64(u.Status.Revision) > rep.Revision {
		ok, why = false, strings.TrimPrefix(why+fmt.Sprintf("; revision %d (explain is at %d)", u.Status.Revision, rep.Revision), "; ")
	}
	return ok, why
}

// figuresMatch is statusMatches but for the revision, which a new leader
// continues from where the last one left it.
func figuresMatch(u *v1alpha1.Upstream, rep explain.Report) (bool, string) {
	x := rep.Upstreams[0]
	var bad []string
	for _, ct := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionProgrammed} {
		c := meta.FindStatusCondition(u.Status.Conditions, ct)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != u.Generation {
			bad = append(bad, fmt.Sprintf("condition %s = %+v", ct, c))
		}
	}
	if u.Status.ObservedGeneration != u.Generation {
		bad = append(bad, fmt.Sprintf("observedGeneration %d, generation %d", u.Status.ObservedGeneration, u.Generation))
	}
	if string(u.Status.Outcome) != x.Outcome {
		bad = append(bad, fmt.Sprintf("outcome %q, explain %q", u.Status.Outcome, x.Outcome))
	}
	var wantP []v1alpha1.PriorityStatus
	var wantL []v1alpha1.LocalityStatus
	for _, p := range x.Priorities {
		wantP = append(wantP, v1alpha1.PriorityStatus{Priority: int32(p.Priority), Health: int64(p.Health), Load: int64(p.Load), InPanic: p.InPanic, DroppedMillionths: int64(p.DroppedMillionths)})
		for _, l := range p.Localities {
			wantL = append(wantL, v1alpha1.LocalityStatus{
				Priority: int32(p.Priority), LocalityID: v1alpha1.LocalityID{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone},
				LocalityWeight: int64(l.LocalityWeight), Availability: int64(l.Availability), EffectiveWeight: int64(l.EffectiveWeight), Traffic: int64(l.Traffic),
			})
		}
	}
	if !slices.Equal(u.Status.Priorities, wantP) {
		bad = append(bad, fmt.Sprintf("priorities %+v, explain %+v", u.Status.Priorities, wantP))
	}
	if !slices.Equal(u.Status.Localities, wantL) {
		bad = append(bad, fmt.Sprintf("localities %+v, explain %+v", u.Status.Localities, wantL))
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}

// waitStatus waits until the Upstream's status shows what explain shows.
func waitStatus(t *testing.T, p *plane, ns, name string) (v1alpha1.Upstream, time.Duration) {
	t.Helper()
	var u v1alpha1.Upstream
	took := testkit.Eventually(t, 15*time.Second, "Upstream "+name+" status agrees with explain", func() (bool, string) {
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
			return false, err.Error()
		}
		rep, err := p.explainOf(ns, name)
		if err != nil {
			return false, err.Error()
		}
		return statusMatches(&u, rep)
	})
	return u, took
}

// accepted reads the Accepted condition of an object.
func accepted(t *testing.T, obj client.Object) *metav1.Condition {
	t.Helper()
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *v1alpha1.Locality:
		conds = o.Status.Conditions
	case *v1alpha1.EndpointSet:
		conds = o.Status.Conditions
	case *v1alpha1.Upstream:
		conds = o.Status.Conditions
	}
	return meta.FindStatusCondition(conds, v1alpha1.ConditionAccepted)
}

func sameShares(a, b splitcheck.Expectation) bool {
	if len(a.Share) != len(b.Share) || a.Dropped != b.Dropped {
		return false
	}
	for k, v := range a.Share {
		if b.Share[k] != v {
			return false
		}
	}
	return true
}

// TestTraffic runs a whole control plane on the Kubernetes source and
// drives grpc-go's xDS client through it: the split it carries out is the
// one explain computed, status agrees, health written by a prober moves
// traffic, and a contradictory Locality is set aside without stopping
// anything else.
func TestTraffic(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	b := splitcheck.StartBackends(t, "127.0.0.1", 7)
	echoTopology(t, ns, b)
	start := time.Now()
	p := startPlane(t, ns, "solo")
	t.Logf("control plane ready %v after start", time.Since(start).Round(time.Millisecond))
	const node = "traffic-client"
	conn := splitcheck.NewXDSClient(t, p.addrs.XDS, node, "echo."+ns)

	// 1. the split: priority 0 takes everything, 3:2 between zones, 1:3 and 2:1 inside.
	rep, _ := p.waitExplain(t, ns, "echo", "echo has five endpoints", func(u explain.Upstream) (bool, string) {
		n := 0
		for _, p := range u.Priorities {
			for _, l := range p.Localities {
				n += len(l.Endpoints)
			}
		}
		return n == 5, fmt.Sprintf("%d endpoints", n)
	})
	want := splitcheck.ExpectationOf(t, rep)
	if got := want.Share[b[1].Addr]; got != 450_000 {
		t.Fatalf("explain gives %s a share of %d, want 450000", b[1].Addr, got)
	}
	took := p.waitAcked(t, node, rep.Revision)
	t.Logf("1 split: client ACKed revision %d %v after asking", rep.Revision, took.Round(time.Millisecond))
	measure(t, "1 split", conn, want)
	u, took := waitStatus(t, p, ns, "echo")
	t.Logf("1 split: Upstream status agrees with explain (revision %d, %d localities), waited %v", u.Status.Revision, len(u.Status.Localities), took.Round(time.Millisecond))
	for _, name := range []string{"eu-west-a", "eu-west-b", "us-east-a"} {
		for _, obj := range []client.Object{&v1alpha1.Locality{}, &v1alpha1.EndpointSet{}} {
			obj.SetNamespace(ns)
			obj.SetName(name)
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%T %s Accepted", obj, name), func() (bool, string) {
				c := accepted(t, obj)
				return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration(), fmt.Sprintf("%+v", c)
			})
		}
	}

	// 2. a prober marks the weight-3 endpoint of eu-west-a Unhealthy in the
	//    EndpointSet's status: priority 0 drops to 80 % health and spills to us-east.
	var before v1alpha1.EndpointSet
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "eu-west-a"}, &before); err != nil {
		t.Fatal(err)
	}
	patched := time.Now()
	setHealth(t, ns, "eu-west-a", unhealthy(b[1]))
	rep, took = p.waitExplain(t, ns, "echo", "explain shows the probe", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[1])
		return ep.Probe == "Unhealthy" && ep.Share == 0, fmt.Sprintf("%+v", ep)
	})
	t.Logf("2 health: explain shows the probe %v after the status patch", took.Round(time.Millisecond))
	p.waitAcked(t, node, rep.Revision)
	t.Logf("2 health: client ACKed revision %d %v after the status patch", rep.Revision, time.Since(patched).Round(time.Millisecond))
	health := splitcheck.ExpectationOf(t, rep)
	if health.Share[b[4].Addr] == 0 {
		t.Fatalf("no spill to priority 1 after the health change: %+v", health)
	}
	ep, _ := endpointOf(rep.Upstreams[0], b[1])
	if ep.AdminState != "Ready" {
		t.Errorf("health changed the admin state in explain: %+v", ep)
	}
	u, _ = waitStatus(t, p, ns, "echo")
	t.Logf("2 health: Upstream status follows (revision %d, priority 0 health %d) %v after the status patch", u.Status.Revision, u.Status.Priorities[0].Health, time.Since(patched).Round(time.Millisecond))
	splitcheck.Warm(t, conn, health)
	t.Logf("2 health: the client's RPCs follow the new split %v after the status patch", time.Since(patched).Round(time.Millisecond))
	splitcheck.CheckSplit(t, "2 health", splitcheck.Send(conn, rpcs), health)
	echoRevision := u.Status.Revision
	// the prober's write never touched the spec, and the status writer's
	// conditions never clobbered the prober's health
	testkit.Eventually(t, 10*time.Second, "EndpointSet eu-west-a keeps its spec and health", func() (bool, string) {
		var after v1alpha1.EndpointSet
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "eu-west-a"}, &after); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionAccepted)
		ok := after.Generation == before.Generation && slices.EqualFunc(after.Spec.Endpoints, before.Spec.Endpoints, func(x, y v1alpha1.Endpoint) bool {
			return x.Address == y.Address && x.Port == y.Port && *x.Weight == *y.Weight && x.AdminState == y.AdminState && x.AdminState == v1alpha1.AdminStateReady
		}) && len(after.Status.Health) == 1 && after.Status.Health[0].Probe == v1alpha1.ProbeUnhealthy && c != nil && c.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("generation %d→%d spec %+v status %+v", before.Generation, after.Generation, after.Spec, after.Status)
	})

	// 3. a second Locality for eu-west-a with another weight contradicts the
	//    first: the older wins, so only the newcomer is set aside, as
	//    Conflicted naming the first; the client's split does not move, and a
	//    health change in another Upstream still goes through meanwhile.
	other := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: "other", Endpoints: []v1alpha1.Endpoint{{Address: b[5].Host, Port: b[5].Port}, {Address: b[6].Host, Port: b[6].Port}},
		}},
	}
	for _, o := range other {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	p.waitExplain(t, ns, "other", "Upstream other is served", func(u explain.Upstream) (bool, string) {
		return len(u.Priorities) == 1, fmt.Sprintf("%+v", u.Priorities)
	})
	echoBefore, err := p.explainOf(ns, "echo")
	if err != nil {
		t.Fatal(err)
	}
	dup := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-a-dup", Namespace: ns}, Spec: v1alpha1.LocalitySpec{
		Upstream: "echo", Priority: new(int32(0)), Weight: new(int64(7)), LocalityID: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-a"},
	}}
	created := time.Now()
	if err := k8s.Create(t.Context(), dup); err != nil {
		t.Fatal(err)
	}
	orig := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-a", Namespace: ns}}
	took = testkit.Eventually(t, 15*time.Second, "only the newer Locality Conflicted, naming the older", func() (bool, string) {
		c, o := accepted(t, dup), accepted(t, orig)
		ok := c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonConflicted &&
			strings.Contains(c.Message, "Locality "+ns+"/eu-west-a ") && strings.Contains(c.Message, ns+"/eu-west-a is older") &&
			c.ObservedGeneration == dup.GetGeneration() && o != nil && o.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("newer: %+v; older: %+v", c, o)
	})
	t.Logf("3 conflict: the newer Locality shows Conflicted %v after it was created; the older stays Accepted", took.Round(time.Millisecond))
	t.Logf("3 conflict: %s", accepted(t, dup).Message)

	// meanwhile, elsewhere
	setHealth(t, ns, "other", unhealthy(b[6]))
	_, took = p.waitExplain(t, ns, "other", "the health change in Upstream other goes through", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[6])
		return ep.Probe == "Unhealthy", fmt.Sprintf("%+v", ep)
	})
	t.Logf("3 conflict: a health change in Upstream other went through %v after its patch", took.Round(time.Millisecond))
	echoDuring, err := p.explainOf(ns, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if !sameShares(splitcheck.ExpectationOf(t, echoBefore), splitcheck.ExpectationOf(t, echoDuring)) {
		t.Fatalf("the conflicting Locality moved echo's split:\nbefore %+v\nduring %+v", splitcheck.ExpectationOf(t, echoBefore), splitcheck.ExpectationOf(t, echoDuring))
	}
	if got := echoDuring.Upstreams[0].Priorities[0].Localities[0].LocalityFrom; !slices.Equal(got, []string{"Locality " + ns + "/eu-west-a"}) {
		t.Errorf("eu-west-a takes its weight from %v, want the first Locality alone", got)
	}
	// echo itself was not republished: its status still shows the revision before the conflict
	var echoStatus v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "echo"}, &echoStatus); err != nil {
		t.Fatal(err)
	}
	if echoStatus.Status.Revision != echoRevision {
		t.Errorf("echo's status revision moved from %d to %d during the conflict", echoRevision, echoStatus.Status.Revision)
	}
	if c := meta.FindStatusCondition(echoStatus.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Upstream echo itself is not Accepted during the conflict: %+v", c)
	}
	splitcheck.CheckSplit(t, "3 conflict", splitcheck.Send(conn, rpcs), health)

	// deleting the contradiction leaves the older as it was
	if err := k8s.Delete(t.Context(), dup); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	testkit.Eventually(t, 15*time.Second, "Locality eu-west-a Accepted again", func() (bool, string) {
		c := accepted(t, orig)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonAccepted, fmt.Sprintf("%+v", c)
	})
	t.Logf("3 conflict: Locality eu-west-a Accepted again %v after the other was deleted (%v since it was created)",
		time.Since(deleted).Round(time.Millisecond), time.Since(created).Round(time.Millisecond))
	echoAfter, err := p.explainOf(ns, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if !sameShares(splitcheck.ExpectationOf(t, echoBefore), splitcheck.ExpectationOf(t, echoAfter)) {
		t.Fatalf("deleting the conflicting Locality moved echo's split")
	}
}
