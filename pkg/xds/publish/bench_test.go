package publish_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

func newCache() *xdscache.Cache {
	return xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
}

// BenchmarkPublish compares, on the same 100k-endpoint topology (5,000
// upstreams × 20 endpoints over 3 localities), publishing one endpoint's
// health flip incrementally with translating and publishing everything.
// Both include the topology Directory's work for the change.
func BenchmarkPublish(b *testing.B) {
	full := topologytest.Batch(5000)
	b.Run("full-rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := topology.NewDirectory()
			snap, err := d.Apply(full)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := publish.New(newCache(), "bench", nil).Publish(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("endpoint-flip", func(b *testing.B) {
		d := topology.NewDirectory()
		snap, err := d.Apply(full)
		if err != nil {
			b.Fatal(err)
		}
		p := publish.New(newCache(), "bench", nil)
		if _, err := p.Publish(snap); err != nil {
			b.Fatal(err)
		}
		flips := [2]topology.Batch{topologytest.Flip(2500, 0), topologytest.Flip(2500, 1)}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			snap, err := d.Apply(flips[i%2])
			if err != nil {
				b.Fatal(err)
			}
			st, err := p.Publish(snap)
			if err != nil {
				b.Fatal(err)
			}
			if st.Upstreams != 1 || st.EndpointOnly != 1 || st.Changes[clusterType] != 0 {
				b.Fatalf("an endpoint flip published %+v", st)
			}
		}
	})
}

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
