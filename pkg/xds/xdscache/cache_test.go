package xdscache_test

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcp "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

var (
	envoy = &core.Node{Id: "envoy", UserAgentName: "envoy"}
	grpc  = &core.Node{Id: "grpc", UserAgentName: "gRPC Go", ClientFeatures: []string{translate.FeatureNoOverprovisioning}}
)

func newCache() *xdscache.Cache {
	return xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
}

func mustEntry(t *testing.T, name, version string, m proto.Message) *xdscache.Entry {
	t.Helper()
	e, err := xdscache.NewEntry(name, version, m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func cluster(name string, sec int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(sec) * time.Second)}
}

func cla(name string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}},
		}}}},
	}}}
}

func change(view int, typeURL string, e *xdscache.Entry) xdscache.Change {
	return xdscache.Change{View: view, TypeURL: typeURL, Name: e.Name, Entry: e}
}

// watch opens a SotW watch as the server would, with a subscription that
// holds returned, and gives back the channel it answers on.
func watch(t *testing.T, c *xdscache.Cache, node *core.Node, typeURL string, names []string, returned map[string]string) (chan gcp.Response, func()) {
	t.Helper()
	sub := stream.NewSotwSubscription(names, true)
	if returned != nil {
		sub.SetReturnedResources(returned)
	}
	out := make(chan gcp.Response, 1)
	cancel, err := c.CreateWatch(&gcp.Request{Node: node, TypeUrl: typeURL, ResourceNames: names}, sub, out)
	if err != nil {
		t.Fatal(err)
	}
	return out, cancel
}

func answer(t *testing.T, out chan gcp.Response) *discovery.DiscoveryResponse {
	t.Helper()
	select {
	case r := <-out:
		d, err := r.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		return d
	default:
		t.Fatal("watch not answered")
	}
	return nil
}

func silent(t *testing.T, out chan gcp.Response) {
	t.Helper()
	select {
	case r := <-out:
		d, _ := r.GetDiscoveryResponse()
		t.Fatalf("unexpected answer %s with %d resources", d.GetVersionInfo(), len(d.GetResources()))
	default:
	}
}

func TestNewEntryIsDeterministic(t *testing.T) {
	m := cla("c1", 80)
	a, b := mustEntry(t, "c1", "v1", m), mustEntry(t, "c1", "v1", proto.Clone(m))
	if !slices.Equal(a.Any.GetValue(), b.Any.GetValue()) || a.Any.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("entries differ or have type %s", a.Any.GetTypeUrl())
	}
}

// A wildcard client whose view has nothing of a type is still answered once
// something is published, so Envoy does not hold its start for it.
func TestFirstApplyAnswersEmptyViews(t *testing.T) {
	c := newCache()
	lds, _ := watch(t, c, envoy, resource.ListenerType, nil, nil)
	cds, _ := watch(t, c, envoy, resource.ClusterType, nil, nil)
	eds, _ := watch(t, c, envoy, resource.EndpointType, []string{"c1"}, nil)
	silent(t, lds) // nothing published yet
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(1, resource.ListenerType, mustEntry(t, "svc", "v1", &listenerv3.Listener{Name: "svc"})),
	}})
	for _, out := range []chan gcp.Response{lds, cds} {
		if r := answer(t, out); r.GetVersionInfo() != "v1" || len(r.GetResources()) != 0 {
			t.Fatalf("got %s with %d resources, want an empty v1", r.GetVersionInfo(), len(r.GetResources()))
		}
	}
	silent(t, eds) // a named CLA that does not exist is not answered

	// Once answered (and ACKed), an empty view stays quiet until it changes.
	lds = make(chan gcp.Response, 1)
	ack := &gcp.Request{Node: envoy, TypeUrl: resource.ListenerType, VersionInfo: "v1", ResponseNonce: "1"}
	if _, err := c.CreateWatch(ack, stream.NewSotwSubscription(nil, true), lds); err != nil {
		t.Fatal(err)
	}
	silent(t, lds)
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
		change(1, resource.ListenerType, mustEntry(t, "svc2", "v2", &listenerv3.Listener{Name: "svc2"})),
	}})
	silent(t, lds)
}

func TestOneAnyForEveryViewAndClient(t *testing.T) {
	c := newCache()
	c1 := mustEntry(t, "c1", "v1", cluster("c1", 1))
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, resource.ClusterType, c1), change(1, resource.ClusterType, c1)}})
	for _, n := range []*core.Node{envoy, grpc, envoy} {
		out, _ := watch(t, c, n, resource.ClusterType, nil, nil)
		if r := answer(t, out); len(r.GetResources()) != 1 || r.GetResources()[0] != c1.Any {
			t.Fatalf("%s was not handed the published *anypb.Any", n.GetId())
		}
	}
	for view := range 2 {
		if got := c.Resources(view)[resource.ClusterType]; len(got) != 1 || got[0] != c1 {
			t.Fatalf("view %d holds %v", view, got)
		}
	}
}

// A client that NACKed a version keeps it in its returned map: the same
// content is not offered again; a new version is.
func TestNACKedVersionIsNotOfferedAgain(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "c1", "v1", cla("c1", 1))),
		change(0, resource.EndpointType, mustEntry(t, "c2", "v1", cla("c2", 1))),
	}})
	sub := stream.NewSotwSubscription([]string{"c1", "c2"}, true)
	sub.SetReturnedResources(map[string]string{"c1": "v1", "c2": "v1"})
	out := make(chan gcp.Response, 1)
	req := func() *gcp.Request {
		return &gcp.Request{Node: envoy, TypeUrl: resource.EndpointType, ResourceNames: []string{"c1", "c2"}, VersionInfo: "v1"}
	}
	if _, err := c.CreateWatch(req(), sub, out); err != nil {
		t.Fatal(err)
	}
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c1", "v2", cla("c1", 0)))}})
	resp := <-out
	if d, _ := resp.GetDiscoveryResponse(); len(d.GetResources()) != 1 {
		t.Fatalf("sent %d CLAs, want the changed one", len(d.GetResources()))
	}
	sub.SetReturnedResources(resp.GetReturnedResources()) // the server does this when it sends

	nack := req()
	nack.ErrorDetail = &status.Status{Message: "bad"}
	if _, err := c.CreateWatch(nack, sub, out); err != nil {
		t.Fatal(err)
	}
	silent(t, out)
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c1", "v3", cla("c1", 2)))}})
	if d := answer(t, out); d.GetVersionInfo() != "v3" || len(d.GetResources()) != 1 {
		t.Fatalf("got %s with %d resources, want v3 with c1", d.GetVersionInfo(), len(d.GetResources()))
	}
}

func TestVersionsMoveOnlyWithChanges(t *testing.T) {
	c := newCache()
	e1 := mustEntry(t, "c1", "v1", cla("c1", 1))
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, resource.EndpointType, e1)}})
	// Deleting what does not exist is no change.
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{{View: 0, TypeURL: resource.EndpointType, Name: "nope"}}})
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.ClusterType, mustEntry(t, "c1", "v3", cluster("c1", 1)))}})
	out, _ := watch(t, c, envoy, resource.EndpointType, []string{"c1"}, nil)
	if d := answer(t, out); d.GetVersionInfo() != "v1" || d.GetResources()[0] != e1.Any {
		t.Fatalf("EDS at %s, want v1 with the original entry", d.GetVersionInfo())
	}
	if got := c.Resources(0)[resource.EndpointType]; got[0] != e1 {
		t.Fatalf("the unchanged entry was replaced")
	}
}

// A control plane that starts with nothing to publish still answers.
func TestEmptyFirstUpdateAnswers(t *testing.T) {
	c := newCache()
	cds, _ := watch(t, c, grpc, resource.ClusterType, nil, nil)
	c.Apply(xdscache.Update{Version: "v1"})
	if r := answer(t, cds); r.GetVersionInfo() != "v1" || len(r.GetResources()) != 0 {
		t.Fatalf("got %s with %d resources, want an empty v1", r.GetVersionInfo(), len(r.GetResources()))
	}
}
