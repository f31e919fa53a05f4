package server

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdstype"
)

// codec is gRPC's proto codec, except that a SotW DiscoveryRequest is read
// into a sotwRequest: its bytes are kept in a buffer the stream reuses, and
// its resource names are hashed where they lie and decoded only when they
// changed. A SotW client repeats every subscribed name in every request, so
// decoding them would make each ACK cost (and allocate) in proportion to
// the subscription.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c codec) Name() string { return protocodec.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch e := v.(type) {
	case *encodedSotw:
		return e.pieces(), nil
	case *encodedDelta:
		return e.pieces(), nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*sotwRequest); ok {
		r.release()
		if len(data) == 1 {
			// One piece (a small request): read it where the transport put it.
			data.Ref()
			r.held, r.buf = data, data[0].ReadOnlyData()
		} else {
			// Several pieces (one per HTTP/2 frame): join them in a scratch
			// buffer shared by all streams. A per-stream buffer would hold a
			// subscription's worth of bytes for every client, and be cold in
			// the CPU cache each time the client answers. Names that repeat
			// a known subscription are compared where they lie and left out.
			p := scratch.Get().(*[]byte)
			b, elided, at, ok := r.joinEliding((*p)[:0], data)
			if !ok {
				b, elided = b[:0], nil
				for _, piece := range data {
					b = append(b, piece.ReadOnlyData()...)
				}
			}
			*p = b
			r.scratch, r.buf, r.elided, r.elidedAt = p, b, elided, at
		}
		return r.parse()
	}
	if _, ok := v.(*lrs.LoadStatsRequest); ok && data.Len() > maxLoadStatsBytes {
		return status.Errorf(codes.ResourceExhausted, "a load report of %d bytes; at most %d", data.Len(), maxLoadStatsBytes)
	}
	return c.proto.Unmarshal(data, v)
}

// scratch holds the buffers requests that arrive in several pieces are
// joined in, from Unmarshal until the request has been handled.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledScratch keeps one very large request from keeping its buffer.
const maxPooledScratch = 1 << 20

// release gives back the bytes the last request was read into; the request's
// fields are not valid after it.
func (r *sotwRequest) release() {
	if r.held != nil {
		r.held.Free()
		r.held = nil
	}
	if r.scratch != nil {
		if cap(*r.scratch) <= maxPooledScratch {
			scratch.Put(r.scratch)
		}
		r.scratch = nil
	}
	r.buf, r.elided = nil, nil
	r.version, r.node, r.typeURL, r.nonce, r.errorDetail = nil, nil, nil, nil, nil
}

// sotwRequest is a DiscoveryRequest as it arrived: the fields the server
// needs are slices of buf, valid until release (or the next message).
type sotwRequest struct {
	seed    maphash.Seed
	buf     []byte
	held    mem.BufferSlice // the transport's buffer buf lies in, or
	scratch *[]byte         // the pooled buffer it was joined in
	// elided is set when the names were left out of buf because they are
	// this block's bytes; they stood at buf[elidedAt].
	elided   *nameBlock
	elidedAt int

	version, node, typeURL, nonce, errorDetail []byte
	hasNode, hasError                          bool

	namesHash uint64 // xdscache.HashNames of the names, in order
	names     int
	span      namesSpan // where the names lie in buf, when they are contiguous
	// known holds, per type, the names of the stream's last request of that
	// type; a request that repeats them is recognised by comparing their
	// bytes with the block (or by one hash over them when there is none),
	// without walking them.
	known  [xdstype.Count]namesSpan
	blocks *nameBlocks // where known's blocks come from; nil keeps none
}

type namesSpan struct {
	start, end, count int
	hash              uint64
	block             *nameBlock // the same bytes, shared; nil when not held
}

// DiscoveryRequest field numbers (envoy.service.discovery.v3).
const (
	fieldVersionInfo   = 1
	fieldNode          = 2
	fieldResourceNames = 3
	fieldTypeURL       = 4
	fieldResponseNonce = 5
	fieldErrorDetail   = 6
)

var errMalformed = errors.New("malformed DiscoveryRequest")

func (r *sotwRequest) parse() error {
	r.version, r.node, r.typeURL, r.nonce, r.errorDetail = nil, nil, nil, nil, nil
	r.hasNode, r.hasError, r.names = false, false, 0
	span := namesSpan{start: -1}
	contiguous, hashed := true, false
	if r.elided != nil {
		// the names are the block's: joinEliding saw them whole and alone
		k := r.elided
		span, hashed, r.names = namesSpan{start: r.elidedAt, end: r.elidedAt, count: k.count, hash: k.hash, block: k}, true, k.count
	}
	b := r.buf
	for len(b) > 0 {
		off := len(r.buf) - len(b)
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		if num == fieldResourceNames && span.start < 0 {
			if k, ok := r.repeated(off); ok {
				span, hashed, r.names = k, true, k.count
				b = r.buf[k.end:]
				continue
			}
		}
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return errMalformed
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return errMalformed
		}
		b = b[m:]
		switch num {
		case fieldVersionInfo:
			r.version = v
		case fieldNode:
			r.node, r.hasNode = v, true
		case fieldResourceNames:
			if span.start < 0 {
				span.start = off
			} else if off != span.end {
				contiguous = false
			}
			span.end = len(r.buf) - len(b)
			r.names++
		case fieldTypeURL:
			r.typeURL = v
		case fieldResponseNonce:
			r.nonce = v
		case fieldErrorDetail:
			r.errorDetail, r.hasError = v, true
		}
	}
	switch {
	case !contiguous:
		// Names interleaved with other fields: hash each where it lies, the
		// same bytes in the same order.
		var h maphash.Hash
		h.SetSeed(r.seed)
		r.eachName(func(field, _ []byte) { _, _ = h.Write(field) })
		r.namesHash, r.span = h.Sum64(), namesSpan{}
		return nil
	case span.start < 0:
		var h maphash.Hash
		h.SetSeed(r.seed)
		r.namesHash, span = h.Sum64(), namesSpan{}
	case !hashed:
		span.hash = maphash.Bytes(r.seed, r.buf[span.start:span.end])
		r.namesHash = span.hash
	default:
		r.namesHash = span.hash
	}
	span.count = r.names
	r.span = span
	return nil
}

// repeated reports whether the names starting at off are byte for byte
// those of an earlier request (of some type), and where they end.
func (r *sotwRequest) repeated(off int) (namesSpan, bool) {
	for _, k := range r.known {
		l := k.end - k.start
		if k.block != nil {
			l = len(k.block.raw) // its span may have been elided
		}
		end := off + l
		if k.count == 0 || end > len(r.buf) {
			continue
		}
		if end < len(r.buf) && r.buf[end] == fieldResourceNames<<3|byte(protowire.BytesType) {
			continue // more names follow
		}
		same := false
		if k.block != nil {
			same = string(r.buf[off:end]) == string(k.block.raw)
		} else {
			same = maphash.Bytes(r.seed, r.buf[off:end]) == k.hash
		}
		if same {
			return namesSpan{start: off, end: end, count: k.count, hash: k.hash, block: k.block}, true
		}
	}
	return namesSpan{}, false
}

// remember records this request's names as the last of type t.
func (r *sotwRequest) remember(t int) {
	if t < 0 || t >= len(r.known) || r.span.count == 0 {
		return
	}
	old := r.known[t].block
	span := r.span
	switch {
	case r.blocks == nil:
		span.block = nil
	case span.block == old && old != nil:
		// the same subscription again
	case span.block != nil:
		r.blocks.ref(span.block) // another type's names, repeated here
	default:
		span.block = r.blocks.acquire(r.buf[span.start:span.end], span.hash, span.count)
		if span.block == old && old != nil {
			r.blocks.release(old) // held already: the stream holds it once
		}
	}
	if span.block != old && r.blocks != nil {
		r.blocks.release(old)
	}
	r.known[t] = span
}

// forget drops the stream's hold on its subscriptions' blocks.
func (r *sotwRequest) forget() {
	for i := range r.known {
		if r.blocks != nil {
			r.blocks.release(r.known[i].block)
		}
		r.known[i] = namesSpan{}
	}
}

// eachName calls f with each resource_names field of a parsed request, in
// order: the whole field (tag, length, bytes) and the name's bytes.
func (r *sotwRequest) eachName(f func(field, name []byte)) {
	b := r.buf
	if r.elided != nil {
		b = r.elided.raw
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if num == fieldResourceNames && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			f(b[:n+m], v)
		}
		b = b[n+m:]
	}
}

// resourceNames decodes the names, in request order.
func (r *sotwRequest) resourceNames() []string {
	out := make([]string, 0, r.names)
	r.eachName(func(_, name []byte) { out = append(out, string(name)) })
	return out
}

// typeURLString returns the type URL, without allocating for the published types.
func (r *sotwRequest) typeURLString() string {
	for i := range xdstype.Count {
		if u := xdstype.At(i).URL; string(r.typeURL) == u {
			return u
		}
	}
	return string(r.typeURL)
}

func (r *sotwRequest) decodeNode() (*core.Node, error) {
	if !r.hasNode {
		return nil, nil // Envoy sends its node on the first request only
	}
	return unmarshalField(r.node, &core.Node{}, "node")
}

func (r *sotwRequest) decodeError() (*rpcstatus.Status, error) {
	if !r.hasError {
		return nil, nil
	}
	return unmarshalField(r.errorDetail, &rpcstatus.Status{}, "error_detail")
}

func unmarshalField[M proto.Message](b []byte, m M, field string) (M, error) {
	if err := proto.Unmarshal(b, m); err != nil {
		var none M
		return none, fmt.Errorf("%s: %w", field, err)
	}
	return m, nil
}
