package translate

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"poise.dev/poise/pkg/topology"
)

// RingSize is the ring a RING_HASH cluster asks Envoy for (its minimum and
// maximum ring size both). An endpoint of share p owns about p·RingSize
// points placed by hashing, so the hash space it covers has a standard
// deviation of √(p(1−p)/RingSize) around p: at 2¹⁸ that is at most 0.098
// percentage points (Envoy's default minimum, 1,024, gives 1.6). The ring
// costs Envoy about 24 bytes a point, per priority: 6 MB.
const RingSize = 1 << 18

// MaglevTableSize is the table a MAGLEV cluster asks Envoy for: a prime
// (Envoy requires one), its default. Envoy fills the table in rounds in
// proportion to the endpoints' weights, so each endpoint's count of entries
// is off from p·MaglevTableSize by less than 1 + p·H entries for H
// endpoints (one more for floating-point ties): explain states (2 + p·H) / 65,537.
const MaglevTableSize = 65_537

// LbPolicy is what a rendering publishes for an upstream's loadBalancing.
type LbPolicy struct {
	// Policy is the cluster's lb_policy.
	Policy cluster.Cluster_LbPolicy
	// Layout is the ClusterLoadAssignment layout: Weighted, or PerEndpoint
	// where the endpoint weights must travel as locality weights.
	Layout Rendering
	// RingSize is the ring hash ring, TableSize the Maglev table; 0 when
	// the policy has none.
	RingSize, TableSize uint64
}

// envoyLbPolicy maps the API's loadBalancing to Envoy's lb_policy; anything
// else (unset) is ROUND_ROBIN.
func envoyLbPolicy(s string) cluster.Cluster_LbPolicy {
	switch s {
	case "LeastRequest":
		return cluster.Cluster_LEAST_REQUEST
	case "Random":
		return cluster.Cluster_RANDOM
	case "RingHash":
		return cluster.Cluster_RING_HASH
	case "Maglev":
		return cluster.Cluster_MAGLEV
	}
	return cluster.Cluster_ROUND_ROBIN
}

// LbPolicyOf is how rendering r carries out the upstream's loadBalancing so
// that the split explain computes holds (docs/connect.md, "Load-balancing
// policies"):
//
//   - PerEndpoint (proxyless gRPC): ROUND_ROBIN whatever the policy. Each
//     endpoint is its own locality carrying its exact share, and grpc-go
//     weighs localities only under ROUND_ROBIN (xds_wrr_locality):
//     least_request ignores locality weights, RANDOM and MAGLEV are NACKed,
//     and ring_hash is capped at 4,096 points (GRPC_RING_HASH_CAP). Poise's
//     route for gRPC carries no hash policy, so grpc-go would hash a random
//     number per RPC: ring hash would give no affinity, only a less exact split.
//   - Weighted (Envoy): the configured policy. RANDOM ignores endpoint
//     weights inside a locality, so its endpoints travel as one locality each
//     (in ControlPlane mode; Proxy mode publishes the source topology as is).
//     RING_HASH and MAGLEV get a ring and a table large enough for the bound
//     explain states.
//   - PerEndpoint with spec.requestAffinity: RING_HASH, whether the policy is
//     RingHash or Maglev (gRPC clients have no Maglev), with the same ring
//     sizes as Envoy's, which the gRPC clients cap at their own limit
//     (4,096 by default). The route's hash policy keys each RPC; grpc-go
//     weighs each endpoint-locality by its share (docs/affinity-keys.md).
func LbPolicyOf(up topology.Upstream, r Rendering) LbPolicy {
	if r == PerEndpoint {
		if up.RequestAffinity != nil {
			return LbPolicy{Policy: cluster.Cluster_RING_HASH, Layout: PerEndpoint, RingSize: RingSize}
		}
		return LbPolicy{Policy: cluster.Cluster_ROUND_ROBIN, Layout: PerEndpoint}
	}
	p := LbPolicy{Policy: envoyLbPolicy(up.LoadBalancing), Layout: Weighted}
	switch p.Policy {
	case cluster.Cluster_RANDOM:
		if up.HealthAdjustment != topology.Proxy {
			p.Layout = PerEndpoint
		}
	case cluster.Cluster_RING_HASH:
		p.RingSize = RingSize
	case cluster.Cluster_MAGLEV:
		p.TableSize = MaglevTableSize
	}
	return p
}
