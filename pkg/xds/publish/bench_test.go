package publish_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"fmt"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
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
	b.Run("full-rebuild", func(b *testing.B) { benchFullRebuild(b, full) })
	b.Run("endpoint-flip", func(b *testing.B) {
		benchAlternating(b, full, [2]topology.Batch{topologytest.Flip(2500, 0), topologytest.Flip(2500, 1)}, func(st publish.Stats) {
			if st.Upstreams != 1 || st.EndpointOnly != 1 || st.Changes.Of(clusterType) != 0 {
				b.Fatalf("an endpoint flip published %+v", st)
			}
		})
	})
}

// BenchmarkFlipBySize is one endpoint flip, source to bytes, on topologies of
// 10k, 100k and 1M endpoints (500, 5,000 and 50,000 upstreams of 20): its
// cost should not grow with the topology.
func BenchmarkFlipBySize(b *testing.B) {
	for _, n := range []int{500, 5000, 50000} {
		b.Run(fmt.Sprintf("endpoints=%d", 20*n), func(b *testing.B) {
			benchAlternating(b, topologytest.Batch(n), [2]topology.Batch{topologytest.Flip(n/2, 0), topologytest.Flip(n/2, 1)}, func(st publish.Stats) {
				if st.Upstreams != 1 || st.EndpointOnly != 1 {
					b.Fatalf("an endpoint flip published %+v", st)
				}
			})
		})
	}
}

// benchFullRebuild measures applying full to a fresh Directory and publishing it all.
func benchFullRebuild(b *testing.B, full topology.Batch) {
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
}

// benchAlternating publishes full once, then measures applying the two batches in turn
// and publishing each change; check sees every publication.
func benchAlternating(b *testing.B, full topology.Batch, batches [2]topology.Batch, check func(publish.Stats)) {
	d := topology.NewDirectory()
	snap, err := d.Apply(full)
	if err != nil {
		b.Fatal(err)
	}
	p := publish.New(newCache(), "bench", nil)
	if _, err := p.Publish(snap); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		snap, err := d.Apply(batches[i%2])
		if err != nil {
			b.Fatal(err)
		}
		st, err := p.Publish(snap)
		if err != nil {
			b.Fatal(err)
		}
		check(st)
	}
}

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// spatialBench is the 100k-endpoint topology plus one spatial domain: 20 replicas on the
// first 20 upstreams, 4 products, 500 partitions on a 1° grid.
func spatialBench() topology.Batch {
	b := topologytest.Batch(5000)
	dom := partitionmap.Domain{Name: "bench", GridDeg: 1, MaxCells: 256, CapPercent: partitionmap.NoCap}
	for r := range 20 {
		dom.Replicas = append(dom.Replicas, partitionmap.Replica{Name: fmt.Sprintf("r%02d", r), Upstream: topologytest.UpstreamName(r), Region: fmt.Sprintf("region-%d", r%5)})
	}
	for p := range 4 {
		dom.Products = append(dom.Products, partitionmap.Product{Name: fmt.Sprintf("p%d", p), PathPrefix: fmt.Sprintf("/p%d", p),
			AllowedRegions: []string{fmt.Sprintf("region-%d", p), fmt.Sprintf("region-%d", (p+1)%5)}})
	}
	b.PutSpatialDomain(topology.SpatialDomain{Key: topology.Key{Namespace: "bench", Name: "bench"}, Domain: dom})
	for i := range 500 {
		w, s := float64(i%36*10-180), float64(i/36*10-80)
		b.PutPartition(topology.Partition{Key: topology.Key{Namespace: "bench", Name: fmt.Sprintf("part-%03d", i)}, Domain: "bench",
			Extent:   partitionmap.BBox{West: w, South: s, East: w + 12, North: min(s+12, 90)},
			Replicas: []string{fmt.Sprintf("r%02d", i%20), fmt.Sprintf("r%02d", (i+7)%20)}})
	}
	return b
}

// replicaDown takes every endpoint of synthetic upstream u out of service (down) or
// back (!down): the replica on it loses or regains all capacity.
func replicaDown(u int, down bool) topology.Batch {
	var b topology.Batch
	for r := range topologytest.Regions {
		s := topologytest.Set(u, r, nil)
		for i := range s.Endpoints {
			if down {
				s.Endpoints[i].Admin = weights.Unavailable
			}
		}
		b.PutEndpointSet(s)
	}
	return b
}

// BenchmarkPublishSpatial compares a full rebuild with the incremental paths a spatial
// domain adds: an endpoint flip outside any replica (the domain is not touched), inside
// a replica (its CLAs and the pools, no RDS), and a replica losing all capacity (RDS
// with the new DATA). With 16 more domains, each exported to its own namespace alone
// (17 audience classes of the spatial route), the shared domain's replica health
// renders every class's route again, and one tenant's replica health its class's alone.
func BenchmarkPublishSpatial(b *testing.B) {
	full := spatialBench()
	b.Run("full-rebuild", func(b *testing.B) { benchFullRebuild(b, full) })
	tenants := spatialBench()
	for i := range spatialTenants {
		topologytest.SpatialDomain(&tenants, tenantDomain(i), []string{"."})
	}
	for _, bc := range []struct {
		name   string
		full   topology.Batch
		batch  func(i int) topology.Batch
		routes int
	}{
		{"flip-outside-replicas", full, func(i int) topology.Batch { return topologytest.Flip(2500, i) }, 0},
		{"flip-inside-replica", full, func(i int) topology.Batch { return topologytest.Flip(3, i) }, 0},
		{"replica-health", full, func(i int) topology.Batch { return replicaDown(3, i%2 == 1) }, 1},
		{fmt.Sprintf("classes=%d/replica-health", spatialTenants+1), tenants, func(i int) topology.Batch { return replicaDown(3, i%2 == 1) }, 1},
		{fmt.Sprintf("classes=%d/tenant-replica-health", spatialTenants+1), tenants, func(i int) topology.Batch {
			admin := weights.Ready
			if i%2 == 1 {
				admin = weights.Unavailable
			}
			var b topology.Batch
			b.PutEndpointSet(topologytest.SpatialReplicaSet(tenantDomain(3), admin))
			return b
		}, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchAlternating(b, bc.full, [2]topology.Batch{bc.batch(0), bc.batch(1)}, func(st publish.Stats) {
				if st.Changes.Of(routeType) != bc.routes {
					b.Fatalf("published %v routes, want %d", st.Changes, bc.routes)
				}
			})
		})
	}
}

// spatialTenants is how many namespaces have a SpatialDomain of their own,
// exported to them alone, in the audience-class benchmarks.
const spatialTenants = 16

func tenantDomain(i int) topology.Key {
	return topology.Key{Namespace: fmt.Sprintf("tenant-%02d", i), Name: fmt.Sprintf("dom-%02d", i)}
}

const routeType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
