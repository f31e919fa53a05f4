// Package topologytest builds synthetic topologies for benchmarks and tests
// of the packages that consume topology snapshots.
package topologytest

import (
	"fmt"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Regions are the three localities every synthetic upstream spreads over.
var Regions = []string{"eu-west", "eu-central", "us-east"}

// Batch is n upstreams in namespace "bench", each with 20 endpoints over
// three localities (7, 7 and 6, weights 1..3): 5,000 upstreams make the
// 100k-endpoint topology of the benchmarks.
func Batch(n int) topology.Batch {
	var b topology.Batch
	for u := range n {
		b.PutUpstream(Upstream(u))
		for r := range Regions {
			b.PutEndpointSet(Set(u, r, nil))
		}
	}
	return b
}

// Upstream is synthetic upstream u.
func Upstream(u int) topology.Upstream {
	return topology.Upstream{Key: topology.Key{Namespace: "bench", Name: UpstreamName(u)}, Policy: weights.DefaultPolicy(),
		HealthAdjustment: topology.ControlPlane, LoadBalancing: "RoundRobin", Protocol: "HTTP2"}
}

// ReportingBatch is Batch(n) with load reporting: upstream u reports every
// intervals[u] (zero: not at all; upstreams past the list do not report).
func ReportingBatch(n int, intervals ...time.Duration) topology.Batch {
	b := Batch(n)
	for u, d := range intervals[:min(n, len(intervals))] {
		up := Upstream(u)
		up.LoadReportInterval = d
		b.PutUpstream(up)
	}
	return b
}

// UpstreamName is the name of synthetic upstream u.
func UpstreamName(u int) string { return fmt.Sprintf("svc-%04d", u) }

// Set is the endpoint set of upstream u in region r; the endpoints whose
// indexes are in unhealthy report probe Unhealthy.
func Set(u, r int, unhealthy map[int]bool) topology.EndpointSet {
	name := UpstreamName(u)
	s := topology.EndpointSet{
		Key:      topology.Key{Namespace: "bench", Name: fmt.Sprintf("%s-%s", name, Regions[r])},
		Upstream: name, Locality: weights.Locality{Region: Regions[r]},
	}
	n := 7
	if r == 2 {
		n = 6
	}
	for i := range n {
		e := topology.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", u/250, u%250, r*10+i), Port: 8080, Weight: uint64(1 + i%3)}
		if unhealthy[i] {
			e.Health.Probe = weights.ProbeUnhealthy
			e.Health.ProbeOrigin = "bench"
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// Flip is a batch that sets upstream u's first locality healthy (even i) or
// with one endpoint probe-Unhealthy (odd i): applying Flip(u, 0) and
// Flip(u, 1) in turn changes one endpoint's health each time.
func Flip(u, i int) topology.Batch {
	var unhealthy map[int]bool
	if i%2 == 1 {
		unhealthy = map[int]bool{3: true}
	}
	var b topology.Batch
	b.PutEndpointSet(Set(u, 0, unhealthy))
	return b
}
