package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/test/testkit"
)

// table reads a list of one kind through the apiserver's Table rendering
// (what kubectl get prints): each row's cells by column name.
func table(t *testing.T, ns, resource string) map[string]map[string]any {
	t.Helper()
	hc, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/poise.dev/v1alpha1/namespaces/%s/%s", strings.TrimSuffix(restConfig.Host, "/"), ns, resource)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as Table: %s: %s", url, resp.Status, b)
	}
	var tab metav1.Table
	if err := json.Unmarshal(b, &tab); err != nil {
		t.Fatalf("GET %s as Table: %v", url, err)
	}
	rows := map[string]map[string]any{}
	for _, r := range tab.Rows {
		cells := map[string]any{}
		for i, c := range tab.ColumnDefinitions {
			if i < len(r.Cells) {
				cells[c.Name] = r.Cells[i]
			}
		}
		rows[fmt.Sprint(cells["Name"])] = cells
	}
	return rows
}

// cellsMatch compares some cells of a table row with what they should
// show (numbers as JSON decodes them).
func cellsMatch(rows map[string]map[string]any, name string, want map[string]any) (bool, string) {
	row, ok := rows[name]
	if !ok {
		return false, fmt.Sprintf("no row %s in %v", name, rows)
	}
	for col, w := range want {
		if fmt.Sprint(row[col]) != fmt.Sprint(w) {
			return false, fmt.Sprintf("row %s column %s = %v; want %v (row %v)", name, col, row[col], w, row)
		}
	}
	return true, ""
}

// waitEvents waits until the namespace holds an Event for each of want,
// "Kind/name type reason", and returns them all so.
func waitEvents(t *testing.T, ns string, want ...string) []string {
	t.Helper()
	var got []string
	took := testkit.Eventually(t, 15*time.Second, "Events", func() (bool, string) {
		var l eventsv1.EventList
		if err := k8s.List(t.Context(), &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		got = got[:0]
		for _, e := range l.Items {
			got = append(got, fmt.Sprintf("%s/%s %s %s", e.Regarding.Kind, e.Regarding.Name, e.Type, e.Reason))
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false, fmt.Sprintf("no %q among %v", w, got)
			}
		}
		return true, ""
	})
	t.Logf("Events %v after asking: %v", took.Round(time.Millisecond), got)
	return got
}

func condition(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return typ + " absent"
	}
	return fmt.Sprintf("%s=%s %s (generation %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

// TestStatusColumnsAndDegraded: kubectl get shows each Locality's traffic
// and availability, each EndpointSet's eligible and total endpoints, each
// Upstream's ResolvedRefs and Degraded; Degraded follows the split from
// Healthy to Spilling (a 30 % spill to priority 1) and back as a prober
// writes health; an Upstream whose Service does not exist is Accepted,
// ResolvedRefs False, and not Programmed.
func TestStatusColumnsAndDegraded(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	objs := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "ghost", Port: intstr.FromInt32(80)}}}},
	}
	for _, l := range []struct {
		zone     string
		priority int32
	}{{"a", 0}, {"b", 0}, {"c", 1}} {
		id := v1alpha1.LocalityID{Region: "eu", Zone: l.zone}
		if l.priority == 1 {
			id.Region = "us"
		}
		objs = append(objs, &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: l.zone, Namespace: ns},
			Spec: v1alpha1.LocalitySpec{Upstream: "web", Priority: new(l.priority), LocalityID: id}})
		es := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: l.zone, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "web", Locality: id}}
		for j := range 2 - int(l.priority) {
			es.Spec.Endpoints = append(es.Spec.Endpoints, v1alpha1.Endpoint{Address: fmt.Sprintf("10.1.%d.%d", l.zone[0], j+1), Port: 80})
		}
		objs = append(objs, es)
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	startPlane(t, ns, "one")

	// the columns, healthy: a and b share priority 0, c is standby
	columns := func(phase string, loc, eps, ups map[string]map[string]any) {
		t.Helper()
		took := testkit.Eventually(t, 15*time.Second, phase+": kubectl get columns", func() (bool, string) {
			for _, x := range []struct {
				resource string
				want     map[string]map[string]any
			}{{"localities", loc}, {"endpointsets", eps}, {"upstreams", ups}} {
				rows := table(t, ns, x.resource)
				for name, want := range x.want {
					if ok, why := cellsMatch(rows, name, want); !ok {
						return false, x.resource + ": " + why
					}
				}
			}
			return true, ""
		})
		t.Logf("%s: kubectl get shows it %v", phase, took.Round(time.Millisecond))
	}
	columns("healthy",
		map[string]map[string]any{
			"a": {"Traffic": "50.0%", "Availability": "100.0%", "Accepted": "True"},
			"b": {"Traffic": "50.0%", "Availability": "100.0%"},
			"c": {"Traffic": "0.0%", "Availability": "100.0%"},
		},
		map[string]map[string]any{"a": {"Eligible": 2, "Total": 2}, "c": {"Eligible": 1, "Total": 1}},
		map[string]map[string]any{
			"web":   {"Accepted": "True", "Programmed": "True", "Degraded": "False"},
			"ghost": {"Accepted": "True", "ResolvedRefs": "False", "Programmed": "False", "Degraded": "True"},
		})

	var ghost v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ghost"}, &ghost); err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{
		v1alpha1.ConditionAccepted:   "Accepted=True Accepted",
		v1alpha1.ConditionProgrammed: "Programmed=False " + v1alpha1.ReasonRefsNotResolved,
		v1alpha1.ConditionDegraded:   "Degraded=True " + v1alpha1.ReasonNoCapacity,
	} {
		if got := condition(ghost.Status.Conditions, typ); !strings.HasPrefix(got, want) {
			t.Errorf("Upstream ghost (its Service does not exist): %s; want %s", got, want)
		}
	}

	// the Degraded condition, as kubectl wait reads it
	degraded := func(phase, status, reason, message string) {
		t.Helper()
		took := testkit.Eventually(t, 15*time.Second, phase+": Degraded", func() (bool, string) {
			var u v1alpha1.Upstream
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, &u); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionDegraded)
			return c != nil && string(c.Status) == status && c.Reason == reason && strings.Contains(c.Message, message) &&
				c.ObservedGeneration == u.Generation, condition(u.Status.Conditions, v1alpha1.ConditionDegraded)
		})
		t.Logf("%s: Degraded=%s %s %v after the health write", phase, status, reason, took.Round(time.Millisecond))
	}
	degraded("healthy", "False", v1alpha1.ReasonHealthy, "")

	// both endpoints of zone a fail: priority 0 keeps 70 %, 30 % spills to us/c
	setHealth(t, ns, "a",
		v1alpha1.EndpointHealth{Address: "10.1.97.1", Port: 80, Probe: v1alpha1.ProbeUnhealthy},
		v1alpha1.EndpointHealth{Address: "10.1.97.2", Port: 80, Probe: v1alpha1.ProbeUnhealthy})
	degraded("spill", "True", v1alpha1.ReasonSpilling, "priority 1 receives 30.0%")
	columns("spill",
		map[string]map[string]any{
			"a": {"Traffic": "0.0%", "Availability": "0.0%"},
			"b": {"Traffic": "70.0%", "Availability": "100.0%"},
			"c": {"Traffic": "30.0%"},
		},
		map[string]map[string]any{"a": {"Eligible": 0, "Total": 2}, "b": {"Eligible": 2, "Total": 2}},
		map[string]map[string]any{"web": {"Degraded": "True", "Programmed": "True"}})
	var c v1alpha1.Locality
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "c"}, &c); err != nil {
		t.Fatal(err)
	}
	if s := c.Status; s.Traffic == nil || *s.Traffic != 300_000 || s.ShareInPriority == nil || *s.ShareInPriority != 1_000_000 ||
		s.Availability == nil || *s.Availability != 1_000_000 || s.EffectiveWeight == nil || *s.EffectiveWeight != 1_000_000 {
		t.Errorf("Locality c during the spill: %+v; want traffic 300000, all of priority 1, availability and effective weight 1000000", s)
	}

	// health comes back
	setHealth(t, ns, "a")
	degraded("recovered", "False", v1alpha1.ReasonHealthy, "")
	columns("recovered", map[string]map[string]any{"a": {"Traffic": "50.0%"}, "c": {"Traffic": "0.0%"}},
		map[string]map[string]any{"a": {"Eligible": 2}}, map[string]map[string]any{"web": {"Degraded": "False"}})

	// Events: one per transition, none for the healthy objects' first status
	got := waitEvents(t, ns, "Lease/poise-status-writer Normal LeaderElected",
		"Upstream/web Warning Spilling", "Upstream/web Normal Recovered",
		"Upstream/ghost Warning ServiceNotFound", "Upstream/ghost Warning RefsNotResolved", "Upstream/ghost Warning NoCapacity")
	for _, e := range got {
		if strings.HasPrefix(e, "Locality/") || strings.HasPrefix(e, "EndpointSet/") {
			t.Errorf("Event %q: a healthy object's status calls for none", e)
		}
	}
}

// TestConflictedLocality: a second Locality for the same (upstream,
// priority, locality) with another weight is the only one rejected, with
// reason Conflicted naming the older one, which keeps placing the group.
func TestConflictedLocality(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	id := v1alpha1.LocalityID{Region: "eu", Zone: "a"}
	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "web", Locality: id,
			Endpoints: []v1alpha1.Endpoint{{Address: "10.2.0.1", Port: 80}}}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "z-first", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "web", LocalityID: id, Weight: new(int64(3))}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	startPlane(t, ns, "one")
	testkit.Eventually(t, 15*time.Second, "Locality z-first places the group", func() (bool, string) {
		var l v1alpha1.Locality
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "z-first"}, &l); err != nil {
			return false, err.Error()
		}
		return l.Status.TrafficPercent == "100.0%", fmt.Sprintf("%+v", l.Status)
	})
	// creation timestamps have a resolution of a second: the newer is
	// created once the clock (the apiserver's, on this machine) is past
	// the older's second
	var first v1alpha1.Locality
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "z-first"}, &first); err != nil {
		t.Fatal(err)
	}
	created := first.CreationTimestamp.Time
	testkit.Eventually(t, 5*time.Second, "the second after z-first's creation", func() (bool, string) {
		return time.Now().Truncate(time.Second).After(created), "created " + created.String()
	})
	newer := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "a-second", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "web", LocalityID: id, Weight: new(int64(5))}}
	if err := k8s.Create(t.Context(), newer); err != nil {
		t.Fatal(err)
	}
	if !newer.CreationTimestamp.After(created) {
		t.Fatalf("a-second created at %v, not after z-first (%v): the test tells neither by age", newer.CreationTimestamp, created)
	}
	took := testkit.Eventually(t, 15*time.Second, "only the newer Locality is Conflicted", func() (bool, string) {
		var a, z v1alpha1.Locality
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "a-second"}, &a); err != nil {
			return false, err.Error()
		}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "z-first"}, &z); err != nil {
			return false, err.Error()
		}
		ca := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionAccepted)
		cz := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionAccepted)
		ok := ca != nil && ca.Status == metav1.ConditionFalse && ca.Reason == v1alpha1.ReasonConflicted && strings.Contains(ca.Message, ns+"/z-first is older") &&
			cz != nil && cz.Status == metav1.ConditionTrue && z.Status.TrafficPercent == "100.0%" && a.Status.Traffic == nil
		return ok, fmt.Sprintf("newer: %s %+v; older: %s %+v", condition(a.Status.Conditions, v1alpha1.ConditionAccepted), a.Status,
			condition(z.Status.Conditions, v1alpha1.ConditionAccepted), z.Status)
	})
	t.Logf("the newer Locality is Conflicted %v after its creation; the older keeps the group", took.Round(time.Millisecond))
	waitEvents(t, ns, "Locality/a-second Warning Conflicted")
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, &u); err != nil {
		t.Fatal(err)
	}
	if len(u.Status.Localities) != 1 || u.Status.Localities[0].LocalityWeight != 3 {
		t.Errorf("Upstream web localities %+v; want one of weight 3, the older Locality's", u.Status.Localities)
	}
}

// TestProgrammedFollowsNACKs: an xDS client of the leader that rejects an
// upstream's endpoints makes its Upstream Programmed=False
// (RejectedByClients) with the client's reason; when that client goes, the
// Upstream is Programmed again, its revision unmoved.
func TestProgrammedFollowsNACKs(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "web",
			Endpoints: []v1alpha1.Endpoint{{Address: "10.3.0.1", Port: 80}}}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	p := startPlane(t, ns, "one")
	programmed := func(what, status, reason, message string) v1alpha1.Upstream {
		t.Helper()
		var u v1alpha1.Upstream
		took := testkit.Eventually(t, 15*time.Second, what, func() (bool, string) {
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, &u); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionProgrammed)
			return c != nil && string(c.Status) == status && c.Reason == reason && strings.Contains(c.Message, message),
				condition(u.Status.Conditions, v1alpha1.ConditionProgrammed)
		})
		t.Logf("%s: %v", what, took.Round(time.Millisecond))
		return u
	}
	before := programmed("published", "True", v1alpha1.ReasonProgrammed, "")

	conn, err := grpc.NewClient(p.addrs.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "nacker", UserAgentName: "envoy"}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{ns + "/web"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("EDS for %s/web: %v, %d resources", ns, err, len(resp.GetResources()))
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{ns + "/web"},
		ResponseNonce: resp.GetNonce(), ErrorDetail: &statuspb.Status{Code: 3, Message: "endpoint 10.3.0.1 refused by test"}}); err != nil {
		t.Fatal(err)
	}
	during := programmed("the client NACKs", "False", conditions.ReasonRejectedByClients, "endpoint 10.3.0.1 refused by test")
	if during.Status.Revision != before.Status.Revision {
		t.Errorf("revision moved from %d to %d on a NACK", before.Status.Revision, during.Status.Revision)
	}
	if c := meta.FindStatusCondition(during.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted %+v during the NACK; want True", c)
	}

	cancel()
	programmed("the client goes", "True", v1alpha1.ReasonProgrammed, "")
	waitEvents(t, ns, "Upstream/web Warning RejectedByClients", "Upstream/web Normal Recovered")
}
