package xdsproxy

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceName is the name a SotW response's resource goes by: what the
// client files it under, read from the bytes as the client reads them.
func ResourceName(a *anypb.Any) (string, error) {
	var m interface{ GetName() string }
	switch a.GetTypeUrl() {
	case resource.ClusterType:
		m = &cluster.Cluster{}
	case resource.ListenerType:
		m = &listener.Listener{}
	case resource.RouteType:
		m = &route.RouteConfiguration{}
	case resource.EndpointType:
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
			return "", err
		}
		return cla.GetClusterName(), nil
	default:
		return "", fmt.Errorf("type %s", a.GetTypeUrl())
	}
	if err := proto.Unmarshal(a.GetValue(), m.(proto.Message)); err != nil {
		return "", err
	}
	return m.GetName(), nil
}
