package translate

import core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

// Rendering is how a client is sent its ClusterLoadAssignments.
type Rendering int

const (
	// Weighted: one locality per (priority, locality) with endpoint weights.
	// Envoy applies both locality and endpoint weights exactly.
	Weighted Rendering = iota
	// PerEndpoint: one locality per endpoint, weighted by its share, for
	// clients that cannot weigh endpoints inside a locality (proxyless gRPC).
	PerEndpoint
	// NumRenderings counts the renderings.
	NumRenderings
)

func (r Rendering) String() string {
	if r == PerEndpoint {
		return "per-endpoint"
	}
	return "weighted"
}

// FeatureNoOverprovisioning is the client feature with which a node says it
// ignores overprovisioning and endpoint weights (gRPC announces it).
const FeatureNoOverprovisioning = "envoy.lb.does_not_support_overprovisioning"

// RenderingFor chooses a node's rendering from its announced features, never
// from configuration: what the client says it can do decides.
func RenderingFor(n *core.Node) Rendering {
	for _, f := range n.GetClientFeatures() {
		if f == FeatureNoOverprovisioning {
			return PerEndpoint
		}
	}
	return Weighted
}
