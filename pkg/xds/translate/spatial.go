package translate

import (
	"fmt"
	"slices"
	"strings"

	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutation "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	stream "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	headermutation "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	lua "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// Names of the spatial routing resources and headers (docs/spatial.md).
const (
	SpatialListenerName = "spatial"
	SpatialRouteName    = "spatial"
	// SpatialLuaFilter is the HttpFilter name: the key of the LuaPerRoute in
	// typed_per_filter_config and of the route metadata the script reads.
	SpatialLuaFilter   = "spatial-lua"
	SpatialStripFilter = "strip-spatial"
	HeaderDomain       = "x-spatial-domain"
	HeaderCluster      = "x-spatial-cluster"
	// DefaultSpatialPort is where the spatial listener listens unless configured.
	DefaultSpatialPort = 10080
)

// SpatialOptions say where Envoy's spatial listener listens.
type SpatialOptions struct {
	Address string // default 0.0.0.0
	Port    uint32 // default DefaultSpatialPort
}

// SpatialDomainResources are the Envoy resources of one serving domain: a cluster and
// ClusterLoadAssignment per resolved replica and per product pool.
type SpatialDomainResources struct {
	Clusters  []*cluster.Cluster
	Endpoints []*endpoint.ClusterLoadAssignment
	// LuaClusters are the clusters the domain's Lua selects (see SpatialLua).
	LuaClusters partitionmap.Clusters
	// DataClusters are the clusters the Lua names; each must be in the same CDS.
	DataClusters []string
}

// SpatialLua is the chunk of a domain's VirtualHost: its DATA (map, health, clusters)
// and the fixed logic. It depends only on the domain's state, so an endpoint change
// inside a healthy replica never renders it again.
func SpatialLua(s *topology.SpatialState, cl partitionmap.Clusters) (string, error) {
	src, err := s.Map.RenderLua(s.Health, s.MapRevision, cl)
	if err != nil {
		return "", &SpatialError{Domain: s.Domain.Key, Err: err}
	}
	return src, nil
}

// SpatialError is a domain that cannot be rendered; nothing of it is published.
type SpatialError struct {
	Domain topology.Key
	Err    error
}

func (e *SpatialError) Error() string { return fmt.Sprintf("SpatialDomain %s: %v", e.Domain, e.Err) }
func (e *SpatialError) Unwrap() error { return e.Err }

// SpatialDomain renders one serving domain. upstream looks an Upstream up in the same
// snapshot. Replica clusters copy their Upstream's cluster settings and endpoints under
// the replica's name; a product's pool holds, as one locality per lawful healthy
// replica, that replica's selectable endpoints weighted by their computed shares. Both
// report their load to the control plane exactly when the domain has
// spec.loadReporting (spatialLrs).
//
// unchanged, when non-nil, names replicas (by index) whose Upstream the caller already
// rendered: their clusters are named in LuaClusters but not rendered again.
func SpatialDomain(s *topology.SpatialState, upstream func(topology.Key) *topology.UpstreamState, unchanged func(replica int) bool) (*SpatialDomainResources, error) {
	k := s.Domain.Key
	fail := func(err error) (*SpatialDomainResources, error) { return nil, &SpatialError{Domain: k, Err: err} }
	if !s.Serving() {
		return fail(fmt.Errorf("not serving"))
	}
	var out SpatialDomainResources
	var cl partitionmap.Clusters
	states := make([]*topology.UpstreamState, len(s.Replicas))
	for i, r := range s.Replicas {
		u := upstream(r.Upstream)
		states[i] = u
		if u == nil {
			cl.Replicas = append(cl.Replicas, "")
			continue
		}
		name := xdsname.ReplicaCluster(k, r.Name)
		cl.Replicas = append(cl.Replicas, name)
		if unchanged != nil && unchanged(i) {
			continue
		}
		c, err := Cluster(u, Weighted) // spatial routing is for Envoy
		if err != nil {
			return fail(err)
		}
		c.Name = name
		c.EdsClusterConfig.ServiceName = name
		c.LrsServer = spatialLrs(s)
		cla, err := Endpoints(u, Weighted)
		if err != nil {
			return fail(err)
		}
		cla.ClusterName = name
		out.Clusters = append(out.Clusters, c)
		out.Endpoints = append(out.Endpoints, cla)
	}
	dom := s.Map.Domain()
	for _, p := range dom.Products {
		name := xdsname.PoolCluster(k, p.Name)
		c, cla := pool(name, s, states, s.Map.Lawful(p.Name))
		if err := c.ValidateAll(); err != nil {
			return fail(fmt.Errorf("generated pool cluster %s is invalid: %w", name, err))
		}
		if err := cla.ValidateAll(); err != nil {
			return fail(fmt.Errorf("generated pool endpoints %s are invalid: %w", name, err))
		}
		out.Clusters = append(out.Clusters, c)
		out.Endpoints = append(out.Endpoints, cla)
		cl.Pools = append(cl.Pools, name)
	}
	out.LuaClusters = cl
	for _, c := range cl.Replicas {
		if c != "" {
			out.DataClusters = append(out.DataClusters, c)
		}
	}
	out.DataClusters = append(out.DataClusters, cl.Pools...)
	return &out, nil
}

// spatialLrs is the lrs_server of a domain's replica and pool clusters: the control
// plane itself when the domain has spec.loadReporting, whatever the replicas'
// Upstreams say (their loadReporting is about their own clusters), else none.
func spatialLrs(s *topology.SpatialState) *core.ConfigSource {
	if s.Domain.LoadReportInterval > 0 {
		return selfSource()
	}
	return nil
}

func pool(name string, s *topology.SpatialState, states []*topology.UpstreamState, lawful []string) (*cluster.Cluster, *endpoint.ClusterLoadAssignment) {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		ConnectTimeout:       durationpb.New(5e9),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
		CommonLbConfig: &cluster.Cluster_CommonLbConfig{
			LocalityConfigSpecifier: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		LrsServer: spatialLrs(s),
	}
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name, Policy: &endpoint.ClusterLoadAssignment_Policy{
		OverprovisioningFactor: wrapperspb.UInt32(100),
	}}
	protocolSet := false
	for i, r := range s.Replicas {
		u := states[i]
		if u == nil || !slices.Contains(lawful, r.Name) {
			continue
		}
		if !protocolSet {
			// The pool speaks the protocol of its first lawful replica (name order).
			c.ConnectTimeout, c.TypedExtensionProtocolOptions = connectTimeout(u.Upstream), protocolOptions(u.Upstream)
			protocolSet = true
		}
		if !r.Healthy {
			continue
		}
		lle := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: r.Region, SubZone: r.Name},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
		for ei := range u.Result.Endpoints {
			er, e, _ := u.EndpointResult(ei)
			if er.Selectable && er.Share > 0 {
				lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, er.Share, core.HealthStatus_HEALTHY))
			}
		}
		if len(lle.LbEndpoints) > 0 {
			cla.Endpoints = append(cla.Endpoints, lle)
		}
	}
	return c, cla
}

// SpatialListener is the LDS resource of the spatial listener: header-mutation (strip
// any x-spatial-cluster a client sent, so a failed script leaves none and the router
// answers 503), the Lua filter (a no-op by default; each domain's VirtualHost carries its
// chunk), the router. Routes come over RDS, so a map change never drains the listener.
func SpatialListener(o SpatialOptions) (*listener.Listener, error) {
	addr, port := o.Address, o.Port
	if addr == "" {
		addr = "0.0.0.0"
	}
	if port == 0 {
		port = DefaultSpatialPort
	}
	strip := &headermutation.HeaderMutation{Mutations: &headermutation.Mutations{
		RequestMutations: []*mutation.HeaderMutation{{Action: &mutation.HeaderMutation_Remove{Remove: HeaderCluster}}},
	}}
	noop := &lua.Lua{
		DefaultSourceCode: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "function envoy_on_request(handle) end\n"}},
		StatPrefix:        "spatial",
	}
	// One JSON line per request with the decision the script recorded, so a person can
	// match a request to explain-route (same version, same reason).
	logFormat, err := structpb.NewStruct(map[string]any{
		"time": "%START_TIME%", "method": "%REQ(:METHOD)%", "path": "%REQ(:PATH)%", "status": "%RESPONSE_CODE%",
		"domain": "%REQ(X-SPATIAL-DOMAIN)%", "route": "%ROUTE_NAME%", "request_id": "%REQ(X-REQUEST-ID)%",
		"spatial_version": "%DYNAMIC_METADATA(spatial:version)%", "spatial_reason": "%DYNAMIC_METADATA(spatial:reason)%",
		"spatial_cluster": "%DYNAMIC_METADATA(spatial:cluster)%", "upstream_host": "%UPSTREAM_HOST%",
		"duration_ms": "%DURATION%",
	})
	if err != nil {
		return nil, err
	}
	accessLog := &accesslog.AccessLog{Name: "envoy.access_loggers.stdout", ConfigType: &accesslog.AccessLog_TypedConfig{
		TypedConfig: mustAny(&stream.StdoutAccessLog{AccessLogFormat: &stream.StdoutAccessLog_LogFormat{LogFormat: &core.SubstitutionFormatString{
			Format: &core.SubstitutionFormatString_JsonFormat{JsonFormat: logFormat},
		}}}),
	}}
	manager := &hcm.HttpConnectionManager{
		StatPrefix: "spatial",
		AccessLog:  []*accesslog.AccessLog{accessLog},
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: SpatialRouteName,
		}},
		HttpFilters: []*hcm.HttpFilter{
			{Name: SpatialStripFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(strip)}},
			{Name: SpatialLuaFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(noop)}},
			{Name: "envoy.filters.http.router", ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})}},
		},
	}
	l := &listener.Listener{
		Name: SpatialListenerName,
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Protocol: core.SocketAddress_TCP, Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(manager)},
		}}}},
	}
	if err := l.ValidateAll(); err != nil {
		return nil, fmt.Errorf("generated spatial listener is invalid: %w", err)
	}
	return l, nil
}

// SpatialDomainVirtualHost is one serving domain's VirtualHost: matched on the
// x-spatial-domain header (the RouteConfiguration's vhost_header), carrying the domain's
// Lua chunk once, with one route per product, longest path prefix first.
func SpatialDomainVirtualHost(s *topology.SpatialState, luaSource string) (*route.VirtualHost, error) {
	k := s.Domain.Key
	perRoute := &lua.LuaPerRoute{Override: &lua.LuaPerRoute_SourceCode{SourceCode: &core.DataSource{
		Specifier: &core.DataSource_InlineString{InlineString: luaSource},
	}}}
	vh := &route.VirtualHost{
		Name:                 "spatial:" + k.Namespace + ":" + k.Name,
		Domains:              []string{k.Name},
		TypedPerFilterConfig: map[string]*anypb.Any{SpatialLuaFilter: mustAny(perRoute)},
	}
	products := slices.Clone(s.Map.Domain().Products)
	slices.SortFunc(products, func(a, b partitionmap.Product) int {
		if len(a.PathPrefix) != len(b.PathPrefix) {
			return len(b.PathPrefix) - len(a.PathPrefix)
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, p := range products {
		md, err := structpb.NewStruct(map[string]any{"product": p.Name})
		if err != nil {
			return nil, err
		}
		vh.Routes = append(vh.Routes, &route.Route{
			Name:     p.Name,
			Match:    &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: p.PathPrefix}},
			Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{SpatialLuaFilter: md}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier:            &route.RouteAction_ClusterHeader{ClusterHeader: HeaderCluster},
				ClusterNotFoundResponseCode: route.RouteAction_SERVICE_UNAVAILABLE,
			}},
			RequestHeadersToRemove: []string{HeaderCluster},
		})
	}
	return vh, nil
}

// SpatialRoutes is the one RouteConfiguration of the spatial listener: the given
// VirtualHosts (one per serving domain, in key order) and a last one that answers 404
// to a request naming no known domain.
func SpatialRoutes(hosts []*route.VirtualHost) (*route.RouteConfiguration, error) {
	disabled := &lua.LuaPerRoute{Override: &lua.LuaPerRoute_Disabled{Disabled: true}}
	unknown := &route.VirtualHost{
		Name:                 "spatial:unknown-domain",
		Domains:              []string{"*"},
		TypedPerFilterConfig: map[string]*anypb.Any{SpatialLuaFilter: mustAny(disabled)},
		Routes: []*route.Route{{
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{
				Status: 404,
				Body:   &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "unknown spatial domain: set x-spatial-domain\n"}},
			}},
			ResponseHeadersToAdd: []*core.HeaderValueOption{{
				Header:       &core.HeaderValue{Key: "x-spatial-reason", Value: "unknown_domain"},
				AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}},
		}},
	}
	rc := &route.RouteConfiguration{
		Name:         SpatialRouteName,
		VhostHeader:  HeaderDomain,
		VirtualHosts: append(slices.Clone(hosts), unknown),
	}
	if err := rc.ValidateAll(); err != nil {
		return nil, fmt.Errorf("generated spatial routes are invalid: %w", err)
	}
	return rc, nil
}
