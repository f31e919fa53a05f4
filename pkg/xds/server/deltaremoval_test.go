package server_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// A Delta client that subscribes to "*" while a deletion waits for its
// answer is told of the deletion with the whole scope: the wildcard's
// response carries the resources and the removal of what it still holds.
func TestDeltaWildcardCarriesPendingRemovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("v1", put(0, CDS, entry(t, "v1", cluster("c", 1)), entry(t, "v1", cluster("p", 1))))
	d := h.delta(envoyNode("wildcard-later"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesSubscribe: []string{"c"}})
	first := d.expect(CDS, at("v1", "c"), nil)
	h.apply("v2", del(0, CDS, "c")) // pending: the client has not answered
	d.none(quiet)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResponseNonce: first.GetNonce(), ResourceNamesSubscribe: []string{"*"}})
	d.ack(d.expect(CDS, at("v1", "p"), []string{"c"}))
	d.none(quiet)
}
