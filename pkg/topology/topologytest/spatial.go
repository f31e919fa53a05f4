package topologytest

import (
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// SpatialDomain puts into b a serving SpatialDomain k, exported to exportTo
// (nil: no rule, the control plane's default), of one replica "r" in region
// "eu" on an Upstream of its own (k.Name+"-up", one Ready endpoint) and one
// product "p" on path prefix "/p".
func SpatialDomain(b *topology.Batch, k topology.Key, exportTo []string) {
	up := topology.Key{Namespace: k.Namespace, Name: k.Name + "-up"}
	b.PutUpstream(topology.Upstream{Key: up, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane})
	b.PutEndpointSet(SpatialReplicaSet(k, weights.Ready))
	b.PutSpatialDomain(topology.SpatialDomain{Key: k, ExportTo: topology.NewExport(exportTo, k.Namespace),
		Domain: partitionmap.Domain{Name: k.Name, GridDeg: 5, MaxCells: 256, CapPercent: partitionmap.NoCap,
			Replicas: []partitionmap.Replica{{Name: "r", Upstream: up.Name, Region: "eu"}},
			Products: []partitionmap.Product{{Name: "p", PathPrefix: "/p", AllowedRegions: []string{"eu"}}}}})
}

// SpatialReplicaSet is the endpoint set of SpatialDomain k's replica, its
// one endpoint in admin state: weights.Unavailable takes the replica's
// capacity away, and changes the domain's virtual host.
func SpatialReplicaSet(k topology.Key, admin weights.AdminState) topology.EndpointSet {
	up := topology.Key{Namespace: k.Namespace, Name: k.Name + "-up"}
	return topology.EndpointSet{Key: up, Upstream: up.Name, Locality: weights.Locality{Region: "eu", Zone: "a"},
		Endpoints: []topology.Endpoint{{Address: "10.9.0.1", Port: 8080, Weight: 1, Admin: admin}}}
}
