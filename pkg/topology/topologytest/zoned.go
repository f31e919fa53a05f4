package topologytest

import (
	"fmt"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Zones are the zones of Zoned, in zone order.
var Zones = []affinity.Zone{{Region: "eu", Zone: "a"}, {Region: "eu", Zone: "b"}, {Region: "us", Zone: "c"}}

// Zoned is upstream k under localityAffinity mode (none for None) with two
// endpoints of weight 1 in each of Zones, "10.0.Z.E" port 80 (Z the zone's
// index, E the endpoint's): without affinity each zone takes a third. edit
// changes the upstream before it is put.
func Zoned(k topology.Key, mode affinity.Mode, edit ...func(*topology.Upstream)) topology.Batch {
	var b topology.Batch
	u := topology.Upstream{Key: k, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane,
		LoadBalancing: "RoundRobin", Protocol: "HTTP2"}
	if mode != affinity.None {
		u.Affinity = &topology.Affinity{Mode: mode}
	}
	for _, f := range edit {
		f(&u)
	}
	b.PutUpstream(u)
	for i, z := range Zones {
		s := topology.EndpointSet{Key: topology.Key{Namespace: k.Namespace, Name: k.Name + "-" + z.Zone}, Upstream: k.Name,
			Locality: weights.Locality{Region: z.Region, Zone: z.Zone}}
		for j := range 2 {
			s.Endpoints = append(s.Endpoints, topology.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i, j), Port: 80, Weight: 1})
		}
		b.PutEndpointSet(s)
	}
	return b
}
