package translate

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// Resources are everything published for one upstream.
type Resources struct {
	Clusters  [NumRenderings]*cluster.Cluster
	Endpoints [NumRenderings]*endpoint.ClusterLoadAssignment
	Listener  *listener.Listener
	Route     *route.RouteConfiguration
}

// ValidationError is a generated resource that failed its own Validate: a
// bug in the translator, reported on the upstream, never published.
type ValidationError struct {
	Upstream topology.Key
	Resource string
	Err      error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("upstream %s: generated %s is invalid: %v", e.Upstream, e.Resource, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

type validator interface{ ValidateAll() error }

func check(u *topology.UpstreamState, what string, v validator) error {
	if err := v.ValidateAll(); err != nil {
		return &ValidationError{Upstream: u.Upstream.Key, Resource: what, Err: err}
	}
	return nil
}

// Upstream translates every resource of one upstream.
func Upstream(u *topology.UpstreamState) (*Resources, error) {
	var (
		r   Resources
		err error
	)
	for i := Rendering(0); i < NumRenderings; i++ {
		if r.Clusters[i], err = Cluster(u, i); err != nil {
			return nil, err
		}
		if r.Endpoints[i], err = Endpoints(u, i); err != nil {
			return nil, err
		}
	}
	if r.Listener, err = Listener(u); err != nil {
		return nil, err
	}
	if r.Route, err = Route(u); err != nil {
		return nil, err
	}
	return &r, nil
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

// selfSource is a ConfigSource naming the management server the client
// already talks to: the lrs_server of a Cluster whose load is reported to
// Poise (Envoy and gRPC accept only self there).
func selfSource() *core.ConfigSource {
	return &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Self{Self: &core.SelfConfigSource{}}}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		// anypb.New fails only for a nil or unregistered message: a bug here.
		panic(fmt.Sprintf("translate: cannot wrap %T: %v", m, err))
	}
	return a
}

// Cluster is the CDS resource in rendering r: EDS over ADS with
// locality-weighted load balancing, and the load-balancing policy of
// LbPolicyOf. In ControlPlane mode Envoy's own panic is off: only selectable
// endpoints are published, all HEALTHY, so it has nothing to panic about.
func Cluster(u *topology.UpstreamState, r Rendering) (*cluster.Cluster, error) {
	up := u.Upstream
	name := xdsname.Cluster(up.Key)
	lb := LbPolicyOf(up, r)
	panicThreshold := 0.0
	if up.HealthAdjustment == topology.Proxy {
		panicThreshold = float64(up.Policy.PanicThreshold)
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		ConnectTimeout:       connectTimeout(up),
		LbPolicy:             lb.Policy,
		CommonLbConfig: &cluster.Cluster_CommonLbConfig{
			HealthyPanicThreshold: &typev3.Percent{Value: panicThreshold},
			LocalityConfigSpecifier: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		TypedExtensionProtocolOptions: protocolOptions(up),
		CircuitBreakers:               CircuitBreakers(up),
	}
	if up.LoadReportInterval > 0 {
		// clients report this cluster's load to Poise over LRS
		c.LrsServer = selfSource()
	}
	switch {
	case lb.RingSize > 0:
		c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(lb.RingSize), MaximumRingSize: wrapperspb.UInt64(lb.RingSize),
		}}
	case lb.TableSize > 0:
		c.LbConfig = &cluster.Cluster_MaglevLbConfig_{MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{
			TableSize: wrapperspb.UInt64(lb.TableSize),
		}}
	}
	return c, check(u, "Cluster ("+r.String()+")", c)
}

// connectTimeout is the upstream's connect timeout, 5s when unset.
func connectTimeout(up topology.Upstream) *durationpb.Duration {
	if up.ConnectTimeout <= 0 {
		return durationpb.New(5e9)
	}
	return durationpb.New(up.ConnectTimeout)
}

// protocolOptions makes Envoy speak HTTP/2 to HTTP2 and GRPC upstreams; nil otherwise.
func protocolOptions(up topology.Upstream) map[string]*anypb.Any {
	if up.Protocol != "HTTP2" && up.Protocol != "GRPC" {
		return nil
	}
	opts := &httpopts.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		},
	}
	return map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(opts)}
}

// Listener is the API listener a proxyless gRPC client resolves: an
// HttpConnectionManager over ADS RDS with the router filter last.
func Listener(u *topology.UpstreamState) (*listener.Listener, error) {
	k := u.Upstream.Key
	m := &hcm.HttpConnectionManager{
		StatPrefix: ListenerName(k),
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: RouteName(k),
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
		}},
	}
	// the manager carries the upstream's names: one that protobuf cannot
	// encode is an error for this upstream, not a bug
	a, err := anypb.New(m)
	if err != nil {
		return nil, &ValidationError{Upstream: k, Resource: "Listener", Err: err}
	}
	l := &listener.Listener{
		Name:        ListenerName(k),
		ApiListener: &listener.ApiListener{ApiListener: a},
	}
	return l, check(u, "Listener", l)
}

// Route sends everything to the upstream's cluster.
func Route(u *topology.UpstreamState) (*route.RouteConfiguration, error) {
	k := u.Upstream.Key
	rc := &route.RouteConfiguration{
		Name: RouteName(k),
		VirtualHosts: []*route.VirtualHost{{
			Name:    RouteName(k),
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: xdsname.Cluster(k)},
					HashPolicy:       hashPolicies(u.Upstream.RequestAffinity),
					RetryPolicy:      RetryPolicy(u.Upstream),
				}},
			}},
		}},
	}
	return rc, check(u, "RouteConfiguration", rc)
}
