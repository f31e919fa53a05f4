package server_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// A Delta client subscribed to "*" and to names by name stays subscribed
// to those names when it unsubscribes from "*" (as the protocol has it, and
// go-control-plane): it is then sent their changes and not the others'.
// Both ways of naming them are held: before "*", and with it.
func TestDeltaWildcardKeepsNamedSubscriptions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("v1", put(0, CDS, entry(t, "v1", cluster("a", 1)), entry(t, "v1", cluster("b", 1))))
	for i, first := range [][]string{{"a"}, {"*", "a"}} {
		d := h.delta(envoyNode("named"))
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesSubscribe: first})
		v := "v" + string(rune('1'+i))
		if len(first) == 1 {
			d.ack(d.expect(CDS, at(v, "a"), nil))
			d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesSubscribe: []string{"*"}})
		}
		d.ack(d.expect(CDS, at(v, "a", "b"), nil))
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesUnsubscribe: []string{"*"}})
		d.none(quiet)
		next := "v" + string(rune('2'+i))
		h.apply(next, put(0, CDS, entry(t, next, cluster("a", int64(2+i))), entry(t, next, cluster("b", int64(2+i)))))
		d.ack(d.expect(CDS, at(next, "a"), nil))
		d.none(quiet)
		d.close()
	}
}
