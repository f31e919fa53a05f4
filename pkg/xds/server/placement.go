package server

import (
	"context"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/xds/xdscache"
)

// Where a client is placed. A client's locality decides the zone whose
// variants it is sent, the zone its Balanced demand counts in and the region
// and zone its load reports are filed under. Where the identity the
// interceptors proved names a locality (a pod-bound token: its pod's node's
// topology.kubernetes.io/region and zone labels), the client is placed there,
// whatever its node message claims; otherwise (a certificate, a token bound
// to no pod, a node without those labels, an anonymous client) the node's
// claim stands. Every RPC reads its client's locality through placementOf:
// the SotW and Delta streams when they open (the cache's stream is placed
// once, for its life: its identity does not change), unary Fetch and LRS
// when they read their node.

// placement is where the identity of a call places its client.
type placement struct {
	// proven: the identity names a locality, and region and zone are it.
	proven       bool
	region, zone string
}

// placementOf is the placement of the client of the RPC of ctx.
func placementOf(ctx context.Context) placement {
	id, _ := IdentityFrom(ctx)
	return placed(id)
}

// placed is where id places its client.
func placed(id identity.Identity) placement {
	if !id.Locality.Known() {
		return placement{}
	}
	return placement{proven: true, region: id.Locality.Region, zone: id.Locality.Zone}
}

// locality is the region and zone of a client of node n: the proven ones,
// else those n claims.
func (p placement) locality(n *core.Node) (region, zone string) {
	if p.proven {
		return p.region, p.zone
	}
	l := n.GetLocality()
	return l.GetRegion(), l.GetZone()
}

// class is the locality class (xdscache.ClassKey) of a client of node n:
// that of the proven locality, else of n's claim. A proven zone without a
// region has no class: the client is sent the base resources and counted in
// no zone's demand, whatever its node claims.
func (p placement) class(n *core.Node) string {
	return xdscache.ClassKey(p.locality(n))
}
