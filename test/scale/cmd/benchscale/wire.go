package main

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The clients send and receive raw bytes: requests are assembled from
// pre-encoded pieces, and of each response only the fields the bench needs
// are read with protowire, so that a thousand clients cost the bench process
// little next to the server it measures.

const (
	typeCDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

	methodSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	methodDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
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
	dreqResponseNonce = 6
	// DeltaDiscoveryResponse and its Resource
	drespResources = 2
	drespTypeURL   = 4
	drespNonce     = 5
	drespRemoved   = 6
	dresName       = 3
	dresResource   = 2
	// Any
	anyTypeURL = 1
	anyValue   = 2
	// ClusterLoadAssignment and Cluster both carry their name in field 1.
	resName = 1
)

// rawCodec hands gRPC pre-encoded requests and hands back each response's
// bytes. It is named "proto" so that the wire content-type is gRPC's usual.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

// outMsg is a request: head, then tail (a shared, never modified list of
// resource names).
type outMsg struct{ head, tail []byte }

// inMsg is a response's bytes, in a buffer its client reuses.
type inMsg struct{ buf []byte }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*outMsg)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	s := mem.BufferSlice{mem.SliceBuffer(m.head)}
	if len(m.tail) > 0 {
		s = append(s, mem.SliceBuffer(m.tail))
	}
	return s, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*inMsg)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	n := data.Len()
	if cap(m.buf) < n {
		m.buf = make([]byte, n)
	}
	m.buf = m.buf[:n]
	data.CopyTo(m.buf)
	return nil
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// eachBytesField calls fn with the number and content of each
// length-delimited field of the message b, skipping the others.
func eachBytesField(b []byte, fn func(num protowire.Number, v []byte) error) error {
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

// bytesField is the last occurrence of field num of the message b.
func bytesField(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	err := eachBytesField(b, func(n protowire.Number, v []byte) error {
		if n == num {
			out = v
		}
		return nil
	})
	return out, err
}

// header is what an ACK repeats of a response, and how many resources a
// Delta response removes.
type header struct {
	version, typeURL, nonce []byte
	removed                 int
}

// unpackAny is the type URL and value of a google.protobuf.Any.
func unpackAny(b []byte) (typeURL, value []byte, err error) {
	err = eachBytesField(b, func(n protowire.Number, v []byte) error {
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

// parseSotW reads a DiscoveryResponse, calling fn with each resource's type
// and serialized message. The type comes from the resource's Any: the
// response's type_url may follow its resources on the wire.
func parseSotW(b []byte, fn func(typeURL, value []byte) error) (header, error) {
	var h header
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case respVersionInfo:
			h.version = v
		case respTypeURL:
			h.typeURL = v
		case respNonce:
			h.nonce = v
		case respResources:
			typeURL, value, err := unpackAny(v)
			if err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			return fn(typeURL, value)
		}
		return nil
	})
	return h, err
}

// parseDelta reads a DeltaDiscoveryResponse, calling fn with each resource's
// name, type and serialized message.
func parseDelta(b []byte, fn func(name, typeURL, value []byte) error) (header, error) {
	var h header
	err := eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case drespTypeURL:
			h.typeURL = v
		case drespNonce:
			h.nonce = v
		case drespRemoved:
			h.removed++
		case drespResources:
			var name, res []byte
			if err := eachBytesField(v, func(n protowire.Number, f []byte) error {
				switch n {
				case dresName:
					name = f
				case dresResource:
					res = f
				}
				return nil
			}); err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			typeURL, value, err := unpackAny(res)
			if err != nil {
				return fmt.Errorf("resource %s: %w", name, err)
			}
			return fn(name, typeURL, value)
		}
		return nil
	})
	return h, err
}
