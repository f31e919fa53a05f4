package publish_test

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
)

// clusterIn is the cluster named name in one view, decoded.
func clusterIn(t *testing.T, c *xdscache.Cache, v translate.Rendering, name string) (*xdscache.Entry, *cluster.Cluster) {
	t.Helper()
	for _, e := range c.Resources(int(v))[resource.ClusterType] {
		if e.Name == name {
			var cl cluster.Cluster
			if err := e.Any.UnmarshalTo(&cl); err != nil {
				t.Fatal(err)
			}
			return e, &cl
		}
	}
	t.Fatalf("view %s has no cluster %s", v, name)
	return nil, nil
}

// TestClustersArePublishedPerRendering: Envoy's view gets the configured
// policy, the gRPC view ROUND_ROBIN; an upstream whose
// two renderings are the same bytes keeps one entry for both views, and a
// change of policy re-sends both.
func TestClustersArePublishedPerRendering(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	b := topologytest.Batch(2)
	maglev := topologytest.Upstream(1)
	maglev.LoadBalancing = "Maglev"
	b.PutUpstream(maglev)
	if _, err := p.Publish(apply(t, d, b)); err != nil {
		t.Fatal(err)
	}
	for v := range translate.NumRenderings {
		if err := publish.Consistent(c.Resources(int(v))); err != nil {
			t.Fatalf("view %s: %v", v, err)
		}
	}
	rrName := xdsname.Cluster(topologytest.Upstream(0).Key)
	envoyRR, _ := clusterIn(t, c, translate.Weighted, rrName)
	grpcRR, _ := clusterIn(t, c, translate.PerEndpoint, rrName)
	if envoyRR != grpcRR {
		t.Error("a RoundRobin upstream's cluster is two entries; its renderings are the same bytes")
	}
	name := xdsname.Cluster(maglev.Key)
	_, envoy := clusterIn(t, c, translate.Weighted, name)
	_, grpc := clusterIn(t, c, translate.PerEndpoint, name)
	if envoy.GetLbPolicy() != cluster.Cluster_MAGLEV || envoy.GetMaglevLbConfig().GetTableSize().GetValue() != translate.MaglevTableSize {
		t.Errorf("Envoy's view: %v %v, want MAGLEV with table %d", envoy.GetLbPolicy(), envoy.GetMaglevLbConfig(), translate.MaglevTableSize)
	}
	if grpc.GetLbPolicy() != cluster.Cluster_ROUND_ROBIN || grpc.GetLbConfig() != nil {
		t.Errorf("gRPC's view: %v %v, want ROUND_ROBIN and no lb_config", grpc.GetLbPolicy(), grpc.GetLbConfig())
	}

	maglev.LoadBalancing = "RingHash"
	var change topology.Batch
	change.PutUpstream(maglev)
	st, err := p.Publish(apply(t, d, change))
	if err != nil {
		t.Fatal(err)
	}
	// Envoy's cluster changes; gRPC's is the same bytes, and keeps its entry
	if st.Changes.Of(resource.ClusterType) != 1 || st.Changes.Of(resource.EndpointType) != 2 {
		t.Fatalf("a policy change published %+v", st)
	}
	_, envoy = clusterIn(t, c, translate.Weighted, name)
	if envoy.GetLbPolicy() != cluster.Cluster_RING_HASH || envoy.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != translate.RingSize {
		t.Errorf("Envoy's view after the change: %v %v", envoy.GetLbPolicy(), envoy.GetRingHashLbConfig())
	}
}
