package server

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// FuzzSotwRequest reads arbitrary bytes, in arbitrary pieces, after a
// request that left a known subscription: it never panics, and whatever it
// reads of a request proto.Unmarshal also accepts is what proto.Unmarshal
// reads.
func FuzzSotwRequest(f *testing.F) {
	known, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(20, "svc")})
	f.Add(known, uint8(7))
	f.Add(known[:len(known)-3], uint8(16))
	ack, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(20, "svc"), VersionInfo: "v1", ResponseNonce: "1"})
	f.Add(ack, uint8(3))
	f.Add([]byte{0x1a, 0x05, 'a'}, uint8(1))
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	f.Fuzz(func(t *testing.T, b []byte, size uint8) {
		r := &sotwRequest{seed: c.Seed(), blocks: newNameBlocks(maxNameBlockBytes)}
		defer r.forget()
		if err := newCodec().Unmarshal(framesOf(known, 5), r); err != nil {
			t.Fatal(err)
		}
		r.remember(xdstype.Endpoints)
		r.release()
		err := newCodec().Unmarshal(framesOf(b, int(size)+1), r)
		defer r.release()
		want := &discovery.DiscoveryRequest{}
		if err != nil || proto.Unmarshal(b, want) != nil {
			return
		}
		if got := r.resourceNames(); r.namesHash != c.HashNames(want.ResourceNames) || r.names != len(want.ResourceNames) ||
			len(got)+len(want.ResourceNames) > 0 && !slices.Equal(got, want.ResourceNames) ||
			string(r.version) != want.VersionInfo || string(r.nonce) != want.ResponseNonce || string(r.typeURL) != want.TypeUrl {
			t.Fatalf("read %d names, version %q, nonce %q, type %q; proto.Unmarshal reads %d, %q, %q, %q",
				r.names, r.version, r.nonce, r.typeURL, len(want.ResourceNames), want.VersionInfo, want.ResponseNonce, want.TypeUrl)
		}
	})
}
