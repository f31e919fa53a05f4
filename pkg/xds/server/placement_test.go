package server_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointsvc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdscache"
)

// tokenHarness is a real xDS server (with LRS) whose clients prove who they
// are with bearer tokens, reviewed by kube.
type tokenHarness struct {
	*harness
	kube  *identitytest.Kube
	loads *loadreport.Store
}

func newTokenHarness(t *testing.T, o identity.TokenOptions) *tokenHarness {
	t.Helper()
	return newTokenHarnessWith(t, o, server.Config{})
}

// newTokenHarnessWith is newTokenHarness with the server configured as cfg
// (its Authenticator is the harness's).
func newTokenHarnessWith(t *testing.T, o identity.TokenOptions, cfg server.Config) *tokenHarness {
	t.Helper()
	kube := identitytest.New()
	cfg.Authenticator = identity.New(identity.Options{Tokens: identity.NewTokenVerifier(kube, o)})
	h, loads := lrsHarness(t, cfg)
	return &tokenHarness{harness: h, kube: kube, loads: loads}
}

// pod makes a token of service account a/pay bound to pod name on node,
// valid for an hour.
func (h *tokenHarness) pod(name, node string) string {
	tok := identitytest.Token(name, time.Now().Add(time.Hour))
	h.kube.Accept(tok, "a", "pay", name, "uid-"+name, node)
	return tok
}

// bearing is a context whose calls carry the token.
func bearing(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// claimingZone is an Envoy node that claims zone r1/zone and a demand
// weight of 1,000,000.
func claimingZone(id, zone string) *core.Node {
	n := envoyNode(id)
	n.Locality = &core.Locality{Region: "r1", Zone: zone}
	n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{server.DemandWeightKey: structpb.NewNumberValue(1_000_000)}}
	return n
}

// TestPlacedByTokenLocality: a client whose token's pod runs on a node of
// zone r1/z1 while its node claims r1/z2 is placed in r1/z1 on every kind
// of call: its SotW and Delta streams are sent z1's variant and counted in
// z1's census and demand (at the 1 its identity is granted, not the 1,000,000
// claimed), unary Fetch answers with z1's variant, and its load reports are
// filed under r1/z1; /debug/clients shows both zones. A token whose node has
// no zone labels proves no locality: its claim stands.
func TestPlacedByTokenLocality(t *testing.T) {
	h := newTokenHarness(t, identity.TokenOptions{})
	h.kube.SetZone("node-z1", "r1", "z1")
	h.kube.SetNode("node-bare", map[string]string{})
	publishV1(t, h.harness)
	h.apply("v2",
		[]xdscache.Change{{View: 0, TypeURL: EDS, Name: "c1", Zone: "r1/z1", Entry: entry(t, "v2", cla("c1", 9001))}},
		[]xdscache.Change{{View: 0, TypeURL: EDS, Name: "c1", Zone: "r1/z2", Entry: entry(t, "v2", cla("c1", 9002))}},
		both(CDS, entry(t, "v2", cluster("bench/svc-0000", 1))))
	forger := h.pod("forger-0", "node-z1")

	s := h.sotwIn(bearing(forger), claimingZone("forger-sotw", "z2"))
	s.subscribe(EDS, "c1")
	if r := s.expect(EDS, "v2", "c1"); portOf(t, r.GetResources()[0]) != 9001 {
		t.Errorf("SotW from a pod in z1 claiming z2: port %d, want z1's 9001", portOf(t, r.GetResources()[0]))
	}
	d := h.deltaIn(bearing(forger), claimingZone("forger-delta", "z2"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1"}})
	if r := d.expect(EDS, at("v2@r1/z1", "c1"), nil); portOf(t, r.GetResources()[0].GetResource()) != 9001 {
		t.Errorf("Delta from a pod in z1 claiming z2: port %d, want z1's 9001", portOf(t, r.GetResources()[0].GetResource()))
	}
	eventually(t, "both streams counted in z1", func() bool { return h.cache.Zones(0)["r1/z1"] == 2 })
	if zs := h.cache.Zones(0); zs["r1/z2"] != 0 {
		t.Errorf("census %v: nothing may count in the claimed zone", zs)
	}
	if got, want := h.cache.Demand(EDS, "c1"), map[string]uint64{"r1/z1": 1}; !maps.Equal(got, want) {
		t.Errorf("demand %v, want %v: one instance in the placed zone, at its grant", got, want)
	}
	for _, id := range []string{"forger-sotw", "forger-delta"} {
		cl := h.client(id)
		if cl.Zone != "r1/z1" || cl.ZoneFrom != server.ZoneFromIdentity || cl.ClaimedZone != "r1/z2" || cl.Class != "r1/z1" ||
			cl.Identity == nil || cl.Identity.Node != "node-z1" {
			t.Errorf("/debug/clients %s: zone %q from %q, claimed %q, class %q, identity %+v; want r1/z1 from identity (node-z1), claimed r1/z2",
				id, cl.Zone, cl.ZoneFrom, cl.ClaimedZone, cl.Class, cl.Identity)
		}
	}

	ctx, cancel := context.WithTimeout(bearing(forger), recvTimeout)
	defer cancel()
	fetched, err := endpointsvc.NewEndpointDiscoveryServiceClient(h.conn).FetchEndpoints(ctx,
		&discovery.DiscoveryRequest{Node: claimingZone("forger-fetch", "z2"), ResourceNames: []string{"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := portOf(t, fetched.GetResources()[0]); p != 9001 {
		t.Errorf("Fetch from a pod in z1 claiming z2: port %d, want z1's 9001", p)
	}

	stream, err := lrs.NewLoadReportingServiceClient(h.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&lrs.LoadStatsRequest{Node: claimingZone("forger-lrs", "z2"),
		ClusterStats: []*endpointv3.ClusterStats{endpointStats("bench/svc-0000", "10.0.0.0", 10, 10, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, e := range h.loads.Cluster("bench/svc-0000", time.Now()) {
		for _, c := range e.Classes {
			classes = append(classes, c.Class)
		}
	}
	if !slices.Equal(classes, []string{"r1/z1"}) {
		t.Errorf("load reports filed under %v, want [r1/z1]", classes)
	}

	// a pod on a node without zone labels: the node's claim stands
	honest := h.pod("honest-0", "node-bare")
	b := h.sotwIn(bearing(honest), claimingZone("bare-sotw", "z2"))
	b.subscribe(EDS, "c1")
	if r := b.expect(EDS, "v2", "c1"); portOf(t, r.GetResources()[0]) != 9002 {
		t.Errorf("SotW from a pod on an unlabelled node claiming z2: port %d, want z2's 9002", portOf(t, r.GetResources()[0]))
	}
	if cl := h.client("bare-sotw"); cl.Zone != "r1/z2" || cl.ZoneFrom != server.ZoneFromNode || cl.ClaimedZone != "" {
		t.Errorf("/debug/clients bare-sotw: zone %q from %q, claimed %q; want r1/z2 from node", cl.Zone, cl.ZoneFrom, cl.ClaimedZone)
	}
}
