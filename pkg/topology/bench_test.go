package topology_test

import (
	"testing"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
)

// BenchmarkApply compares one endpoint's health flip with a full rebuild of
// the same 100k-endpoint topology (5,000 upstreams × 20 endpoints), in one run.
func BenchmarkApply(b *testing.B) {
	full := topologytest.Batch(5000)
	b.Run("full-rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := topology.NewDirectory().Apply(full); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("endpoint-flip", func(b *testing.B) {
		d := topology.NewDirectory()
		if _, err := d.Apply(full); err != nil {
			b.Fatal(err)
		}
		flips := [2]topology.Batch{topologytest.Flip(2500, 0), topologytest.Flip(2500, 1)}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := d.Apply(flips[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
