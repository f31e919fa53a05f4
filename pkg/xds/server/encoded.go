package server

import (
	"hash/maphash"
	"slices"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"poise.dev/poise/pkg/xds/xdscache"
)

// A SotW DiscoveryResponse is sent already encoded, in three pieces: the
// version (field 1), the resources (field 2, one Any each) and the type and
// nonce (fields 4 and 5), in the order proto.Marshal writes them, so the
// bytes on the wire are what marshalling the message would give. The
// resources are the bulk: every Envoy of a group is sent the same clusters
// at a version, and every client of a cluster the same assignment after a
// flip. Marshalling them per client cost each one a copy of the response,
// held until its transport had written it (1,000 Envoys starting on 5,000
// clusters held 1.7 GB of such copies at once); encoded once and shared,
// the transport writes the same bytes to every client.
type encodedSotw struct {
	head, body, tail []byte
}

// encodedDelta is a DeltaDiscoveryResponse encoded the same way: the
// system version (field 1), the resources (field 2, a Resource each: its
// version, Any and name) and then the type, nonce and removed names
// (fields 4, 5 and 6). A Delta client starting on a full-state type is
// sent its first chunk of it, the same for every client of its group.
type encodedDelta struct{ encodedSotw }

// pieces is what the codec hands the transport: the shared body is never
// written to, and nothing here is pooled, so freeing the pieces does
// nothing.
func (e *encodedSotw) pieces() mem.BufferSlice {
	return mem.BufferSlice{mem.SliceBuffer(e.head), mem.SliceBuffer(e.body), mem.SliceBuffer(e.tail)}
}

// Responses of at least sharedBodyMin bytes of resources are looked up in
// the body cache; smaller ones cost less to encode than to look up.
const sharedBodyMin = 16 << 10

// bodyCache holds the encoded resources of recent large responses, found
// by the identity of their entries (the cache's entries are never changed
// once made: the same pointers in the same order are the same bytes). It
// holds at most maxBodies bodies and maxBodyBytes bytes, the oldest going
// first.
type bodyCache struct {
	seed  maphash.Seed
	mu    sync.Mutex
	byKey map[uint64][]*sharedBody
	order []*sharedBody // oldest first
	bytes int
}

const (
	maxBodies    = 256
	maxBodyBytes = 256 << 20
)

type sharedBody struct {
	key     uint64
	delta   bool
	entries []*xdscache.Entry
	body    []byte
}

func newBodyCache() *bodyCache {
	return &bodyCache{seed: maphash.MakeSeed(), byKey: map[uint64][]*sharedBody{}}
}

// encodeSotw encodes r for a SotW stream.
func (x *xdsServer) encodeSotw(r xdscache.Response) *encodedSotw {
	e := x.encode(r, false)
	return &e
}

// encodeDelta encodes r for a Delta stream.
func (x *xdsServer) encodeDelta(r xdscache.Response) *encodedDelta {
	return &encodedDelta{x.encode(r, true)}
}

func (x *xdsServer) encode(r xdscache.Response, delta bool) encodedSotw {
	var body []byte
	if r.Bytes >= sharedBodyMin && x.bodies != nil {
		body = x.bodies.get(r.Entries, delta)
	} else {
		body = appendResources(nil, r.Entries, delta)
	}
	n := len(r.Version) + len(r.TypeURL) + len(r.Nonce) + 3*protowire.SizeVarint(1<<20)
	for _, name := range r.Removed {
		n += len(name) + protowire.SizeVarint(uint64(len(name))) + 1
	}
	head := make([]byte, 0, n)
	if r.Version != "" { // proto3: an empty string is not written
		head = protowire.AppendString(protowire.AppendTag(head, 1, protowire.BytesType), r.Version)
	}
	tail := head[len(head):]
	if r.TypeURL != "" {
		tail = protowire.AppendString(protowire.AppendTag(tail, 4, protowire.BytesType), r.TypeURL)
	}
	if r.Nonce != "" {
		tail = protowire.AppendString(protowire.AppendTag(tail, 5, protowire.BytesType), r.Nonce)
	}
	if delta {
		for _, name := range r.Removed {
			tail = protowire.AppendString(protowire.AppendTag(tail, 6, protowire.BytesType), name)
		}
	}
	return encodedSotw{head: head, body: body, tail: tail}
}

// get returns the encoded resources of entries, encoding them once.
func (c *bodyCache) get(entries []*xdscache.Entry, delta bool) []byte {
	var h maphash.Hash
	h.SetSeed(c.seed)
	maphash.WriteComparable(&h, delta)
	for _, e := range entries {
		maphash.WriteComparable(&h, e)
	}
	key := h.Sum64()
	same := func(b *sharedBody) bool { return b.delta == delta && slices.Equal(b.entries, entries) }
	c.mu.Lock()
	for _, b := range c.byKey[key] {
		if same(b) {
			c.mu.Unlock()
			return b.body
		}
	}
	c.mu.Unlock()
	// encoded outside the lock: two streams asking at once may both encode
	// it, and the second keeps the first's
	body := appendResources(nil, entries, delta)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.byKey[key] {
		if same(b) {
			return b.body
		}
	}
	if len(body) > maxBodyBytes {
		return body
	}
	b := &sharedBody{key: key, delta: delta, entries: entries, body: body}
	c.byKey[key] = append(c.byKey[key], b)
	c.order = append(c.order, b)
	c.bytes += len(body)
	for len(c.order) > maxBodies || c.bytes > maxBodyBytes {
		old := c.order[0]
		c.order[0] = nil
		c.order = c.order[1:]
		c.bytes -= len(old.body)
		list := c.byKey[old.key]
		i := slices.Index(list, old)
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(c.byKey, old.key)
		} else {
			c.byKey[old.key] = list
		}
	}
	return body
}

// anySize is the encoded size of an entry's Any: its type URL (field 1)
// and value (field 2).
func anySize(e *xdscache.Entry) int {
	n := 0
	if u := e.Any.GetTypeUrl(); u != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(u))
	}
	if v := e.Any.GetValue(); len(v) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(v))
	}
	return n
}

// resourceSize is the encoded size of a Delta Resource of e: its version
// (field 1), Any (field 2) and name (field 3).
func resourceSize(e *xdscache.Entry) int {
	n := protowire.SizeTag(2) + protowire.SizeBytes(anySize(e))
	if e.Version != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(e.Version))
	}
	if e.Name != "" {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(e.Name))
	}
	return n
}

// appendResources appends field 2 of a DiscoveryResponse (each entry's
// Any) or of a DeltaDiscoveryResponse (each entry's Resource), allocating
// b once when it is nil.
func appendResources(b []byte, entries []*xdscache.Entry, delta bool) []byte {
	if b == nil {
		n := 0
		for _, e := range entries {
			size := anySize(e)
			if delta {
				size = resourceSize(e)
			}
			n += protowire.SizeTag(2) + protowire.SizeBytes(size)
		}
		b = make([]byte, 0, n)
	}
	for _, e := range entries {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		if delta {
			b = protowire.AppendVarint(b, uint64(resourceSize(e)))
			if e.Version != "" {
				b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), e.Version)
			}
			b = protowire.AppendTag(b, 2, protowire.BytesType)
		}
		b = protowire.AppendVarint(b, uint64(anySize(e)))
		if u := e.Any.GetTypeUrl(); u != "" {
			b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), u)
		}
		if v := e.Any.GetValue(); len(v) > 0 {
			b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), v)
		}
		if delta && e.Name != "" {
			b = protowire.AppendString(protowire.AppendTag(b, 3, protowire.BytesType), e.Name)
		}
	}
	return b
}
