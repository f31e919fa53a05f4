package loadgen

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The clients send and receive raw bytes: requests are assembled from
// pre-encoded pieces, and of each response only the fields a client needs
// are read with protowire, so that thousands of clients cost the load
// process little next to the server it measures.

const (
	TypeLDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeRDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeCDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeEDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

	MethodSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	MethodDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// Field numbers (envoy.service.discovery.v3, google.protobuf.Any).
const (
	// DiscoveryRequest
	reqVersionInfo   = 1
	reqNode          = 2
	reqResourceNames = 3
	reqTypeURL       = 4
	reqResponseNonce = 5
	// DiscoveryResponse
	respVersionInfo = 1
	respResources   = 2
	respTypeURL     = 4
	respNonce       = 5
	// DeltaDiscoveryRequest
	dreqNode          = 1
	dreqTypeURL       = 2
	dreqSubscribe     = 3
	dreqInitial       = 5
	dreqResponseNonce = 6
	// DeltaDiscoveryResponse and its Resource
	drespResources = 2
	drespTypeURL   = 4
	drespNonce     = 5
	drespRemoved   = 6
	dresName       = 3
	dresResource   = 2
	dresVersion    = 1
	// a map entry
	mapKey   = 1
	mapValue = 2
	// Any
	anyTypeURL = 1
	anyValue   = 2
	// ClusterLoadAssignment and Cluster both carry their name in field 1.
	resName = 1
)

// RawCodec hands gRPC pre-encoded requests and hands back each response's
// bytes. It is named "proto" so that the wire content-type is gRPC's usual.
type RawCodec struct{}

func (RawCodec) Name() string { return "proto" }

// OutMsg is a request: head, then tail (a shared, never modified list of
// resource names).
type OutMsg struct{ Head, Tail []byte }

// InMsg is a response's bytes, in a buffer its client reuses.
type InMsg struct{ Buf []byte }

func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*OutMsg)
	if !ok {
		return nil, fmt.Errorf("RawCodec: cannot marshal %T", v)
	}
	s := mem.BufferSlice{mem.SliceBuffer(m.Head)}
	if len(m.Tail) > 0 {
		s = append(s, mem.SliceBuffer(m.Tail))
	}
	return s, nil
}

func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*InMsg)
	if !ok {
		return fmt.Errorf("RawCodec: cannot unmarshal into %T", v)
	}
	n := data.Len()
	if cap(m.Buf) < n {
		m.Buf = make([]byte, n)
	}
	m.Buf = m.Buf[:n]
	data.CopyTo(m.Buf)
	return nil
}

func AppendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func AppendStringField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// EachBytesField calls fn with the number and content of each
// length-delimited field of the message b, skipping the others.
func EachBytesField(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// BytesField is the last occurrence of field num of the message b.
func BytesField(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	err := EachBytesField(b, func(n protowire.Number, v []byte) error {
		if n == num {
			out = v
		}
		return nil
	})
	return out, err
}

// Header is what an ACK repeats of a response, and how many resources a
// Delta response removes.
type Header struct {
	Version, TypeURL, Nonce []byte
	Removed                 int
	RemovedNames            [][]byte // a Delta response's removed_resources
}

// UnpackAny is the type URL and value of a google.protobuf.Any.
func UnpackAny(b []byte) (typeURL, value []byte, err error) {
	err = EachBytesField(b, func(n protowire.Number, v []byte) error {
		switch n {
		case anyTypeURL:
			typeURL = v
		case anyValue:
			value = v
		}
		return nil
	})
	return typeURL, value, err
}

// ParseSotW reads a DiscoveryResponse, calling fn with each resource's type
// and serialized message. The type comes from the resource's Any: the
// response's type_url may follow its resources on the wire.
func ParseSotW(b []byte, fn func(typeURL, value []byte) error) (Header, error) {
	var h Header
	err := EachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case respVersionInfo:
			h.Version = v
		case respTypeURL:
			h.TypeURL = v
		case respNonce:
			h.Nonce = v
		case respResources:
			typeURL, value, err := UnpackAny(v)
			if err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			return fn(typeURL, value)
		}
		return nil
	})
	return h, err
}

// ParseDelta reads a DeltaDiscoveryResponse, calling fn with each resource's
// name, type and serialized message.
func ParseDelta(b []byte, fn func(name, typeURL, value []byte) error) (Header, error) {
	return ParseDeltaVersions(b, func(name, _, typeURL, value []byte) error { return fn(name, typeURL, value) })
}

// ParseDeltaVersions is ParseDelta with each resource's version too.
func ParseDeltaVersions(b []byte, fn func(name, version, typeURL, value []byte) error) (Header, error) {
	var h Header
	err := EachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case drespTypeURL:
			h.TypeURL = v
		case drespNonce:
			h.Nonce = v
		case drespRemoved:
			h.Removed++
			h.RemovedNames = append(h.RemovedNames, v)
		case drespResources:
			var name, version, res []byte
			if err := EachBytesField(v, func(n protowire.Number, f []byte) error {
				switch n {
				case dresName:
					name = f
				case dresVersion:
					version = f
				case dresResource:
					res = f
				}
				return nil
			}); err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			typeURL, value, err := UnpackAny(res)
			if err != nil {
				return fmt.Errorf("resource %s: %w", name, err)
			}
			return fn(name, version, typeURL, value)
		}
		return nil
	})
	return h, err
}

// AppendInitialVersion appends one entry of a Delta request's
// initial_resource_versions: what a client that reconnects holds.
func AppendInitialVersion(b []byte, name, version string) []byte {
	entry := AppendStringField(AppendStringField(nil, mapKey, name), mapValue, version)
	return AppendBytesField(b, dreqInitial, entry)
}

// ResourceName is the name of a Cluster or ClusterLoadAssignment (field 1 of both).
func ResourceName(value []byte) ([]byte, error) { return BytesField(value, resName) }

// AppendFirst appends the first request of a stream: node (a serialized
// core.Node) and typeURL, subscribing to nothing by name (a wildcard for
// CDS and LDS); names, appended after it, subscribe by name (SotW
// resource_names and Delta resource_names_subscribe are both field 3).
func AppendFirst(b []byte, delta bool, node []byte, typeURL string) []byte {
	if delta {
		b = AppendBytesField(b, dreqNode, node)
		return AppendStringField(b, dreqTypeURL, typeURL)
	}
	b = AppendBytesField(b, reqNode, node)
	return AppendStringField(b, reqTypeURL, typeURL)
}

// AppendNames appends names as the subscription of a request.
func AppendNames(b []byte, names ...string) []byte {
	for _, n := range names {
		b = AppendStringField(b, reqResourceNames, n)
	}
	return b
}

// AppendACK appends the head of a request that ACKs h (or, with no nonce,
// the first request of h's type on a stream that sent its node already).
// It copies what it keeps of h. A SotW ACK of a type subscribed by name
// repeats the names after it; a Delta ACK carries the nonce alone.
func AppendACK(b []byte, delta bool, h Header) []byte {
	if delta {
		b = AppendBytesField(b, dreqTypeURL, h.TypeURL)
		if h.Nonce != nil {
			b = AppendBytesField(b, dreqResponseNonce, h.Nonce)
		}
		return b
	}
	if h.Version != nil {
		b = AppendBytesField(b, reqVersionInfo, h.Version)
	}
	b = AppendBytesField(b, reqTypeURL, h.TypeURL)
	if h.Nonce != nil {
		b = AppendBytesField(b, reqResponseNonce, h.Nonce)
	}
	return b
}
