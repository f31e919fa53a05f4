package server

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// pieceReader reads a message that the transport hands over in several
// buffers (one per HTTP/2 frame) without joining them first. It is a
// value: a copy remembers a position to come back to.
type pieceReader struct {
	pieces mem.BufferSlice
	i      int    // the piece b is the rest of
	b      []byte // unread bytes of piece i
	pos    int    // bytes read so far
}

func newPieceReader(pieces mem.BufferSlice) pieceReader {
	p := pieceReader{pieces: pieces}
	if len(pieces) > 0 {
		p.b = pieces[0].ReadOnlyData()
	}
	return p
}

// fill makes b non-empty unless the message is read to its end.
func (p *pieceReader) fill() bool {
	for len(p.b) == 0 {
		if p.i+1 >= len(p.pieces) {
			return false
		}
		p.i++
		p.b = p.pieces[p.i].ReadOnlyData()
	}
	return true
}

func (p *pieceReader) done() bool { return !p.fill() }

func (p *pieceReader) peek() (byte, bool) {
	if !p.fill() {
		return 0, false
	}
	return p.b[0], true
}

func (p *pieceReader) varint() (uint64, bool) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if !p.fill() {
			return 0, false
		}
		c := p.b[0]
		p.b, p.pos = p.b[1:], p.pos+1
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, true
		}
	}
	return 0, false
}

// skip passes over n bytes.
func (p *pieceReader) skip(n int) bool {
	for n > 0 {
		if !p.fill() {
			return false
		}
		k := min(n, len(p.b))
		p.b, p.pos, n = p.b[k:], p.pos+k, n-k
	}
	return true
}

// appendN appends the next n bytes to dst.
func (p *pieceReader) appendN(dst []byte, n int) ([]byte, bool) {
	for n > 0 {
		if !p.fill() {
			return dst, false
		}
		k := min(n, len(p.b))
		dst = append(dst, p.b[:k]...)
		p.b, p.pos, n = p.b[k:], p.pos+k, n-k
	}
	return dst, true
}

// equal reports whether the next bytes are raw, reading them if so.
func (p *pieceReader) equal(raw []byte) bool {
	for len(raw) > 0 {
		if !p.fill() {
			return false
		}
		k := min(len(raw), len(p.b))
		if string(p.b[:k]) != string(raw[:k]) {
			return false
		}
		p.b, p.pos, raw = p.b[k:], p.pos+k, raw[k:]
	}
	return true
}

// field passes over one field, returning its number and type.
func (p *pieceReader) field() (protowire.Number, protowire.Type, bool) {
	tag, ok := p.varint()
	if !ok {
		return 0, 0, false
	}
	num, typ := protowire.DecodeTag(tag)
	switch typ {
	case protowire.VarintType:
		_, ok = p.varint()
	case protowire.Fixed32Type:
		ok = p.skip(4)
	case protowire.Fixed64Type:
		ok = p.skip(8)
	case protowire.BytesType:
		var n uint64
		if n, ok = p.varint(); ok {
			ok = n < 1<<31 && p.skip(int(n))
		}
	default:
		ok = false // groups are not part of a DiscoveryRequest
	}
	return num, typ, ok
}

// joinEliding appends a request laid over several pieces to dst, leaving
// out its resource_names when they are byte for byte one of the stream's
// known blocks: an ACK that repeats its subscription is then recognised
// without its names being copied or hashed. It returns the block left out
// and where in dst it was; ok is false when the request is not one whose
// names can be left out (no known block, other names, names split around
// other fields, or malformed), and dst must then be joined whole.
func (r *sotwRequest) joinEliding(dst []byte, data mem.BufferSlice) (out []byte, elided *nameBlock, at int, ok bool) {
	rd := newPieceReader(data)
	for !rd.done() {
		start := rd
		num, typ, ok := rd.field()
		if !ok {
			return dst, nil, 0, false
		}
		if num == fieldResourceNames && typ == protowire.BytesType {
			if elided != nil {
				return dst, nil, 0, false
			}
			if elided = r.knownAt(&start); elided == nil {
				return dst, nil, 0, false
			}
			rd, at = start, len(dst)
			continue
		}
		if dst, ok = start.appendN(dst, rd.pos-start.pos); !ok {
			return dst, nil, 0, false
		}
	}
	return dst, elided, at, elided != nil
}

// knownAt returns the known block whose bytes come next in p, with no more
// names after them, and moves p past them; nil (p unmoved) when none does.
func (r *sotwRequest) knownAt(p *pieceReader) *nameBlock {
	for _, k := range r.known {
		if k.block == nil {
			continue
		}
		try := *p
		if !try.equal(k.block.raw) {
			continue
		}
		if c, more := try.peek(); more && c == fieldResourceNames<<3|byte(protowire.BytesType) {
			continue
		}
		*p = try
		return k.block
	}
	return nil
}
