package publish_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// snapshot loads the examples and every translate golden input together.
func snapshot(t *testing.T) *topology.Snapshot {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join("..", "translate", "testdata", "*", "input.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	set, err := manifest.Load(append(inputs, filepath.Join("..", "..", "..", "examples"))...)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// view builds what one rendering's view publishes, as the publisher lays
// it out: clusters, assignments and routes in every view, API listeners
// only in the per-endpoint (proxyless gRPC) view.
func view(t *testing.T, snap *topology.Snapshot, r translate.Rendering) map[string][]*xdscache.Entry {
	t.Helper()
	out := map[string][]*xdscache.Entry{}
	add := func(typeURL, name string, m proto.Message) {
		e, err := xdscache.NewEntry(name, "test-1", m)
		if err != nil {
			t.Fatal(err)
		}
		out[typeURL] = append(out[typeURL], e)
	}
	for _, u := range snap.Upstreams() {
		res, err := translate.Upstream(u)
		if err != nil {
			t.Fatal(err)
		}
		add(resource.ClusterType, res.Clusters[r].GetName(), res.Clusters[r])
		add(resource.EndpointType, res.Endpoints[r].GetClusterName(), res.Endpoints[r])
		add(resource.RouteType, res.Route.GetName(), res.Route)
		if r == translate.PerEndpoint {
			add(resource.ListenerType, res.Listener.GetName(), res.Listener)
		}
	}
	return out
}

// without returns a copy of res without the named entry of one type.
func without(t *testing.T, res map[string][]*xdscache.Entry, typeURL, name string) map[string][]*xdscache.Entry {
	t.Helper()
	out := map[string][]*xdscache.Entry{}
	found := false
	for tu, entries := range res {
		for _, e := range entries {
			if tu == typeURL && e.Name == name {
				found = true
				continue
			}
			out[tu] = append(out[tu], e)
		}
	}
	if !found {
		t.Fatalf("no %s %q to remove", xdstype.Short(typeURL), name)
	}
	return out
}

func with(t *testing.T, res map[string][]*xdscache.Entry, typeURL, name string, m proto.Message) map[string][]*xdscache.Entry {
	t.Helper()
	e, err := xdscache.NewEntry(name, "test-2", m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*xdscache.Entry{}
	for tu, entries := range res {
		out[tu] = slices.Clone(entries)
	}
	out[typeURL] = append(out[typeURL], e)
	return out
}

func wantMissing(t *testing.T, err error, want ...string) {
	t.Helper()
	var ie *publish.InconsistencyError
	if !errors.As(err, &ie) {
		t.Fatalf("Consistent = %v, want an *InconsistencyError naming %q", err, want)
	}
	if !slices.Equal(ie.Missing, want) {
		t.Errorf("missing %q, want %q", ie.Missing, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

func TestConsistentPublication(t *testing.T) {
	snap := snapshot(t)
	if len(snap.Upstreams()) < 10 {
		t.Fatalf("only %d upstreams loaded", len(snap.Upstreams()))
	}
	for r := range translate.NumRenderings {
		if err := publish.Consistent(view(t, snap, r)); err != nil {
			t.Errorf("%s view: %v", r, err)
		}
	}
	if err := publish.Consistent(nil); err != nil {
		t.Errorf("empty publication: %v", err)
	}
}

func TestConsistentMissingAssignment(t *testing.T) {
	snap := snapshot(t)
	for r := range translate.NumRenderings {
		res := without(t, view(t, snap, r), resource.EndpointType, "shop/catalog")
		wantMissing(t, publish.Consistent(res), `cluster shop/catalog needs EDS "shop/catalog"`)
	}
}

// TestConsistentMissingRouteOfAPIListener: go-control-plane's own
// Consistent does not open API listeners; ours must.
func TestConsistentMissingRouteOfAPIListener(t *testing.T) {
	res := without(t, view(t, snapshot(t), translate.PerEndpoint), resource.RouteType, "shop/checkout")
	wantMissing(t, publish.Consistent(res), `listener checkout.shop needs RDS "shop/checkout"`)
}

func TestConsistentMissingRouteOfFilterChain(t *testing.T) {
	m := &hcm.HttpConnectionManager{
		StatPrefix: "ingress",
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}},
			RouteConfigName: "ingress-routes",
		}},
	}
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	l := &listener.Listener{Name: "ingress", FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a},
	}}}}}
	res := with(t, view(t, snapshot(t), translate.Weighted), resource.ListenerType, "ingress", l)
	wantMissing(t, publish.Consistent(res), `listener ingress needs RDS "ingress-routes"`)
}

func TestConsistentMissingCluster(t *testing.T) {
	snap := snapshot(t)
	for r := range translate.NumRenderings {
		res := without(t, view(t, snap, r), resource.ClusterType, "shop/orders")
		wantMissing(t, publish.Consistent(res), `route shop/orders needs CDS "shop/orders"`)
	}
}

func TestConsistentMissingWeightedCluster(t *testing.T) {
	rc := &route.RouteConfiguration{Name: "split", VirtualHosts: []*route.VirtualHost{{
		Name: "split", Domains: []string{"*"},
		Routes: []*route.Route{{
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{
				WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
					{Name: "shop/catalog"}, {Name: "shop/gone"},
				}},
			}}},
		}},
	}}}
	res := with(t, view(t, snapshot(t), translate.Weighted), resource.RouteType, "split", rc)
	wantMissing(t, publish.Consistent(res), `route split needs CDS "shop/gone"`)
}

// TestConsistentServiceName: an EDS cluster needs the assignment named by
// its service_name when it has one, not by its own name.
func TestConsistentServiceName(t *testing.T) {
	c := &cluster.Cluster{
		Name:                 "shop/catalog-canary",
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{ServiceName: "shop/catalog-canary-eds"},
	}
	res := with(t, view(t, snapshot(t), translate.Weighted), resource.ClusterType, c.GetName(), c)
	wantMissing(t, publish.Consistent(res), `cluster shop/catalog-canary needs EDS "shop/catalog-canary-eds"`)
	// a service_name that exists is enough, whatever the cluster's name
	c2 := proto.Clone(c).(*cluster.Cluster)
	c2.EdsClusterConfig.ServiceName = "shop/catalog"
	res = with(t, view(t, snapshot(t), translate.Weighted), resource.ClusterType, c2.GetName(), c2)
	if err := publish.Consistent(res); err != nil {
		t.Errorf("cluster sharing an existing assignment: %v", err)
	}
}

// TestConsistentEveryBreak: several dangling references are all reported,
// sorted, in one error.
func TestConsistentEveryBreak(t *testing.T) {
	res := view(t, snapshot(t), translate.PerEndpoint)
	res = without(t, res, resource.EndpointType, "demo/seed")
	res = without(t, res, resource.RouteType, "users/profile")
	res = without(t, res, resource.ClusterType, "cdn/media")
	wantMissing(t, publish.Consistent(res),
		`cluster demo/seed needs EDS "demo/seed"`,
		`listener profile.users needs RDS "users/profile"`,
		`route cdn/media needs CDS "cdn/media"`,
	)
}
