package publish_test

import (
	"fmt"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
)

// affineBatch is topologytest.Batch(n) with upstream u under PreferSameZone.
func affineBatch(n, u int) topology.Batch {
	b := topologytest.Batch(n)
	up := topologytest.Upstream(u)
	up.Affinity = &topology.Affinity{Mode: affinity.PreferSameZone}
	b.PutUpstream(up)
	return b
}

// classesOf is k client classes of Envoy's view, in zones spread over the
// synthetic regions.
func classesOf(k int, extra ...string) *topology.ClientClasses {
	views := make([][]string, translate.NumRenderings)
	for i := range k {
		views[translate.Weighted] = append(views[translate.Weighted], topologytest.Regions[i%len(topologytest.Regions)]+"/"+fmt.Sprintf("z%d", i))
	}
	views[translate.Weighted] = append(views[translate.Weighted], extra...)
	return topology.NewClientClasses(views)
}

// withClasses publishes k client classes, as the demand signal hands them
// to the Directory when clients of k zones connect.
func withClasses(tb testing.TB, d *topology.Directory, p *publish.Publisher, k int) {
	tb.Helper()
	var b topology.Batch
	b.SetClientClasses(classesOf(k))
	snap, err := d.Apply(b)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.Publish(snap); err != nil {
		tb.Fatal(err)
	}
	if got := snap.ClientClasses().Len(); got != k {
		tb.Fatalf("%d classes published, want %d", got, k)
	}
}

// BenchmarkFlipClasses is one endpoint flip of an upstream under
// PreferSameZone on the 100k-endpoint topology, with 0, 8 and 64 client
// classes connected: each class is one more derivation and encoding, so
// the cost grows with the classes and not with the topology.
func BenchmarkFlipClasses(b *testing.B) {
	const n, u = 5000, 2500
	for _, k := range []int{0, 8, 64} {
		b.Run(fmt.Sprintf("classes=%d", k), func(b *testing.B) {
			d := topology.NewDirectory()
			c := newCache()
			p := publish.New(c, "bench", nil)
			snap, err := d.Apply(affineBatch(n, u))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Publish(snap); err != nil {
				b.Fatal(err)
			}
			withClasses(b, d, p, k)
			flips := [2]topology.Batch{topologytest.Flip(u, 0), topologytest.Flip(u, 1)}
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
				if st.Changes.Of(resource.EndpointType) < 2 {
					b.Fatalf("a flip published %+v", st)
				}
			}
		})
	}
}

// TestFlipAllocsPerClass guards the allocations of a flip of an affinity
// upstream: what a flip allocates, plus a bounded number per client class
// (the class's derivation and its encoding), whatever the topology's size.
func TestFlipAllocsPerClass(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 10k-endpoint topology takes a second to build")
	}
	const n, u, k = 500, 250, 8
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	if _, err := p.Publish(apply(t, d, affineBatch(n, u))); err != nil {
		t.Fatal(err)
	}
	withClasses(t, d, p, k)
	flips := [2]topology.Batch{topologytest.Flip(u, 0), topologytest.Flip(u, 1)}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		i++
		st, err := p.Publish(apply(t, d, flips[i%2]))
		if err != nil || st.Changes.Of(resource.EndpointType) < 2 {
			t.Fatalf("a flip published %+v (%v)", st, err)
		}
	})
	limit := 30.0 + k*45
	if raceEnabled {
		limit += 16 + k*16
	}
	t.Logf("%d classes: %.0f allocations per flip", k, allocs)
	if allocs > limit {
		t.Errorf("a flip with %d classes allocates %.0f times, want at most %.0f", k, allocs, limit)
	}
}

// BenchmarkClassJoin is a client of a new class connecting and leaving
// while 16 classes have clients and 500 upstreams are under
// PreferSameZone: the Directory takes the classes (no upstream is resolved
// again) and the publication costs every upstream one derivation, for that
// class only, and not one per class already there.
func BenchmarkClassJoin(b *testing.B) {
	const n = 500
	batch := topologytest.Batch(n)
	for u := range n {
		up := topologytest.Upstream(u)
		up.Affinity = &topology.Affinity{Mode: affinity.PreferSameZone}
		batch.PutUpstream(up)
	}
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "bench", nil)
	snap, err := d.Apply(batch)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Publish(snap); err != nil {
		b.Fatal(err)
	}
	withClasses(b, d, p, 16)
	var join, leave topology.Batch
	join.SetClientClasses(classesOf(16, topologytest.Regions[0]+"/joiner"))
	leave.SetClientClasses(classesOf(16))
	b.ReportAllocs()
	for b.Loop() {
		for _, step := range []topology.Batch{join, leave} {
			snap, err := d.Apply(step)
			if err != nil {
				b.Fatal(err)
			}
			st, err := p.Publish(snap)
			if err != nil {
				b.Fatal(err)
			}
			if st.Changes.Of(resource.EndpointType) != n {
				b.Fatalf("a class joining or leaving published %+v, want %d variants", st.Changes, n)
			}
		}
	}
}

// BenchmarkDemandChange is the demand of one Balanced upstream of 20
// endpoints moving, with 0, 8 and 64 client classes connected, on the
// 100k-endpoint topology: one Directory revision that resolves that
// upstream again, and a publication of its variants, whatever the
// topology's size.
func BenchmarkDemandChange(b *testing.B) {
	const n, u = 5000, 2500
	for _, k := range []int{0, 8, 64} {
		b.Run(fmt.Sprintf("classes=%d", k), func(b *testing.B) {
			batch := topologytest.Batch(n)
			up := topologytest.Upstream(u)
			up.Affinity = &topology.Affinity{Mode: affinity.Balanced}
			batch.PutUpstream(up)
			d := topology.NewDirectory()
			p := publish.New(newCache(), "bench", nil)
			snap, err := d.Apply(batch)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Publish(snap); err != nil {
				b.Fatal(err)
			}
			withClasses(b, d, p, k)
			// every class's zone has demand; one zone's moves between 1 and 2
			var moves [2]topology.Batch
			for i := range moves {
				var zones []affinity.Demand
				for _, class := range classesOf(max(k, 1)).Of(int(translate.Weighted)) {
					zones = append(zones, affinity.Demand{Zone: topology.ClassZone(class), Weight: 1})
				}
				zones[0].Weight += uint64(i)
				moves[i].PutDemand(topologytest.Upstream(u).Key, topology.AppliedDemand{Zones: zones})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				snap, err := d.Apply(moves[i%2])
				if err != nil {
					b.Fatal(err)
				}
				st, err := p.Publish(snap)
				if err != nil {
					b.Fatal(err)
				}
				if st.Upstreams != 1 {
					b.Fatalf("a demand change published %+v", st)
				}
			}
		})
	}
}
