package topology

import (
	"fmt"
	"testing"

	"poise.dev/poise/pkg/weights"
)

// bigBatch is 5,000 upstreams × 20 endpoints over 3 localities: 100k endpoints.
func bigBatch(upstreams int) Batch {
	var b Batch
	regions := []string{"eu-west", "eu-central", "us-east"}
	for u := 0; u < upstreams; u++ {
		name := fmt.Sprintf("svc-%04d", u)
		b.PutUpstream(Upstream{Key: Key{"bench", name}, Policy: weights.DefaultPolicy(), HealthAdjustment: ControlPlane})
		for r, region := range regions {
			s := EndpointSet{Key: Key{"bench", fmt.Sprintf("%s-%s", name, region)}, Upstream: name, Locality: weights.Locality{Region: region}}
			n := 7
			if r == 2 {
				n = 6
			}
			for i := 0; i < n; i++ {
				s.Endpoints = append(s.Endpoints, Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", u/250, u%250, r*10+i), Port: 8080, Weight: uint64(1 + i%3)})
			}
			b.PutEndpointSet(s)
		}
	}
	return b
}

// BenchmarkApply compares one endpoint's health flip with a full rebuild of
// the same 100k-endpoint topology, in one run.
func BenchmarkApply(b *testing.B) {
	const upstreams = 5000
	full := bigBatch(upstreams)
	b.Run("full-rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := NewDirectory()
			if _, err := d.Apply(full); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("endpoint-flip", func(b *testing.B) {
		d := NewDirectory()
		if _, err := d.Apply(full); err != nil {
			b.Fatal(err)
		}
		base := d.sets[Key{"bench", "svc-2500-eu-west"}]
		flips := [2]EndpointSet{base, base}
		flips[1].Endpoints = append([]Endpoint(nil), base.Endpoints...)
		flips[1].Endpoints[3].Health.Probe = weights.ProbeUnhealthy
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			var one Batch
			one.PutEndpointSet(flips[i%2])
			if _, err := d.Apply(one); err != nil {
				b.Fatal(err)
			}
		}
	})
}
