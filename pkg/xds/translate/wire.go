package translate

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// Encoder writes an upstream's Cluster, Listener and RouteConfiguration
// straight to the wire, as AppendEndpoints does its ClusterLoadAssignments:
// a full build of many upstreams then costs a few appends per resource
// instead of building, validating and marshalling messages. The parts that
// are the same for every upstream are marshalled once, by protobuf-go, when
// the Encoder is made. The bytes equal the deterministic marshalling of
// Cluster, Listener and Route (a test holds them so); an upstream whose names
// the generated validation might refuse (empty, not UTF-8, or carrying a
// control character a header may not) is built, validated and marshalled
// as a message instead, and so is a route with a retry policy and a
// cluster with a retry budget (retrypolicy.go).
type Encoder struct {
	edsConfig  []byte // EdsClusterConfig.eds_config: ADS, v3
	http2      []byte // Cluster.typed_extension_protocol_options for HTTP/2
	lrsServer  []byte // Cluster.lrs_server: self
	rdsConfig  []byte // Rds.config_source: ADS, v3
	httpFilter []byte // HttpConnectionManager.http_filters: the router
	opts       proto.MarshalOptions
}

// Field numbers of the messages the Encoder writes.
const (
	clusterName, clusterType, clusterEDS, clusterTimeout, clusterLB, clusterCommonLB = 1, 2, 3, 4, 6, 27
	clusterRingHash, clusterMaglev                                                   = 23, 52
	ringHashMinimum, ringHashMaximum, maglevTableSize                                = 1, 4, 1
	uint64Value                                                                      = 1
	edsServiceName                                                                   = 2
	durationSeconds, durationNanos                                                   = 1, 2
	commonLBPanic, commonLBLocalityWeighted                                          = 1, 3
	percentValue                                                                     = 1
	listenerName, listenerAPI                                                        = 1, 19
	apiListenerAny                                                                   = 1
	anyTypeURL, anyValue                                                             = 1, 2
	hcmStatPrefix, hcmRDS                                                            = 2, 3
	rdsRouteConfigName                                                               = 2
	routeConfigName, routeConfigVHosts                                               = 1, 2
	vhostName, vhostDomains, vhostRoutes                                             = 1, 2, 3
	routeMatch, routeAction                                                          = 1, 2
	matchPrefix                                                                      = 1
	actionCluster                                                                    = 1
)

const hcmTypeURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// NewEncoder marshals the parts every upstream shares. They are constant
// messages, so a failure is a bug in this package, and panics.
func NewEncoder() *Encoder {
	e := &Encoder{opts: proto.MarshalOptions{Deterministic: true}}
	// each part is the encoding of a message holding only that field, which
	// is the field's tag, length and content
	e.edsConfig = e.must(&cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource()})
	e.http2 = e.must(&cluster.Cluster{TypedExtensionProtocolOptions: protocolOptions(topology.Upstream{Protocol: "HTTP2"})})
	e.lrsServer = e.must(&cluster.Cluster{LrsServer: selfSource()})
	e.rdsConfig = e.must(&hcm.Rds{ConfigSource: adsSource()})
	l, err := Listener(&topology.UpstreamState{Upstream: topology.Upstream{Key: topology.Key{Namespace: "n", Name: "n"}}})
	if err != nil {
		panic(fmt.Sprintf("translate: the listener template: %v", err))
	}
	var m hcm.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&m); err != nil {
		panic(fmt.Sprintf("translate: the listener template: %v", err))
	}
	e.httpFilter = e.must(&hcm.HttpConnectionManager{HttpFilters: m.GetHttpFilters()})
	return e
}

func (e *Encoder) must(m proto.Message) []byte {
	b, err := e.opts.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("translate: cannot marshal %T: %v", m, err))
	}
	return b
}

// plainName reports whether a name passes every rule the generated
// validation has for the names the Encoder writes.
func plainName(s string) bool {
	return s != "" && utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\r\n")
}

// marshalled appends the message build makes of u, the way for odd names.
func marshalled[M proto.Message](e *Encoder, b []byte, u *topology.UpstreamState, build func(*topology.UpstreamState) (M, error)) ([]byte, error) {
	m, err := build(u)
	if err != nil {
		return b, err
	}
	return e.opts.MarshalAppend(b, m)
}

func (e *Encoder) plain(k topology.Key) bool { return plainName(k.Namespace) && plainName(k.Name) }

// AppendCluster appends the encoding of Cluster(u, r).
func (e *Encoder) AppendCluster(b []byte, u *topology.UpstreamState, r Rendering) ([]byte, error) {
	up := u.Upstream
	// a retry budget is rare: its cluster takes the way of odd names
	if !e.plain(up.Key) || up.Retries.HasBudget() {
		return marshalled(e, b, u, func(u *topology.UpstreamState) (*cluster.Cluster, error) { return Cluster(u, r) })
	}
	lb := LbPolicyOf(up, r)
	name := xdsname.Cluster(up.Key)
	b = appendString(b, clusterName, name)
	b = appendMessage(b, clusterEDS, len(e.edsConfig)+sizeString(edsServiceName, name))
	b = append(b, e.edsConfig...)
	b = appendString(b, edsServiceName, name)
	seconds, nanos := uint64(5), uint64(0)
	if up.ConnectTimeout > 0 {
		seconds, nanos = uint64(up.ConnectTimeout/1e9), uint64(up.ConnectTimeout%1e9)
	}
	b = appendMessage(b, clusterTimeout, sizeVarint(durationSeconds, seconds)+sizeVarint(durationNanos, nanos))
	b = appendVarint(b, durationSeconds, seconds)
	b = appendVarint(b, durationNanos, nanos)
	b = appendVarint(b, clusterLB, uint64(lb.Policy))
	panicThreshold := 0.0
	if up.HealthAdjustment == topology.Proxy {
		panicThreshold = float64(up.Policy.PanicThreshold)
	}
	percent := 0
	if panicThreshold != 0 {
		percent = tagSize(percentValue) + 8
	}
	b = appendMessage(b, clusterCommonLB, sizeMessage(commonLBPanic, percent)+sizeMessage(commonLBLocalityWeighted, 0))
	b = appendMessage(b, commonLBPanic, percent)
	if panicThreshold != 0 {
		b = appendTag(b, percentValue, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(panicThreshold))
	}
	b = appendMessage(b, commonLBLocalityWeighted, 0)
	if up.Protocol == "HTTP2" || up.Protocol == "GRPC" {
		b = append(b, e.http2...)
	}
	if up.LoadReportInterval > 0 {
		// lrs_server (42) follows typed_extension_protocol_options (36)
		b = append(b, e.lrsServer...)
	}
	// cluster_discovery_type and lb_config are oneofs: written after the
	// other fields
	b = appendVarint(b, clusterType, uint64(cluster.Cluster_EDS))
	switch {
	case lb.RingSize > 0:
		v := sizeVarint(uint64Value, lb.RingSize)
		b = appendMessage(b, clusterRingHash, sizeMessage(ringHashMinimum, v)+sizeMessage(ringHashMaximum, v))
		b = appendUInt64Value(b, ringHashMinimum, lb.RingSize)
		b = appendUInt64Value(b, ringHashMaximum, lb.RingSize)
	case lb.TableSize > 0:
		v := sizeVarint(uint64Value, lb.TableSize)
		b = appendMessage(b, clusterMaglev, sizeMessage(maglevTableSize, v))
		b = appendUInt64Value(b, maglevTableSize, lb.TableSize)
	}
	return b, nil
}

// appendUInt64Value appends a google.protobuf.UInt64Value field holding v.
func appendUInt64Value(b []byte, num protowire.Number, v uint64) []byte {
	b = appendMessage(b, num, sizeVarint(uint64Value, v))
	return appendVarint(b, uint64Value, v)
}

// AppendListener appends the encoding of Listener(u).
func (e *Encoder) AppendListener(b []byte, u *topology.UpstreamState) ([]byte, error) {
	k := u.Upstream.Key
	if !e.plain(k) {
		return marshalled(e, b, u, Listener)
	}
	name, routes := ListenerName(k), RouteName(k)
	rds := len(e.rdsConfig) + sizeString(rdsRouteConfigName, routes)
	m := sizeString(hcmStatPrefix, name) + len(e.httpFilter) + sizeMessage(hcmRDS, rds)
	a := sizeString(anyTypeURL, hcmTypeURL) + sizeMessage(anyValue, m)
	b = appendString(b, listenerName, name)
	b = appendMessage(b, listenerAPI, sizeMessage(apiListenerAny, a))
	b = appendMessage(b, apiListenerAny, a)
	b = appendString(b, anyTypeURL, hcmTypeURL)
	b = appendMessage(b, anyValue, m)
	b = appendString(b, hcmStatPrefix, name)
	b = append(b, e.httpFilter...)
	// route_specifier is a oneof: written after the other fields
	b = appendMessage(b, hcmRDS, rds)
	b = append(b, e.rdsConfig...)
	return appendString(b, rdsRouteConfigName, routes), nil
}

// AppendRoute appends the encoding of Route(u).
func (e *Encoder) AppendRoute(b []byte, u *topology.UpstreamState) ([]byte, error) {
	k := u.Upstream.Key
	// a route with hash policies or a retry policy is written by proto: it
	// changes only with its Upstream object, never on the endpoint fast path
	if !e.plain(k) || u.Upstream.RequestAffinity != nil || u.Upstream.Retries != nil {
		return marshalled(e, b, u, Route)
	}
	name, target := RouteName(k), xdsname.Cluster(k)
	match := sizeString(matchPrefix, "/")
	action := sizeString(actionCluster, target)
	r := sizeMessage(routeMatch, match) + sizeMessage(routeAction, action)
	vh := sizeString(vhostName, name) + sizeString(vhostDomains, "*") + sizeMessage(vhostRoutes, r)
	b = appendString(b, routeConfigName, name)
	b = appendMessage(b, routeConfigVHosts, vh)
	b = appendString(b, vhostName, name)
	b = appendString(b, vhostDomains, "*")
	b = appendMessage(b, vhostRoutes, r)
	b = appendMessage(b, routeMatch, match)
	b = appendString(b, matchPrefix, "/")
	b = appendMessage(b, routeAction, action)
	return appendString(b, actionCluster, target), nil
}
