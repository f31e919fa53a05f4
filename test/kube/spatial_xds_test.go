package kube_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/partitionmap/luatest"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/test/kubemanifests"
	"poise.dev/poise/test/testkit"
)

// fetchEnvoy asks the xDS server for resources of one type as an Envoy would (names
// empty: wildcard).
func fetchEnvoy(t *testing.T, xdsAddr, typeURL string, names ...string) []*anypb.Any {
	t.Helper()
	return fetchADS(t, xdsAddr, &core.Node{Id: "spatial-envoy", Cluster: "edge", UserAgentName: "envoy"}, typeURL, names...)
}

// spatialLua returns the Lua chunk of the domain's VirtualHost in the published RDS.
func spatialLua(t *testing.T, xdsAddr, vhost string) (string, bool) {
	t.Helper()
	for _, a := range fetchEnvoy(t, xdsAddr, resource.RouteType, translate.SpatialRouteName) {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		for _, vh := range rc.GetVirtualHosts() {
			if vh.GetName() != vhost {
				continue
			}
			var pr luav3.LuaPerRoute
			if err := vh.GetTypedPerFilterConfig()[translate.SpatialLuaFilter].UnmarshalTo(&pr); err != nil {
				t.Fatal(err)
			}
			return pr.GetSourceCode().GetInlineString(), true
		}
	}
	return "", false
}

var dataVersion = regexp.MustCompile(`(?m)^  version = "([0-9a-f]+-h[01]+)",$`)

// TestSpatialPublishing: the spatial CRs of examples/spatial, applied to a real
// apiserver, publish the spatial listener and routes; a replica failing its probes
// republishes RDS with the new health; an invalid Partition is reported on its status
// and the rest of the domain keeps serving.
func TestSpatialPublishing(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	for _, u := range kubemanifests.Read(t, "../../examples/spatial") {
		if u.GetKind() == "Namespace" {
			continue // the objects go to the test's own namespace
		}
		u.SetNamespace(ns)
		if err := k8s.Create(t.Context(), u); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	p := startPlane(t, ns, "spatial")
	xds := p.addrs.XDS
	vhost := "spatial:" + ns + ":cadastre"

	// The listener and the routes reach an Envoy.
	var lua string
	took := testkit.Eventually(t, 15*time.Second, "spatial routes published", func() (bool, string) {
		var ok bool
		lua, ok = spatialLua(t, xds, vhost)
		return ok, "no virtual host " + vhost
	})
	t.Logf("spatial routes published %v after the plane was ready", took)
	var names []string
	for _, a := range fetchEnvoy(t, xds, resource.ListenerType) {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		names = append(names, l.GetName())
	}
	if len(names) != 1 || names[0] != translate.SpatialListenerName {
		t.Fatalf("Envoy listeners %v, want [%s]", names, translate.SpatialListenerName)
	}
	m := dataVersion.FindStringSubmatch(lua)
	if m == nil {
		t.Fatalf("no data version in the published Lua:\n%.400s", lua)
	}
	// replicas in name order: eu-central, eu-south (in maintenance), eu-west, us-east
	if !strings.HasSuffix(m[1], "-h1011") {
		t.Fatalf("published data version %s, want health 1011", m[1])
	}
	servedLua(t, "published Lua under LuaJIT", lua, "parcels", "8,48,9,49", "200\tlocality\tspatial:"+ns+":cadastre:eu-central")

	// The status says the same version.
	var dom v1alpha1.SpatialDomain
	testkit.Eventually(t, 10*time.Second, "SpatialDomain status", func() (bool, string) {
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "cadastre"}, &dom); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(dom.Status.Conditions, v1alpha1.ConditionProgrammed)
		return c != nil && c.Status == metav1.ConditionTrue && dom.Status.MapVersion == m[1] && dom.Status.Partitions == 11,
			fmt.Sprintf("status %+v", dom.Status)
	})
	if c := meta.FindStatusCondition(dom.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Reason != "NoLawfulReplica" || !strings.Contains(c.Message, "mining-claims") {
		t.Errorf("Accepted %+v: want NoLawfulReplica naming mining-claims", c)
	}

	// eu-central's endpoints fail their probes: its FailClosed Upstream loses all
	// capacity, and RDS is republished with eu-central unhealthy.
	start := time.Now()
	setHealth(t, ns, "cadastre-eu-central",
		v1alpha1.EndpointHealth{Address: "10.3.2.10", Port: 8080, Probe: v1alpha1.ProbeUnhealthy},
		v1alpha1.EndpointHealth{Address: "10.3.2.11", Port: 8080, Probe: v1alpha1.ProbeUnhealthy})
	testkit.Eventually(t, 10*time.Second, "RDS republished with eu-central unhealthy", func() (bool, string) {
		lua, _ = spatialLua(t, xds, vhost)
		m = dataVersion.FindStringSubmatch(lua)
		return m != nil && strings.HasSuffix(m[1], "-h0011"), fmt.Sprint(m)
	})
	t.Logf("health change → RDS with the new DATA in %v", time.Since(start))
	if !strings.Contains(lua, `{ name = "eu-central", region = "eu-central", cluster = "spatial:`+ns+`:cadastre:eu-central", healthy = false }`) {
		t.Fatalf("the new Lua does not mark eu-central unhealthy:\n%.900s", lua)
	}
	servedLua(t, "published Lua under LuaJIT after the health change", lua, "parcels", "8,48,9,49", "200\tlocality\tspatial:"+ns+":cadastre:eu-west")
	// The live explain-route decides the same on the same data version.
	var live explain.RouteReport
	if err := testkit.GetJSON(p.adminURL+"/debug/explain-route?domain=cadastre&product=parcels&bbox=8,48,9,49", &live); err != nil {
		t.Fatal(err)
	}
	if live.Result.Replica != "eu-west" || live.DataVersion != m[1] {
		t.Fatalf("live explain-route: %+v on data version %s, the Lua carries %s", live.Result, live.DataVersion, m[1])
	}

	// An invalid Partition (a replica the domain does not have) is reported on its
	// status; the domain keeps serving the rest.
	bad := &v1alpha1.Partition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scandinavia"}, Spec: v1alpha1.PartitionSpec{
		Domain: "cadastre", Extent: v1alpha1.PartitionExtent{West: 5, South: 55, East: 30, North: 70}, Replicas: []string{"eu-north"}}}
	if err := k8s.Create(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the invalid Partition reported", func() (bool, string) {
		var got v1alpha1.Partition
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(bad), &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonUnknownReplica && strings.Contains(c.Message, "spec.replicas[0]"),
			fmt.Sprintf("conditions %+v", got.Status.Conditions)
	})
	var good v1alpha1.Partition
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "germany"}, &good); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(good.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue || good.Status.Cells != 4 {
		t.Errorf("germany: %+v cells %d", c, good.Status.Cells)
	}
	after, ok := spatialLua(t, xds, vhost)
	if !ok || after != lua {
		t.Errorf("the invalid Partition changed what is served")
	}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "cadastre"}, &dom); err != nil {
		t.Fatal(err)
	}
	if dom.Status.Partitions != 11 {
		t.Errorf("status partitions %d, want 11 (the invalid one left out)", dom.Status.Partitions)
	}
}

// servedLua runs a published chunk under LuaJIT for one request, in a
// subtest of its own that is skipped (and so listed by make test) when LuaJIT
// is not installed, and wants "status\treason\tcluster".
func servedLua(t *testing.T, name, chunk, product, bbox, want string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		bin := luatest.Need(t)
		out := luatest.Run(t, bin, chunk, []luatest.Request{{Product: product, BBox: bbox, NoCRS: true, Path: "/collections/" + product + "/items"}})
		if out[0] != want {
			t.Fatalf("the published Lua under LuaJIT decided %q, want %q", out[0], want)
		}
	})
}
