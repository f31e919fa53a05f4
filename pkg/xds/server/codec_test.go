package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

func names(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

func decodeInto(t testing.TB, r *sotwRequest, b []byte) {
	t.Helper()
	if err := newCodec().Unmarshal(framesOf(b, frameSize), r); err != nil {
		t.Fatal(err)
	}
}

// frameSize is HTTP/2's default largest frame: the transport hands a
// message over in pieces of at most this size.
const frameSize = 16 << 10

// framesOf cuts b into pieces of size bytes, as the transport delivers it.
func framesOf(b []byte, size int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > size {
		out = append(out, mem.SliceBuffer(b[:size]))
		b = b[size:]
	}
	return append(out, mem.SliceBuffer(b))
}

// The server's hash of a request's names, however it reads them, is the
// cache's hash of the same names in the same order.
func TestRequestNamesHash(t *testing.T) {
	t.Parallel()
	for _, blocks := range []*nameBlocks{nil, newNameBlocks(maxNameBlockBytes), newNameBlocks(100)} {
		testRequestNamesHash(t, blocks)
	}
}

func testRequestNamesHash(t *testing.T, blocks *nameBlocks) {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	r := &sotwRequest{seed: c.Seed(), blocks: blocks}
	eds, other := names(300, "svc"), names(300, "svd") // same lengths, other bytes
	for i, tc := range []struct {
		req  *discovery.DiscoveryRequest
		want []string
	}{
		{&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: "n1"}}, nil},
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: eds}, eds},
		// an ACK repeating them: recognised by their bytes
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: eds, VersionInfo: "v1", ResponseNonce: "1"}, eds},
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: other, VersionInfo: "v1", ResponseNonce: "2"}, other},
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: eds[:299], VersionInfo: "v1", ResponseNonce: "3"}, eds[:299]},
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: append(slices.Clone(eds), "x"), ResponseNonce: "4"}, append(slices.Clone(eds), "x")},
		{&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: eds, ResponseNonce: "5",
			ErrorDetail: &status.Status{Message: "bad"}}, eds},
	} {
		b, err := proto.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		// in one piece, in frames, and in pieces that split every field
		for _, size := range []int{len(b) + 1, frameSize, 7} {
			if err := newCodec().Unmarshal(framesOf(b, size), r); err != nil {
				t.Fatal(err)
			}
			if r.namesHash != c.HashNames(tc.want) || !slices.Equal(r.resourceNames(), tc.want) && len(tc.want) > 0 {
				t.Fatalf("case %d, pieces of %d: hash or names differ from the request's", i, size)
			}
			if string(r.typeURL) != tc.req.GetTypeUrl() || string(r.nonce) != tc.req.GetResponseNonce() || r.hasNode != (tc.req.Node != nil) ||
				r.hasError != (tc.req.ErrorDetail != nil) || string(r.version) != tc.req.GetVersionInfo() {
				t.Fatalf("case %d, pieces of %d: fields read wrongly", i, size)
			}
			if size == 7 {
				r.remember(xdstype.Index(tc.req.GetTypeUrl()))
			}
			r.release()
		}
	}

	// Names interleaved with other fields hash the same as in order.
	var b []byte
	b = protowire.AppendTag(b, fieldResourceNames, protowire.BytesType)
	b = protowire.AppendString(b, "a")
	b = protowire.AppendTag(b, fieldTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, resource.EndpointType)
	b = protowire.AppendTag(b, fieldResourceNames, protowire.BytesType)
	b = protowire.AppendString(b, "b")
	decodeInto(t, r, b)
	if r.namesHash != c.HashNames([]string{"a", "b"}) {
		t.Fatal("interleaved names hash differently")
	}

	if err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x1a, 0x05, 'a'})}, r); err == nil {
		t.Fatal("a truncated request was read")
	}
}

// An ACK that repeats a subscription of any size allocates a constant
// number of times: its names are neither decoded nor compared one by one.
func TestACKAllocatesO1(t *testing.T) {
	for _, n := range []int{10, 5000} {
		c := xdscache.New(1, func(*core.Node) int { return 0 })
		x := &xdsServer{cache: c, clients: NewClients(nil, nil), names: newNameBlocks(maxNameBlockBytes)}
		key := streamKey{"sotw", 1}
		st := c.NewStream(false)
		x.clients.open(key, st)
		list := names(n, "svc")
		var changes []xdscache.Change
		for _, name := range list {
			e, err := xdscache.NewEntry(name, "v1", &discovery.DiscoveryRequest{TypeUrl: name})
			if err != nil {
				t.Fatal(err)
			}
			changes = append(changes, xdscache.Change{TypeURL: resource.EndpointType, Name: name, Entry: e})
		}
		c.Apply(xdscache.Update{Version: "v1", Changes: changes})
		req := &sotwRequest{seed: c.Seed(), blocks: x.names}
		first, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: list, Node: &core.Node{Id: "n"}})
		decodeInto(t, req, first)
		if err := x.handleSotw(st, key, "", req); err != nil {
			t.Fatal(err)
		}
		out := st.Next(nil)
		if len(out) != 1 || len(out[0].Entries) != n {
			t.Fatalf("first response: %d responses", len(out))
		}
		x.clients.response(key, out[0].TypeURL, out[0].Version, out[0].Nonce, out[0].Entries, out[0].Removed, time.Time{})
		ack, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: list, VersionInfo: "v1", ResponseNonce: out[0].Nonce})
		nonce := out[0].Nonce
		frames := framesOf(ack, frameSize)
		allocs := testing.AllocsPerRun(100, func() {
			if err := newCodec().Unmarshal(frames, req); err != nil {
				t.Fatal(err)
			}
			if err := x.handleSotw(st, key, "", req); err != nil {
				t.Fatal(err)
			}
			if string(req.nonce) != nonce {
				t.Fatal("nonce")
			}
			req.release()
		})
		t.Logf("%d names: %.0f allocations per ACK", n, allocs)
		if allocs > 6 {
			t.Errorf("%d names: an ACK allocates %.0f times, want at most 6", n, allocs)
		}
	}
}

// transportFrames hands b over as the transport does, into dst: copied
// frame by frame into buffers from gRPC's pool, to be freed once read.
func transportFrames(dst mem.BufferSlice, b []byte) mem.BufferSlice {
	dst = dst[:0]
	for len(b) > 0 {
		n := min(len(b), frameSize)
		dst = append(dst, mem.Copy(b[:n], mem.DefaultBufferPool()))
		b = b[n:]
	}
	return dst
}

// A stream holds no request bytes between requests, however large the
// last one was: a thousand clients that each repeat a large subscription
// must not each keep a copy of it.
func TestRequestHoldsNoBytes(t *testing.T) {
	t.Parallel()
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	r := &sotwRequest{seed: c.Seed()}
	large, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(50000, "svc")})
	small, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(10, "svc")})
	for _, b := range [][]byte{large, small} {
		decodeInto(t, r, b)
		if len(r.buf) != len(b) {
			t.Fatalf("read %d of %d bytes", len(r.buf), len(b))
		}
		r.release()
		if r.buf != nil || r.scratch != nil || r.held != nil || r.nonce != nil {
			t.Fatal("the request kept its bytes after release")
		}
	}
}

// Streams that subscribe to the same names share one block of their bytes;
// the block goes when the last of them does, and the blocks' total stays
// within its limit.
func TestNameBlocksShared(t *testing.T) {
	t.Parallel()
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	eds := names(1000, "svc")
	req := func(n []string) []byte {
		b, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: n})
		return b
	}
	t.Run("shared", func(t *testing.T) {
		blocks := newNameBlocks(maxNameBlockBytes)
		var streams []*sotwRequest
		for i := range 10 {
			r := &sotwRequest{seed: c.Seed(), blocks: blocks}
			subscription := eds
			if i == 9 {
				subscription = eds[1:]
			}
			decodeInto(t, r, req(subscription))
			r.remember(xdstype.Endpoints)
			r.release()
			decodeInto(t, r, req(subscription)) // its ACK
			if r.span.block == nil || r.namesHash != c.HashNames(subscription) {
				t.Fatal("an ACK was not recognised by its block")
			}
			r.remember(xdstype.Endpoints)
			r.release()
			streams = append(streams, r)
		}
		if n, held := blocks.size(); n != 2 || held > 2*len(req(eds)) {
			t.Fatalf("10 streams over 2 subscriptions hold %d blocks of %d bytes", n, held)
		}
		// one stream changes its subscription: its old block stays for the others
		decodeInto(t, streams[0], req(eds[:500]))
		streams[0].remember(xdstype.Endpoints)
		if n, _ := blocks.size(); n != 3 {
			t.Fatalf("%d blocks after a change, want 3", n)
		}
		for _, r := range streams {
			r.forget()
		}
		if n, held := blocks.size(); n != 0 || held != 0 {
			t.Fatalf("%d blocks of %d bytes left after every stream went", n, held)
		}
	})
	t.Run("limit", func(t *testing.T) {
		blocks := newNameBlocks(len(req(eds)) + len(req(eds))/2)
		for _, sub := range [][]string{eds, eds[1:], eds[2:]} {
			r := &sotwRequest{seed: c.Seed(), blocks: blocks}
			decodeInto(t, r, req(sub))
			r.remember(xdstype.Endpoints)
			r.release()
			decodeInto(t, r, req(sub))
			if r.namesHash != c.HashNames(sub) {
				t.Fatal("an ACK past the limit was not recognised by its hash")
			}
		}
		if n, held := blocks.size(); n != 1 || held > blocks.limit {
			t.Fatalf("%d blocks of %d bytes, limit %d", n, held, blocks.limit)
		}
	})
}

// However a stream's requests are cut into pieces, ordered and repeated,
// what the server reads of each is what proto.Unmarshal reads: the names
// (and their hash), version, nonce and type.
func TestRequestReadAsDecoded(t *testing.T) {
	t.Parallel()
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	rng := rand.New(rand.NewPCG(1, 2))
	subs := [][]string{names(200, "svc"), names(200, "svd"), names(3, "svc"), nil, names(2000, "svc")}
	for stream := range 50 {
		r := &sotwRequest{seed: c.Seed(), blocks: newNameBlocks(maxNameBlockBytes)}
		for i := range 20 {
			sub := subs[rng.IntN(len(subs))]
			typ := []string{resource.EndpointType, resource.ClusterType}[rng.IntN(2)]
			// field order varies: names first, last, or split around the type
			var b []byte
			field := func(num protowire.Number, v string) {
				b = protowire.AppendTag(b, num, protowire.BytesType)
				b = protowire.AppendString(b, v)
			}
			split := len(sub)
			if rng.IntN(4) == 0 {
				split = rng.IntN(len(sub) + 1)
			}
			field(fieldVersionInfo, fmt.Sprintf("v%d", i))
			for _, n := range sub[:split] {
				field(fieldResourceNames, n)
			}
			field(fieldTypeURL, typ)
			for _, n := range sub[split:] {
				field(fieldResourceNames, n)
			}
			field(fieldResponseNonce, fmt.Sprint(i))
			want := &discovery.DiscoveryRequest{}
			if err := proto.Unmarshal(b, want); err != nil {
				t.Fatal(err)
			}
			size := []int{len(b) + 1, frameSize, 1 + rng.IntN(64), 1 + rng.IntN(4096)}[rng.IntN(4)]
			if err := newCodec().Unmarshal(framesOf(b, size), r); err != nil {
				t.Fatal(err)
			}
			got := r.resourceNames()
			if r.namesHash != c.HashNames(want.ResourceNames) || !slices.Equal(got, want.ResourceNames) && len(got)+len(want.ResourceNames) > 0 ||
				r.names != len(want.ResourceNames) || string(r.version) != want.VersionInfo || string(r.nonce) != want.ResponseNonce ||
				string(r.typeURL) != want.TypeUrl {
				t.Fatalf("stream %d request %d (pieces of %d): read %d names, version %q, nonce %q, type %q; want %d, %q, %q, %q",
					stream, i, size, r.names, r.version, r.nonce, r.typeURL, len(want.ResourceNames), want.VersionInfo, want.ResponseNonce, want.TypeUrl)
			}
			r.remember(xdstype.Index(typ))
			r.release()
		}
		r.forget()
		if n, held := r.blocks.size(); n != 0 || held != 0 {
			t.Fatalf("stream %d left %d blocks", stream, n)
		}
	}
}
