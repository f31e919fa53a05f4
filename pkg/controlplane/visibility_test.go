package controlplane_test

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/xds/server"
)

// TestDefaultExportTo: with the default "." the examples' upstreams (of
// namespace shop) are read by clients of shop only, and an anonymous
// client reads none; the audience comes from Config.Audience, not from the
// node, which claims shop.
func TestDefaultExportTo(t *testing.T) {
	t.Parallel()
	a, _ := startPlane(t, controlplane.Config{Paths: []string{"../../examples"}, DefaultExportTo: []string{"."},
		Audience: func(ctx context.Context) (server.Audience, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if ns := md.Get("x-test-namespace"); len(ns) > 0 {
				return server.Audience{Namespace: ns[0]}, nil
			}
			return server.Audience{}, nil
		}})
	conn, err := grpc.NewClient(a.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clusters := func(ns string) []string {
		t.Helper()
		c, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		if ns != "" {
			c = metadata.AppendToOutgoingContext(c, "x-test-namespace", ns)
		}
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(c)
		if err != nil {
			t.Fatal(err)
		}
		// the node claims shop: it proves nothing
		node := &core.Node{Id: "n", UserAgentName: "envoy", Cluster: "shop"}
		if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, res := range r.GetResources() {
			var c clusterv3.Cluster
			if err := res.UnmarshalTo(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c.GetName())
		}
		return out
	}
	shop, other, anon := clusters("shop"), clusters("other"), clusters("")
	if len(anon) != 0 || len(other) != 0 {
		t.Errorf("an anonymous client reads %v, one of namespace other %v: want nothing", anon, other)
	}
	if len(shop) == 0 {
		t.Error("a client of shop reads nothing: want shop's upstreams")
	}
}
