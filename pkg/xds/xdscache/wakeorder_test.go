package xdscache_test

import (
	"fmt"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/xdscache"
)

// The streams a change wakes are woken connection by connection: the
// streams of one connection one after another, so that their responses
// can leave in one write. Subscriptions kept in maps would otherwise wake
// them in a random order.
func TestStreamsOfAConnectionAreWokenTogether(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "hot", "v1", cla("hot", 1)))}})
	const conns, perConn = 20, 3
	connOf := map[*xdscache.Stream]uint64{}
	for i := range conns * perConn {
		sc := openSotw(t, c, envoy)
		// keys out of order, and the streams of a connection opened apart
		key := uint64(i%conns)*0x9e3779b97f4a7c15 + 1
		sc.s.SetConnection(key)
		connOf[sc.s] = key
		// some subscribe to more than the hot name: they sit in other subsets
		names := []string{"hot"}
		if i%2 == 0 {
			names = append(names, fmt.Sprintf("other-%d", i))
		}
		sc.request(resource.EndpointType, "", "", false, names...)
		sc.ack(sc.expect(resource.EndpointType, "v1", "hot"))
	}
	var order []uint64
	c.OnSignal(func(s *xdscache.Stream) { order = append(order, connOf[s]) })
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "hot", "v2", cla("hot", 2)))}})
	if len(order) != conns*perConn {
		t.Fatalf("%d streams woken, want %d", len(order), conns*perConn)
	}
	done := map[uint64]bool{}
	for i, k := range order {
		if i > 0 && k != order[i-1] {
			if done[k] {
				t.Fatalf("the streams of connection %x were woken apart: %x", k, order)
			}
			done[order[i-1]] = true
		}
	}
}
