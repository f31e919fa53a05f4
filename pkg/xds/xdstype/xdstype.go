package xdstype

import (
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
)

// Type is one served xDS type.
type Type struct {
	// URL is the type URL requests and resources carry.
	URL string
	// Short names the type for people, logs and metric labels (CDS, EDS…).
	Short string
	// FullState types are sent whole in SotW: a resource missing from a
	// response is deleted on the client. They also allow the legacy
	// wildcard (an empty first request).
	FullState bool
	// Service is the generated description of the type's own discovery
	// service (SotW, Delta and Fetch of this type alone); the server
	// registers it with its own handlers.
	Service *grpc.ServiceDesc
}

// The served types by index. The index is also the order in which changes
// reach a client: clusters before their endpoints, listeners before their
// routes (make before break).
const (
	Clusters = iota
	Endpoints
	Listeners
	Routes
)

var table = [...]Type{
	Clusters:  {URL: resource.ClusterType, Short: "CDS", FullState: true, Service: &clusterservice.ClusterDiscoveryService_ServiceDesc},
	Endpoints: {URL: resource.EndpointType, Short: "EDS", Service: &endpointservice.EndpointDiscoveryService_ServiceDesc},
	Listeners: {URL: resource.ListenerType, Short: "LDS", FullState: true, Service: &listenerservice.ListenerDiscoveryService_ServiceDesc},
	Routes:    {URL: resource.RouteType, Short: "RDS", Service: &routeservice.RouteDiscoveryService_ServiceDesc},
}

// Count is the number of served types: the length of anything kept per type.
const Count = len(table)

// All is every served type, by index.
func All() [Count]Type { return table }

// At is the type of index i (0 ≤ i < Count).
func At(i int) Type { return table[i] }

// Index is the index of a served type URL, or -1.
func Index(typeURL string) int {
	for i := range table {
		if table[i].URL == typeURL {
			return i
		}
	}
	return -1
}

// Short is the short name of a served type URL; any other URL is its own name.
func Short(typeURL string) string {
	if i := Index(typeURL); i >= 0 {
		return table[i].Short
	}
	return typeURL
}

// URLs are the served type URLs, by index.
func URLs() []string {
	out := make([]string, Count)
	for i := range table {
		out[i] = table[i].URL
	}
	return out
}

// Shorts are the short names of the served types, by index.
func Shorts() []string {
	out := make([]string, Count)
	for i := range table {
		out[i] = table[i].Short
	}
	return out
}
