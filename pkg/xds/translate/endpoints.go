package translate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/xdsname"
)

// An endpoint flip rebuilds one upstream's ClusterLoadAssignments, so they
// are built into a flat model first, with no message per endpoint; the model
// is then either encoded straight to the wire (AppendEndpoints, the path a
// publication takes) or turned into the proto message (Endpoints, for
// explain, goldens and tests). Both come from the same model, and a property
// test holds the wire bytes equal to the deterministic marshalling of the
// message.

// claModel is one ClusterLoadAssignment.
type claModel struct {
	name     string
	overprov uint32
	drop     uint32 // panic drops in millionths; 0 for none
	locs     []locModel
	eps      []epModel
	names    []weights.Locality // the names of the localities with traffic, for collisions
}

// locModel is one LocalityLbEndpoints; its endpoints are eps[first:first+count].
type locModel struct {
	loc      weights.Locality
	weight   uint32
	priority uint32
	// perEndpoint: the sub_zone is loc.SubZone + xdsname.EndpointSuffix + the host
	// and port of its one endpoint (written without building the string).
	perEndpoint  bool
	first, count int
	// encoded sizes, set by measure: the sub_zone string, the Locality
	// message, the LocalityLbEndpoints message
	subZoneSize, localitySize, size int
}

type epModel struct {
	addr   string
	port   uint32
	health core.HealthStatus
	weight uint32
	// hashKey, when set, is published as the endpoint's
	// metadata.filter_metadata["envoy.lb"]["hash_key"]
	hashKey string
	// encoded sizes, set by measure: the SocketAddress, Metadata (0 without
	// a hash key) and LbEndpoint messages
	socketSize, metaSize, size int
}

var models = sync.Pool{New: func() any { return &claModel{} }}

func getModel() *claModel {
	m := models.Get().(*claModel)
	m.locs, m.eps, m.names = m.locs[:0], m.eps[:0], m.names[:0]
	m.drop = 0
	return m
}

func putModel(m *claModel) {
	clear(m.locs[:cap(m.locs)])
	clear(m.eps[:cap(m.eps)])
	clear(m.names[:cap(m.names)])
	models.Put(m)
}

// Endpoints is the EDS resource of one upstream in one rendering.
func Endpoints(u *topology.UpstreamState, r Rendering) (*endpoint.ClusterLoadAssignment, error) {
	m := getModel()
	defer putModel(m)
	m.build(u, r)
	cla := m.proto()
	if err := m.validate(); err != nil {
		return nil, &ValidationError{Upstream: u.Upstream.Key, Resource: "ClusterLoadAssignment (" + r.String() + ")", Err: err}
	}
	return cla, nil
}

// AppendEndpoints appends the deterministic wire encoding of Endpoints(u, r)
// to b, checked by the same rules as the message's generated validation.
func AppendEndpoints(b []byte, u *topology.UpstreamState, r Rendering) ([]byte, error) {
	return AppendEndpointsNamed(b, xdsname.Cluster(u.Upstream.Key), u, r)
}

// AppendEndpointsNamed is AppendEndpoints for a caller that keeps the
// upstream's ClusterName.
func AppendEndpointsNamed(b []byte, name string, u *topology.UpstreamState, r Rendering) ([]byte, error) {
	m := getModel()
	defer putModel(m)
	m.name = name
	m.fill(u, r)
	if err := m.validate(); err != nil {
		return b, &ValidationError{Upstream: u.Upstream.Key, Resource: "ClusterLoadAssignment (" + r.String() + ")", Err: err}
	}
	return m.appendWire(b), nil
}

func (m *claModel) build(u *topology.UpstreamState, r Rendering) {
	m.name = xdsname.Cluster(u.Upstream.Key)
	m.fill(u, r)
}

func (m *claModel) fill(u *topology.UpstreamState, r Rendering) {
	if u.Upstream.HealthAdjustment == topology.Proxy {
		m.delegated(u)
	} else {
		m.exact(u, r, LbPolicyOf(u.Upstream, r).Layout)
	}
}

func (m *claModel) addLocality(loc weights.Locality, weight uint64, priority uint32) *locModel {
	m.locs = append(m.locs, locModel{loc: loc, weight: uint32(weight), priority: priority, first: len(m.eps)})
	return &m.locs[len(m.locs)-1]
}

func (m *claModel) addEndpoint(l *locModel, e weights.Endpoint, hashKey string, weight uint64, health core.HealthStatus) {
	m.eps = append(m.eps, epModel{addr: e.Address, port: e.Port, health: health, weight: uint32(weight), hashKey: hashKey})
	l.count++
}

// exact is the ControlPlane rendering of docs/design/xds-publishing.md for a
// client of rendering client, in layout r: priority 0 carries every
// (priority, locality) with traffic, weighted by its traffic in millionths;
// standby localities follow as priorities 1..N.
func (m *claModel) exact(u *topology.UpstreamState, client, r Rendering) {
	res := u.Result
	// The loads already carry the factor. Below 100 Envoy would apply it a
	// second time to a fully HEALTHY priority 0 and spill part of its
	// traffic to the standby priorities, so it never goes below 100.
	m.overprov = max(u.Upstream.Policy.OverprovisioningFactor, 100)
	m.drop = uint32(res.DroppedMillionths)
	switch res.Outcome {
	case weights.NoCapacity:
		return // no endpoints: the client fails as for an empty cluster ("no healthy upstream")
	case weights.PanicRejected:
		m.rejected(u, client, r)
		return
	}
	for li := range res.Localities {
		l := &res.Localities[li]
		if l.Traffic == 0 {
			continue
		}
		loc := l.Locality
		// Repeat the suffix while the name is taken: a source sub_zone may
		// itself end in "~p<n>" and equal another's suffixed name.
		for slices.Contains(m.names, loc) {
			loc.SubZone += PrioritySuffix + strconv.FormatUint(uint64(l.Priority), 10)
		}
		m.names = append(m.names, loc)
		if r == PerEndpoint {
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, o := u.EndpointResult(ei)
				if er.Selectable && er.Share > 0 {
					lm := m.addLocality(loc, er.Share, 0)
					lm.perEndpoint = true
					m.addEndpoint(lm, e, o.HashKey, 1, core.HealthStatus_HEALTHY)
				}
			}
			continue
		}
		lm := m.addLocality(loc, l.Traffic, 0)
		for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
			er, e, o := u.EndpointResult(ei)
			if er.Selectable {
				m.addEndpoint(lm, e, o.HashKey, e.Weight, core.HealthStatus_HEALTHY)
			}
		}
	}
	m.standby(u, r, 1)
}

// rejected is a PanicRejected upstream: a drop of every request, category
// "panic" (the drop its DroppedMillionths already says), so that clients
// report a refusal by policy, not an empty cluster. Envoy drops before it
// picks a host, so it is sent no endpoint: an Envoy that ignores
// drop_overloads still answers "no healthy upstream". grpc-go applies
// drops only once its picker is READY, which takes a connected endpoint, so
// a gRPC client is also sent the endpoints that are still eligible, as
// standby priorities from 0; no request reaches them, every gRPC client
// dropping before it picks.
func (m *claModel) rejected(u *topology.UpstreamState, client, r Rendering) {
	if client == PerEndpoint {
		m.standby(u, r, 0)
	}
}

// standby appends, as EDS priorities first..N in source-priority order, the
// localities that get no traffic now but have eligible endpoints, so a proxy
// can fail over before the next push.
func (m *claModel) standby(u *topology.UpstreamState, r Rendering, first uint32) {
	res := u.Result
	next := first
	var perEndpointWeights []uint64
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		added := false
		firstPerEndpoint := len(m.locs)
		perEndpointWeights = perEndpointWeights[:0]
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			if l.Traffic > 0 {
				continue
			}
			if r == PerEndpoint {
				for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
					er, e, o := u.EndpointResult(ei)
					if er.Eligible {
						lm := m.addLocality(l.Locality, 1, next)
						lm.perEndpoint = true
						m.addEndpoint(lm, e, o.HashKey, 1, core.HealthStatus_HEALTHY)
						perEndpointWeights = append(perEndpointWeights, l.LocalityWeight*e.Weight)
					}
				}
				continue
			}
			lm := m.addLocality(l.Locality, l.LocalityWeight, next)
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, o := u.EndpointResult(ei)
				if er.Eligible {
					m.addEndpoint(lm, e, o.HashKey, e.Weight, core.HealthStatus_HEALTHY)
				}
			}
			if lm.count == 0 {
				m.locs = m.locs[:len(m.locs)-1]
			} else {
				added = true
			}
		}
		if len(perEndpointWeights) > 0 {
			// locality weight × endpoint weight, scaled to millionths so the
			// per-priority sum stays within what clients accept
			for i, w := range weights.Apportion(weights.Million, perEndpointWeights) {
				m.locs[firstPerEndpoint+i].weight = uint32(max(w, 1))
			}
			added = true
		}
		if added {
			next++
		}
	}
}

// delegated is the Proxy rendering: the source topology as is, with health
// statuses, for the proxy's own math.
func (m *claModel) delegated(u *topology.UpstreamState) {
	res := u.Result
	m.overprov = u.Upstream.Policy.OverprovisioningFactor
	next := uint32(0)
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		added := false
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			lm := m.addLocality(l.Locality, l.LocalityWeight, next)
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, o := u.EndpointResult(ei)
				if health, ok := delegatedHealth(er, e); ok {
					m.addEndpoint(lm, e, o.HashKey, e.Weight, health)
				}
			}
			if lm.count == 0 {
				m.locs = m.locs[:len(m.locs)-1]
			} else {
				added = true
			}
		}
		if added {
			next++
		}
	}
}

// delegatedHealth is the EDS status of an endpoint for a proxy that does its
// own math, as its reason classifies it; false leaves the endpoint out.
func delegatedHealth(er weights.EndpointResult, e weights.Endpoint) (core.HealthStatus, bool) {
	switch er.Reason.ProxyHealth(e.Probe) {
	case weights.ProxyUnknown:
		return core.HealthStatus_UNKNOWN, true
	case weights.ProxyHealthy:
		return core.HealthStatus_HEALTHY, true
	case weights.ProxyUnhealthy:
		return core.HealthStatus_UNHEALTHY, true
	case weights.ProxyDraining:
		return core.HealthStatus_DRAINING, true
	}
	return 0, false // weights.ProxyWithheld
}

func (m *claModel) subZone(l *locModel) string {
	if !l.perEndpoint {
		return l.loc.SubZone
	}
	e := m.eps[l.first]
	return l.loc.SubZone + xdsname.EndpointSuffix + hostPort(e.addr, e.port)
}

func hostPort(addr string, port uint32) string { return string(appendHostPort(nil, addr, port)) }

// appendHostPort appends host:port, with an IPv6 address in brackets.
func appendHostPort(b []byte, addr string, port uint32) []byte {
	if strings.Contains(addr, ":") {
		b = append(append(append(b, '['), addr...), ']')
	} else {
		b = append(b, addr...)
	}
	return strconv.AppendUint(append(b, ':'), uint64(port), 10)
}

// hostPortLen is len(hostPort(addr, port)), without building it on the heap.
func hostPortLen(addr string, port uint32) int {
	var buf [64]byte
	return len(appendHostPort(buf[:0], addr, port))
}

// proto builds the message.
func (m *claModel) proto() *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{
		ClusterName: m.name,
		Policy:      &endpoint.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(m.overprov)},
	}
	if m.drop > 0 {
		cla.Policy.DropOverloads = []*endpoint.ClusterLoadAssignment_Policy_DropOverload{{
			Category:       "panic",
			DropPercentage: &typev3.FractionalPercent{Numerator: m.drop, Denominator: typev3.FractionalPercent_MILLION},
		}}
	}
	for i := range m.locs {
		l := &m.locs[i]
		lle := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: l.loc.Region, Zone: l.loc.Zone, SubZone: m.subZone(l)},
			LoadBalancingWeight: wrapperspb.UInt32(l.weight),
			Priority:            l.priority,
		}
		for _, e := range m.eps[l.first : l.first+l.count] {
			lbe := lbEndpoint(weights.Endpoint{Address: e.addr, Port: e.port}, uint64(e.weight), e.health)
			if e.hashKey != "" {
				lbe.Metadata = hashKeyMetadata(e.hashKey)
			}
			lle.LbEndpoints = append(lle.LbEndpoints, lbe)
		}
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	return cla
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

// HashKeyFilter and HashKeyField name where an endpoint's hash key is
// published: metadata.filter_metadata["envoy.lb"]["hash_key"], a string,
// which Envoy's ring hash and Maglev (and gRPC's ring_hash, gRFC A76)
// place on the ring instead of the endpoint's address.
const (
	HashKeyFilter = "envoy.lb"
	HashKeyField  = "hash_key"
)

// hashKeyMetadata is the Metadata that carries a hash key.
func hashKeyMetadata(key string) *core.Metadata {
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
		HashKeyFilter: {Fields: map[string]*structpb.Value{HashKeyField: structpb.NewStringValue(key)}},
	}}
}

// validate applies the rules of the messages' generated validation that
// this model can break, and protobuf's: strings are UTF-8.
func (m *claModel) validate() error {
	var errs []error
	if m.name == "" || !utf8.ValidString(m.name) {
		errs = append(errs, fmt.Errorf("cluster_name %q: want a non-empty UTF-8 string", m.name))
	}
	if m.overprov == 0 {
		errs = append(errs, errors.New("policy.overprovisioning_factor: value must be greater than 0"))
	}
	for i := range m.locs {
		l := &m.locs[i]
		if l.weight < 1 {
			errs = append(errs, fmt.Errorf("endpoints[%d].load_balancing_weight: value must be greater than or equal to 1", i))
		}
		if l.priority > 128 {
			errs = append(errs, fmt.Errorf("endpoints[%d].priority: value must be less than or equal to 128", i))
		}
		if !utf8.ValidString(l.loc.Region) || !utf8.ValidString(l.loc.Zone) || !utf8.ValidString(l.loc.SubZone) {
			errs = append(errs, fmt.Errorf("endpoints[%d].locality: not UTF-8", i))
		}
		for j, e := range m.eps[l.first : l.first+l.count] {
			switch {
			case e.addr == "" || !utf8.ValidString(e.addr):
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d].address %q: want a non-empty UTF-8 string", i, j, e.addr))
			case e.port > 65535:
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d].port_value: value must be less than or equal to 65535", i, j))
			case e.weight < 1:
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d].load_balancing_weight: value must be greater than or equal to 1", i, j))
			case !utf8.ValidString(e.hashKey):
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d].metadata hash_key %q: not UTF-8", i, j, e.hashKey))
			}
		}
	}
	return errors.Join(errs...)
}

// ClusterLoadAssignment and nested field numbers (envoy.config.endpoint.v3,
// envoy.config.core.v3, envoy.type.v3, google.protobuf.UInt32Value).
const (
	claClusterName    = 1
	claEndpoints      = 2
	claPolicy         = 4
	policyDrops       = 2
	policyOverprov    = 3
	dropCategory      = 1
	dropPercentage    = 2
	fractionNumerator = 1
	fractionDenom     = 2
	lleLocality       = 1
	lleLbEndpoints    = 2
	lleWeight         = 3
	llePriority       = 5
	localityRegion    = 1
	localityZone      = 2
	localitySubZone   = 3
	lbeEndpoint       = 1
	lbeHealth         = 2
	lbeMetadata       = 3
	lbeWeight         = 4
	metadataFilter    = 1 // Metadata.filter_metadata, a map<string, Struct>
	mapKey            = 1
	mapValue          = 2
	structFields      = 1 // Struct.fields, a map<string, Value>
	valueString       = 3 // Value.string_value
	endpointAddress   = 1
	addressSocket     = 1
	socketAddress     = 2
	socketPort        = 3
	uint32Value       = 1
)

// The encoding below writes fields in field-number order, oneof members
// last, as protobuf-go's deterministic marshalling does, so the bytes are
// the same.

// The sizes below take the one- and two-byte cases (every field number
// here is below 16, most values and lengths below 16384) inline, without
// protowire's general computation.

func tagSize(num protowire.Number) int {
	if num < 16 {
		return 1
	}
	return protowire.SizeTag(num)
}

func varintSize(v uint64) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	}
	return protowire.SizeVarint(v)
}

func bytesSize(n int) int { return varintSize(uint64(n)) + n }

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return tagSize(num) + bytesSize(len(s))
}

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return tagSize(num) + varintSize(v)
}

func sizeMessage(num protowire.Number, n int) int { return tagSize(num) + bytesSize(n) }

// appendTag and appendUvarint write the one-byte cases (every field number
// here is below 16, most lengths below 128) without a call.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	if num < 16 {
		return append(b, byte(num)<<3|byte(typ))
	}
	return protowire.AppendTag(b, num, typ)
}

func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, num, protowire.VarintType)
	return appendUvarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, n int) []byte {
	b = appendTag(b, num, protowire.BytesType)
	return appendUvarint(b, uint64(n))
}

func sizeUInt32Value(num protowire.Number, v uint32) int {
	return sizeMessage(num, sizeVarint(uint32Value, uint64(v)))
}

func appendUInt32Value(b []byte, num protowire.Number, v uint32) []byte {
	b = appendMessage(b, num, sizeVarint(uint32Value, uint64(v)))
	return appendVarint(b, uint32Value, uint64(v))
}

func (m *claModel) subZoneLen(l *locModel) int {
	if !l.perEndpoint {
		return len(l.loc.SubZone)
	}
	e := m.eps[l.first]
	return len(l.loc.SubZone) + len(xdsname.EndpointSuffix) + hostPortLen(e.addr, e.port)
}

// measure computes every nested message's size once, bottom up, and returns
// the size of the whole message.
func (m *claModel) measure() int {
	n := sizeString(claClusterName, m.name)
	for i := range m.locs {
		l := &m.locs[i]
		l.subZoneSize = m.subZoneLen(l)
		l.localitySize = sizeString(localityRegion, l.loc.Region) + sizeString(localityZone, l.loc.Zone)
		if l.subZoneSize > 0 {
			l.localitySize += tagSize(localitySubZone) + bytesSize(l.subZoneSize)
		}
		size := sizeMessage(lleLocality, l.localitySize)
		for j := l.first; j < l.first+l.count; j++ {
			e := &m.eps[j]
			e.socketSize = sizeString(socketAddress, e.addr) + sizeVarint(socketPort, uint64(e.port))
			address := sizeMessage(addressSocket, e.socketSize)
			e.size = sizeMessage(lbeEndpoint, sizeMessage(endpointAddress, address)) +
				sizeVarint(lbeHealth, uint64(e.health)) + sizeUInt32Value(lbeWeight, e.weight)
			if e.hashKey != "" {
				e.metaSize = sizeHashKeyMetadata(e.hashKey)
				e.size += sizeMessage(lbeMetadata, e.metaSize)
			}
			size += sizeMessage(lleLbEndpoints, e.size)
		}
		l.size = size + sizeUInt32Value(lleWeight, l.weight) + sizeVarint(llePriority, uint64(l.priority))
		n += sizeMessage(claEndpoints, l.size)
	}
	return n + sizeMessage(claPolicy, m.sizePolicy())
}

func (m *claModel) sizeDrop() int {
	fraction := sizeVarint(fractionNumerator, uint64(m.drop)) + sizeVarint(fractionDenom, uint64(typev3.FractionalPercent_MILLION))
	return sizeString(dropCategory, "panic") + sizeMessage(dropPercentage, fraction)
}

func (m *claModel) sizePolicy() int {
	n := 0
	if m.drop > 0 {
		n += sizeMessage(policyDrops, m.sizeDrop())
	}
	return n + sizeUInt32Value(policyOverprov, m.overprov)
}

// appendWire appends the message's deterministic encoding.
func (m *claModel) appendWire(b []byte) []byte {
	b = slices.Grow(b, m.measure())
	b = appendString(b, claClusterName, m.name)
	for i := range m.locs {
		l := &m.locs[i]
		b = appendMessage(b, claEndpoints, l.size)
		b = appendMessage(b, lleLocality, l.localitySize)
		b = appendString(b, localityRegion, l.loc.Region)
		b = appendString(b, localityZone, l.loc.Zone)
		if l.subZoneSize > 0 {
			b = protowire.AppendTag(b, localitySubZone, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(l.subZoneSize))
			b = append(b, l.loc.SubZone...)
			if l.perEndpoint {
				e := m.eps[l.first]
				b = append(b, xdsname.EndpointSuffix...)
				b = appendHostPort(b, e.addr, e.port)
			}
		}
		for j := l.first; j < l.first+l.count; j++ {
			e := &m.eps[j]
			address := sizeMessage(addressSocket, e.socketSize)
			b = appendMessage(b, lleLbEndpoints, e.size)
			b = appendVarint(b, lbeHealth, uint64(e.health))
			if e.hashKey != "" {
				b = appendHashKeyMetadata(b, e.hashKey, e.metaSize)
			}
			b = appendUInt32Value(b, lbeWeight, e.weight)
			// host_identifier is a oneof: protobuf-go writes oneofs after the other fields
			b = appendMessage(b, lbeEndpoint, sizeMessage(endpointAddress, address))
			b = appendMessage(b, endpointAddress, address)
			b = appendMessage(b, addressSocket, e.socketSize)
			b = appendString(b, socketAddress, e.addr)
			b = appendVarint(b, socketPort, uint64(e.port))
		}
		b = appendUInt32Value(b, lleWeight, l.weight)
		b = appendVarint(b, llePriority, uint64(l.priority))
	}
	b = appendMessage(b, claPolicy, m.sizePolicy())
	if m.drop > 0 {
		b = appendMessage(b, policyDrops, m.sizeDrop())
		b = appendString(b, dropCategory, "panic")
		b = appendMessage(b, dropPercentage, sizeVarint(fractionNumerator, uint64(m.drop))+sizeVarint(fractionDenom, uint64(typev3.FractionalPercent_MILLION)))
		b = appendVarint(b, fractionNumerator, uint64(m.drop))
		b = appendVarint(b, fractionDenom, uint64(typev3.FractionalPercent_MILLION))
	}
	return appendUInt32Value(b, policyOverprov, m.overprov)
}

// The hash key's Metadata, nested: filter_metadata's one entry
// ("envoy.lb" → Struct), the Struct's one field ("hash_key" → Value), the
// Value's string_value. A map entry is a message of its key (1) and value
// (2).

func hashKeySizes(key string) (value, field, st, entry int) {
	value = sizeString(valueString, key)
	field = sizeString(mapKey, HashKeyField) + sizeMessage(mapValue, value)
	st = sizeMessage(structFields, field)
	entry = sizeString(mapKey, HashKeyFilter) + sizeMessage(mapValue, st)
	return value, field, st, entry
}

// sizeHashKeyMetadata is the size of the Metadata message of a hash key.
func sizeHashKeyMetadata(key string) int {
	_, _, _, entry := hashKeySizes(key)
	return sizeMessage(metadataFilter, entry)
}

// appendHashKeyMetadata appends LbEndpoint.metadata for a hash key, whose
// Metadata message is size bytes.
func appendHashKeyMetadata(b []byte, key string, size int) []byte {
	value, field, st, entry := hashKeySizes(key)
	b = appendMessage(b, lbeMetadata, size)
	b = appendMessage(b, metadataFilter, entry)
	b = appendString(b, mapKey, HashKeyFilter)
	b = appendMessage(b, mapValue, st)
	b = appendMessage(b, structFields, field)
	b = appendString(b, mapKey, HashKeyField)
	b = appendMessage(b, mapValue, value)
	return appendString(b, valueString, key)
}
