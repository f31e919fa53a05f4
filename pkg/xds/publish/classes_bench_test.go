package publish_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// affineBatch is topologytest.Batch(n) with upstream u under PreferSameZone.
func affineBatch(n, u int) topology.Batch {
	b := topologytest.Batch(n)
	up := topologytest.Upstream(u)
	up.Affinity = &topology.Affinity{Mode: affinity.PreferSameZone}
	b.PutUpstream(up)
	return b
}

// withClasses connects one Envoy stream in each of k zones spread over the
// synthetic regions, runs the publisher's class loop, and waits until it
// renders for all k classes.
func withClasses(tb testing.TB, c *xdscache.Cache, p *publish.Publisher, k int) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.RunClasses(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	for i := range k {
		s := c.NewStream(false)
		s.SetNode(&core.Node{Id: fmt.Sprint(i), UserAgentName: "envoy",
			Locality: &core.Locality{Region: topologytest.Regions[i%len(topologytest.Regions)], Zone: fmt.Sprintf("z%d", i)}})
		tb.Cleanup(s.Close)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(p.Classes()[translate.Weighted]) != k {
		if time.Now().After(deadline) {
			tb.Fatalf("the publisher renders for %d classes, want %d", len(p.Classes()[translate.Weighted]), k)
		}
		time.Sleep(5 * time.Millisecond)
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
			p.SetCensus(c)
			snap, err := d.Apply(affineBatch(n, u))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Publish(snap); err != nil {
				b.Fatal(err)
			}
			withClasses(b, c, p, k)
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
	p.SetCensus(c)
	if _, err := p.Publish(apply(t, d, affineBatch(n, u))); err != nil {
		t.Fatal(err)
	}
	withClasses(t, c, p, k)
	flips := [2]topology.Batch{topologytest.Flip(u, 0), topologytest.Flip(u, 1)}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		i++
		st, err := p.Publish(apply(t, d, flips[i%2]))
		if err != nil || st.Changes.Of(resource.EndpointType) < 2 {
			t.Fatalf("a flip published %+v (%v)", st, err)
		}
	})
	limit := 40.0 + k*45
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
// PreferSameZone: each costs every upstream one derivation, for that class
// only, and not one per class already there.
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
	p.SetCensus(c)
	snap, err := d.Apply(batch)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Publish(snap); err != nil {
		b.Fatal(err)
	}
	withClasses(b, c, p, 16)
	b.ReportAllocs()
	for b.Loop() {
		s := c.NewStream(false)
		s.SetNode(&core.Node{Id: "joiner", UserAgentName: "envoy", Locality: &core.Locality{Region: topologytest.Regions[0], Zone: "joiner"}})
		waitClasses(b, p, 17)
		s.Close()
		waitClasses(b, p, 16)
	}
}

func waitClasses(b *testing.B, p *publish.Publisher, k int) {
	deadline := time.Now().Add(30 * time.Second)
	for len(p.Classes()[translate.Weighted]) != k {
		if time.Now().After(deadline) {
			b.Fatalf("%d classes, want %d", len(p.Classes()[translate.Weighted]), k)
		}
		time.Sleep(time.Millisecond)
	}
}
