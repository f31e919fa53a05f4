package server

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdscache"
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
	if err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil {
		t.Fatal(err)
	}
}

// The server's hash of a request's names, however it reads them, is the
// cache's hash of the same names in the same order.
func TestRequestNamesHash(t *testing.T) {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	r := &sotwRequest{seed: c.Seed()}
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
		decodeInto(t, r, b)
		if r.namesHash != c.HashNames(tc.want) || !slices.Equal(r.resourceNames(), tc.want) && len(tc.want) > 0 {
			t.Fatalf("case %d: hash or names differ from the request's", i)
		}
		if string(r.typeURL) != tc.req.GetTypeUrl() || string(r.nonce) != tc.req.GetResponseNonce() || r.hasNode != (tc.req.Node != nil) ||
			r.hasError != (tc.req.ErrorDetail != nil) || string(r.version) != tc.req.GetVersionInfo() {
			t.Fatalf("case %d: fields read wrongly", i)
		}
		r.remember(xdscache.TypeIndex(tc.req.GetTypeUrl()))
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
		x := &xdsServer{cache: c, clients: NewClients(nil, nil)}
		key := streamKey{"sotw", 1}
		x.clients.open(key)
		st := c.NewStream(false)
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
		req := &sotwRequest{seed: c.Seed()}
		first, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: list, Node: &core.Node{Id: "n"}})
		decodeInto(t, req, first)
		if err := x.handleSotw(st, key, "", req); err != nil {
			t.Fatal(err)
		}
		out := st.Next(nil)
		if len(out) != 1 || len(out[0].Entries) != n {
			t.Fatalf("first response: %d responses", len(out))
		}
		x.clients.response(key, out[0].TypeURL, out[0].Version, out[0].Nonce, n)
		ack, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: list, VersionInfo: "v1", ResponseNonce: out[0].Nonce})
		nonce := out[0].Nonce
		allocs := testing.AllocsPerRun(100, func() {
			decodeInto(t, req, ack)
			if err := x.handleSotw(st, key, "", req); err != nil {
				t.Fatal(err)
			}
			if string(req.nonce) != nonce {
				t.Fatal("nonce")
			}
		})
		t.Logf("%d names: %.0f allocations per ACK", n, allocs)
		if allocs > 6 {
			t.Errorf("%d names: an ACK allocates %.0f times, want at most 6", n, allocs)
		}
	}
}

func bufferOf(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }

// A stream's request buffer shrinks back after one large request.
func TestRequestBufferShrinks(t *testing.T) {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	r := &sotwRequest{seed: c.Seed()}
	large, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(50000, "svc")})
	small, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(10, "svc")})
	decodeInto(t, r, large)
	decodeInto(t, r, small)
	if cap(r.buf) > 64<<10 {
		t.Fatalf("the buffer kept %d bytes for a %d-byte request", cap(r.buf), len(small))
	}
}
