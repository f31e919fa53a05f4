package server

import (
	"bytes"
	"fmt"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdscache"
)

// TestEncodedSotwIsWhatMarshallingGives: the pieces a SotW response is sent
// in are, joined, the bytes proto.Marshal gives for the same message, with
// or without a version, type or nonce, small or large (shared), with empty
// resources among them.
func TestEncodedSotwIsWhatMarshallingGives(t *testing.T) {
	t.Parallel()
	x := &xdsServer{bodies: newBodyCache()}
	entries := func(n, size int) []*xdscache.Entry {
		var out []*xdscache.Entry
		for i := range n {
			out = append(out, xdscache.NewEntryBytes(fmt.Sprintf("r-%d", i), "v1", "type.googleapis.com/envoy.config.cluster.v3.Cluster",
				bytes.Repeat([]byte{byte(i)}, size*(i%3))))
		}
		return out
	}
	small, large := entries(5, 10), entries(400, 100)
	empty := []*xdscache.Entry{xdscache.NewEntryBytes("e", "v", "", nil)}
	for _, tc := range []struct {
		name string
		r    xdscache.Response
	}{
		{"small", xdscache.Response{TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Version: "abc-7", Nonce: "12", Entries: small}},
		{"large", xdscache.Response{TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Version: "abc-8", Nonce: "13", Entries: large, Bytes: 40_000}},
		{"no version or nonce", xdscache.Response{TypeURL: "t", Entries: small}},
		{"nothing", xdscache.Response{}},
		{"an empty Any", xdscache.Response{Version: "v", Entries: empty}},
		{"removed names", xdscache.Response{TypeURL: "t", Version: "v", Nonce: "n", Entries: small, Removed: []string{"gone-1", "gone-2"}}},
		{"large, removed names", xdscache.Response{TypeURL: "t", Version: "v", Nonce: "n", Entries: large, Bytes: 40_000, Removed: []string{"gone"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.r.Removed) == 0 {
				want, err := proto.Marshal(sotwResponse(tc.r))
				if err != nil {
					t.Fatal(err)
				}
				if got := x.encodeSotw(tc.r).pieces().Materialize(); !bytes.Equal(got, want) {
					t.Errorf("SotW: encoded %x\nmarshalled %x", got, want)
				}
			}
			want, err := proto.Marshal(deltaResponse(tc.r))
			if err != nil {
				t.Fatal(err)
			}
			if got := x.encodeDelta(tc.r).pieces().Materialize(); !bytes.Equal(got, want) {
				t.Errorf("Delta: encoded %x\nmarshalled %x", got, want)
			}
		})
	}
	// two clients of one version share the resources' bytes
	a := x.encodeSotw(xdscache.Response{Version: "v", Nonce: "1", Entries: large, Bytes: 40_000})
	b := x.encodeSotw(xdscache.Response{Version: "v", Nonce: "2", Entries: append([]*xdscache.Entry(nil), large...), Bytes: 40_000})
	if unsafe.SliceData(a.body) != unsafe.SliceData(b.body) {
		t.Error("two responses of the same entries were encoded twice")
	}
	d := x.encodeDelta(xdscache.Response{Version: "v", Nonce: "3", Entries: large, Bytes: 40_000})
	if unsafe.SliceData(d.body) == unsafe.SliceData(a.body) {
		t.Error("a Delta response shares a SotW response's body")
	}
}

// TestBodyCacheIsBounded: the cache keeps at most maxBodies bodies.
func TestBodyCacheIsBounded(t *testing.T) {
	t.Parallel()
	c := newBodyCache()
	for i := range 3 * maxBodies {
		e := xdscache.NewEntryBytes("r", "v", "t", []byte{byte(i), byte(i >> 8)})
		c.get([]*xdscache.Entry{e}, i%2 == 0)
	}
	n := 0
	for _, l := range c.byKey {
		n += len(l)
	}
	if len(c.order) != maxBodies || n != maxBodies {
		t.Errorf("%d bodies in order, %d by key; want %d", len(c.order), n, maxBodies)
	}
}

// sotwResponse and deltaResponse are the messages a response encodes:
// what proto.Marshal is held to.
func sotwResponse(r xdscache.Response) *discovery.DiscoveryResponse {
	resp := &discovery.DiscoveryResponse{VersionInfo: r.Version, TypeUrl: r.TypeURL, Nonce: r.Nonce,
		Resources: make([]*anypb.Any, len(r.Entries))}
	for i, e := range r.Entries {
		resp.Resources[i] = e.Any
	}
	return resp
}

func deltaResponse(r xdscache.Response) *discovery.DeltaDiscoveryResponse {
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: r.Version, TypeUrl: r.TypeURL, Nonce: r.Nonce,
		RemovedResources: r.Removed, Resources: make([]*discovery.Resource, len(r.Entries))}
	for i, e := range r.Entries {
		resp.Resources[i] = &discovery.Resource{Name: e.Name, Version: e.Version, Resource: e.Any}
	}
	return resp
}
