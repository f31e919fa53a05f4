package loadgen

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The node shapes real clients send.
const (
	// EnvoyUserAgent and EnvoyVersion are what Envoy sends as
	// user_agent_name and user_agent_build_version.
	EnvoyUserAgent = "envoy"
	EnvoyVersion   = "1.36.2"
	// GRPCUserAgent and GRPCVersion are what grpc-go sends as
	// user_agent_name and user_agent_version.
	GRPCUserAgent = "gRPC Go"
	GRPCVersion   = "1.85.0"
	// FeatureNoOverprovisioning is the client feature by which the plane
	// renders a client per endpoint; grpc-go sends it, with
	// FeatureResourceInSotW.
	FeatureNoOverprovisioning = "envoy.lb.does_not_support_overprovisioning"
	FeatureResourceInSotW     = "xds.config.resource-in-sotw"
	// Envoy's own client features.
	featureSendAllClusters = "envoy.lrs.supports_send_all_clusters"
	featureIgnoreTTL       = "envoy.config.supports-resource-ttl"
)

// NodeShape is the node a simulated client sends.
type NodeShape struct {
	Kind     Kind
	ID       string
	Cluster  string
	Region   string
	Zone     string
	Metadata map[string]string
	// Features are its client features; nil is its kind's.
	Features []string
	// UserAgent is its user_agent_name; empty is its kind's.
	UserAgent string
}

// DefaultFeatures are the client features a kind sends.
func DefaultFeatures(k Kind) []string {
	if k == GRPC {
		return []string{FeatureNoOverprovisioning, FeatureResourceInSotW}
	}
	return []string{featureSendAllClusters, featureIgnoreTTL}
}

// Proto is the node as a message.
func (n NodeShape) Proto() *core.Node {
	features := n.Features
	if features == nil {
		features = DefaultFeatures(n.Kind)
	}
	out := &core.Node{Id: n.ID, Cluster: n.Cluster, ClientFeatures: features}
	if n.Region != "" || n.Zone != "" {
		out.Locality = &core.Locality{Region: n.Region, Zone: n.Zone}
	}
	if len(n.Metadata) > 0 {
		fields := make(map[string]*structpb.Value, len(n.Metadata))
		for k, v := range n.Metadata {
			fields[k] = structpb.NewStringValue(v)
		}
		out.Metadata = &structpb.Struct{Fields: fields}
	}
	switch n.Kind {
	case GRPC:
		out.UserAgentName = GRPCUserAgent
		out.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: GRPCVersion}
	default:
		out.UserAgentName = EnvoyUserAgent
		out.UserAgentVersionType = &core.Node_UserAgentBuildVersion{UserAgentBuildVersion: &core.BuildVersion{
			Version: envoyVersion()}}
	}
	if n.UserAgent != "" {
		out.UserAgentName = n.UserAgent
	}
	return out
}

// envoyVersion is EnvoyVersion as a semantic version message.
func envoyVersion() *typev3.SemanticVersion {
	var major, minor, patch uint32
	_, _ = fmt.Sscanf(EnvoyVersion, "%d.%d.%d", &major, &minor, &patch)
	return &typev3.SemanticVersion{MajorNumber: major, MinorNumber: minor, Patch: patch}
}

// Marshal is the node serialized, deterministically.
func (n NodeShape) Marshal() ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(n.Proto())
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", n.ID, err)
	}
	return b, nil
}
