package translate

import (
	"fmt"
	"strconv"

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
	"poise.dev/poise/pkg/weights"
)

// Resources are everything published for one upstream.
type Resources struct {
	Cluster   *cluster.Cluster
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
	if r.Cluster, err = Cluster(u); err != nil {
		return nil, err
	}
	for i := Rendering(0); i < NumRenderings; i++ {
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

var lbPolicies = map[string]cluster.Cluster_LbPolicy{
	"RoundRobin":   cluster.Cluster_ROUND_ROBIN,
	"LeastRequest": cluster.Cluster_LEAST_REQUEST,
	"Random":       cluster.Cluster_RANDOM,
	"RingHash":     cluster.Cluster_RING_HASH,
	"Maglev":       cluster.Cluster_MAGLEV,
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		// anypb.New fails only for a nil or unregistered message: a bug here.
		panic(fmt.Sprintf("translate: cannot wrap %T: %v", m, err))
	}
	return a
}

// Cluster is the CDS resource: EDS over ADS with locality-weighted load
// balancing. In ControlPlane mode Envoy's own panic is off: only selectable
// endpoints are published, all HEALTHY, so it has nothing to panic about.
func Cluster(u *topology.UpstreamState) (*cluster.Cluster, error) {
	up := u.Upstream
	name := ClusterName(up.Key)
	lb, ok := lbPolicies[up.LoadBalancing]
	if !ok {
		lb = cluster.Cluster_ROUND_ROBIN
	}
	panicThreshold := 0.0
	if up.HealthAdjustment == topology.Proxy {
		panicThreshold = float64(up.Policy.PanicThreshold)
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		ConnectTimeout:       connectTimeout(up),
		LbPolicy:             lb,
		CommonLbConfig: &cluster.Cluster_CommonLbConfig{
			HealthyPanicThreshold: &typev3.Percent{Value: panicThreshold},
			LocalityConfigSpecifier: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		TypedExtensionProtocolOptions: protocolOptions(up),
	}
	return c, check(u, "Cluster", c)
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

// Endpoints is the EDS resource of one upstream in one rendering.
func Endpoints(u *topology.UpstreamState, r Rendering) (*endpoint.ClusterLoadAssignment, error) {
	var cla *endpoint.ClusterLoadAssignment
	if u.Upstream.HealthAdjustment == topology.Proxy {
		cla = delegated(u)
	} else {
		cla = exact(u, r)
	}
	return cla, check(u, "ClusterLoadAssignment ("+r.String()+")", cla)
}

func lbEndpoint(e weights.Endpoint, weight uint64, health core.HealthStatus) *endpoint.LbEndpoint {
	return &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Protocol: core.SocketAddress_TCP, Address: e.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.Port},
			}}},
		}},
		HealthStatus:        health,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(weight)),
	}
}

func envoyLocality(l weights.Locality) *core.Locality {
	return &core.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
}

// exact is the ControlPlane rendering of specs/xds-publishing.md: priority
// 0 carries every (priority, locality) with traffic, weighted by its traffic
// in millionths; standby localities follow as priorities 1..N.
func exact(u *topology.UpstreamState, r Rendering) *endpoint.ClusterLoadAssignment {
	res := u.Result
	cla := &endpoint.ClusterLoadAssignment{
		ClusterName: ClusterName(u.Upstream.Key),
		Policy: &endpoint.ClusterLoadAssignment_Policy{
			// The loads already carry the factor. Below 100 Envoy would apply
			// it a second time to a fully HEALTHY priority 0 and spill part of
			// its traffic to the standby priorities, so it never goes below 100.
			OverprovisioningFactor: wrapperspb.UInt32(max(u.Upstream.Policy.OverprovisioningFactor, 100)),
		},
	}
	if res.Outcome != weights.Routable {
		return cla // no endpoints: the proxy answers "no healthy upstream"
	}
	if res.DroppedMillionths > 0 {
		cla.Policy.DropOverloads = []*endpoint.ClusterLoadAssignment_Policy_DropOverload{{
			Category: "panic",
			DropPercentage: &typev3.FractionalPercent{
				Numerator: uint32(res.DroppedMillionths), Denominator: typev3.FractionalPercent_MILLION,
			},
		}}
	}
	taken := map[weights.Locality]bool{}
	for li := range res.Localities {
		l := &res.Localities[li]
		if l.Traffic == 0 {
			continue
		}
		loc := l.Locality
		// Repeat the suffix while the name is taken: a source sub_zone may
		// itself end in "~p<n>" and equal another's suffixed name.
		for taken[loc] {
			loc.SubZone += PrioritySuffix + strconv.FormatUint(uint64(l.Priority), 10)
		}
		taken[loc] = true
		if r == PerEndpoint {
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, _ := u.EndpointResult(ei)
				if er.Selectable && er.Share > 0 {
					cla.Endpoints = append(cla.Endpoints, perEndpointLocality(loc, e, er.Share, 0))
				}
			}
			continue
		}
		lle := &endpoint.LocalityLbEndpoints{
			Locality:            envoyLocality(loc),
			LoadBalancingWeight: wrapperspb.UInt32(uint32(l.Traffic)),
		}
		for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
			er, e, _ := u.EndpointResult(ei)
			if er.Selectable {
				lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, e.Weight, core.HealthStatus_HEALTHY))
			}
		}
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	standby(u, r, cla)
	return cla
}

// standby appends, as EDS priorities 1..N in source-priority order, the
// localities that get no traffic now but have eligible endpoints, so a proxy
// can fail over before the next push.
func standby(u *topology.UpstreamState, r Rendering, cla *endpoint.ClusterLoadAssignment) {
	res := u.Result
	next := uint32(1)
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		added := false
		var perEndpoint []*endpoint.LocalityLbEndpoints
		var perEndpointWeights []uint64
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			if l.Traffic > 0 {
				continue
			}
			lle := &endpoint.LocalityLbEndpoints{
				Locality:            envoyLocality(l.Locality),
				LoadBalancingWeight: wrapperspb.UInt32(uint32(l.LocalityWeight)),
				Priority:            next,
			}
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, _ := u.EndpointResult(ei)
				if !er.Eligible {
					continue
				}
				if r == PerEndpoint {
					perEndpoint = append(perEndpoint, perEndpointLocality(l.Locality, e, 1, next))
					perEndpointWeights = append(perEndpointWeights, l.LocalityWeight*e.Weight)
					continue
				}
				lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, e.Weight, core.HealthStatus_HEALTHY))
			}
			if r == Weighted && len(lle.LbEndpoints) > 0 {
				cla.Endpoints = append(cla.Endpoints, lle)
				added = true
			}
		}
		if len(perEndpoint) > 0 {
			// locality weight × endpoint weight, scaled to millionths so the
			// per-priority sum stays within what clients accept
			for i, w := range weights.Apportion(weights.Million, perEndpointWeights) {
				perEndpoint[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(max(w, 1)))
			}
			cla.Endpoints = append(cla.Endpoints, perEndpoint...)
			added = true
		}
		if added {
			next++
		}
	}
}

func perEndpointLocality(loc weights.Locality, e weights.Endpoint, weight uint64, priority uint32) *endpoint.LocalityLbEndpoints {
	loc.SubZone += EndpointSuffix + hostPort(e.Address, e.Port)
	return &endpoint.LocalityLbEndpoints{
		Locality:            envoyLocality(loc),
		LbEndpoints:         []*endpoint.LbEndpoint{lbEndpoint(e, 1, core.HealthStatus_HEALTHY)},
		LoadBalancingWeight: wrapperspb.UInt32(uint32(weight)),
		Priority:            priority,
	}
}

func hostPort(addr string, port uint32) string {
	for i := 0; i < len(addr); i++ {
		if addr[i] == ':' {
			return "[" + addr + "]:" + strconv.FormatUint(uint64(port), 10)
		}
	}
	return addr + ":" + strconv.FormatUint(uint64(port), 10)
}

// delegated is the Proxy rendering: the source topology as is, with health
// statuses, for the proxy's own math.
func delegated(u *topology.UpstreamState) *endpoint.ClusterLoadAssignment {
	res := u.Result
	cla := &endpoint.ClusterLoadAssignment{
		ClusterName: ClusterName(u.Upstream.Key),
		Policy: &endpoint.ClusterLoadAssignment_Policy{
			OverprovisioningFactor: wrapperspb.UInt32(u.Upstream.Policy.OverprovisioningFactor),
		},
	}
	next := uint32(0)
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		added := false
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			lle := &endpoint.LocalityLbEndpoints{
				Locality:            envoyLocality(l.Locality),
				LoadBalancingWeight: wrapperspb.UInt32(uint32(l.LocalityWeight)),
				Priority:            next,
			}
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, _ := u.EndpointResult(ei)
				if health, ok := delegatedHealth(er, e); ok {
					lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, e.Weight, health))
				}
			}
			if len(lle.LbEndpoints) > 0 {
				cla.Endpoints = append(cla.Endpoints, lle)
				added = true
			}
		}
		if added {
			next++
		}
	}
	return cla
}

// delegatedHealth maps an endpoint's state to the EDS status the proxy
// understands. Out-of-scope and Unavailable endpoints are not published.
func delegatedHealth(er weights.EndpointResult, e weights.Endpoint) (core.HealthStatus, bool) {
	switch er.Reason {
	case weights.ReasonOutOfScope, weights.ReasonUnavailable:
		return 0, false
	case weights.ReasonDraining:
		return core.HealthStatus_DRAINING, true
	case weights.ReasonProbeUnhealthy, weights.ReasonCircuitOpen, weights.ReasonOutlierEjected:
		return core.HealthStatus_UNHEALTHY, true
	}
	if e.Probe == weights.ProbeHealthy {
		return core.HealthStatus_HEALTHY, true
	}
	return core.HealthStatus_UNKNOWN, true
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
	l := &listener.Listener{
		Name:        ListenerName(k),
		ApiListener: &listener.ApiListener{ApiListener: mustAny(m)},
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
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: ClusterName(k)},
				}},
			}},
		}},
	}
	return rc, check(u, "RouteConfiguration", rc)
}
