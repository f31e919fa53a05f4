package xdscache_test

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// The backlog counts each stream woken and not yet served once, however
// often it is woken, until its Next; a stream that closes while woken
// leaves it, and a change after that counts nothing.
func TestBacklogCountsStreamsWokenUntilServed(t *testing.T) {
	c := newCache()
	put := func(v string, names ...string) { putCLAs(t, c, v, names...) }
	put("v1", "a", "b")
	want := func(n int64) {
		t.Helper()
		if got := c.Waiting(); got != n {
			t.Fatalf("waiting %d, want %d", got, n)
		}
	}
	want(0)
	one, two := openSotw(t, c, envoy), openSotw(t, c, envoy)
	one.request(resource.EndpointType, "", "", false, "a")
	two.request(resource.EndpointType, "", "", false, "a", "b")
	want(2)
	r1 := one.expect(resource.EndpointType, "v1", "a")
	want(1)
	r2 := two.expect(resource.EndpointType, "v1", "a", "b")
	want(0)
	one.ack(r1)
	two.ack(r2)
	one.silent()
	two.silent()
	want(0)

	put("v2", "a")
	put("v3", "a", "b")
	want(2) // woken twice each, counted once
	one.expect(resource.EndpointType, "v3", "a")
	want(1)
	two.s.Close()
	want(0)
	put("v4", "b")
	want(0)
	two.s.Close()
	want(0)
}
