package publish_test

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcp "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/translate"
)

// BenchmarkColdBuild builds and marshals every resource of the
// 100k-endpoint topology from scratch, for Poise (the Directory resolving
// and computing every upstream, then the publication into the cache, as
// at start-up) and, in the same run, for the anchor: the same resources
// built as protobuf messages from the already computed topology and handed
// to go-control-plane's snapshot cache, which marshals each one to version
// it (what a control plane built on go-control-plane does on a full
// rebuild). The anchor leaves out the resolving and the weights; Poise
// includes them.
func BenchmarkColdBuild(b *testing.B) {
	full := topologytest.Batch(5000)
	b.Run("poise", func(b *testing.B) { benchFullRebuild(b, full) })
	b.Run("go-control-plane", func(b *testing.B) {
		snap, err := topology.NewDirectory().Apply(full)
		if err != nil {
			b.Fatal(err)
		}
		ups := snap.Upstreams()
		b.ReportAllocs()
		for b.Loop() {
			for v := range translate.NumRenderings {
				res := map[resource.Type][]types.Resource{}
				for _, u := range ups {
					cla, err := translate.Endpoints(u, v)
					if err != nil {
						b.Fatal(err)
					}
					c, err := translate.Cluster(u, v)
					if err != nil {
						b.Fatal(err)
					}
					r, err := translate.Route(u)
					if err != nil {
						b.Fatal(err)
					}
					res[resource.EndpointType] = append(res[resource.EndpointType], cla)
					res[resource.ClusterType] = append(res[resource.ClusterType], c)
					res[resource.RouteType] = append(res[resource.RouteType], r)
					if v == translate.PerEndpoint {
						l, err := translate.Listener(u)
						if err != nil {
							b.Fatal(err)
						}
						res[resource.ListenerType] = append(res[resource.ListenerType], l)
					}
				}
				s, err := gcp.NewSnapshot("bench-1", res)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.ConstructVersionMap(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
