package server_test

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/xds/server"
)

// claiming is an Envoy node of zone r1/z1 that declares a demand weight.
func claiming(id string, weight float64) *core.Node {
	n := envoyNode(id)
	n.Locality = &core.Locality{Region: "r1", Zone: "z1"}
	n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{server.DemandWeightKey: structpb.NewNumberValue(weight)}}
	return n
}

// demandOf publishes the endpoints of name, subscribes a stream of node
// over the harness's connection to them, and returns what the stream
// counts for in their demand once it is sent them (the cache counts a
// watch before it answers it).
func demandOf(t *testing.T, h *harness, node *core.Node, name string) uint64 {
	t.Helper()
	h.apply(name, both(EDS, entry(t, name, cla(name, 9000))))
	c := h.sotw(node)
	c.subscribe(EDS, name)
	c.recv()
	return demandSum(h, name)
}

// demandSum is the demand for name's endpoints, over every zone.
func demandSum(h *harness, name string) (sum uint64) {
	for _, d := range h.cache.Demand(EDS, name) {
		sum += d
	}
	return sum
}

// TestDemandCappedByIdentity: over real mTLS, the demand weight a node
// claims counts only up to what its proven identity is granted (1 unless
// granted more), and /debug/clients says so; an anonymous client's claim
// counts as it is.
func TestDemandCappedByIdentity(t *testing.T) {
	ca := newSPIFFECA(t)
	grant := func(id identity.Identity) uint64 {
		if id.Principal() == "a/granted" {
			return 5
		}
		return 0
	}
	h := newHarnessWith(t, server.Config{TLS: ca.serverTLS(t), Authenticator: identity.New(identity.Options{}), DemandGrant: grant}, nil)
	cert := func(sa string) {
		h.conn = ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/a/sa/"+sa))
	}

	cert("plain")
	if got := demandOf(t, h, claiming("plain", 1_000_000), "e-plain"); got != 1 {
		t.Errorf("an identity granted nothing claiming 1000000 counts %d, want 1", got)
	}
	cl := h.client("plain")
	if cl.DemandWeight != 1 || !strings.Contains(cl.DemandNote, "capped at 1") {
		t.Errorf("/debug/clients: demand %d, note %q; want 1, capped at 1", cl.DemandWeight, cl.DemandNote)
	}

	cert("granted")
	if got := demandOf(t, h, claiming("granted-high", 1_000_000), "e-high"); got != 5 {
		t.Errorf("an identity granted 5 claiming 1000000 counts %d, want 5", got)
	}
	if cl := h.client("granted-high"); cl.DemandWeight != 5 || !strings.Contains(cl.DemandNote, "capped at 5") {
		t.Errorf("/debug/clients: demand %d, note %q; want 5, capped at 5", cl.DemandWeight, cl.DemandNote)
	}
	if got := demandOf(t, h, claiming("granted-low", 3), "e-low"); got != 3 {
		t.Errorf("an identity granted 5 claiming 3 counts %d, want 3", got)
	}
	if cl := h.client("granted-low"); cl.DemandWeight != 3 || cl.DemandNote != "" {
		t.Errorf("/debug/clients: demand %d, note %q; want 3 and no note", cl.DemandWeight, cl.DemandNote)
	}

	anon := newHarness(t)
	if got := demandOf(t, anon, claiming("anonymous", 1_000_000), "e-anon"); got != 1_000_000 {
		t.Errorf("an anonymous client claiming 1000000 counts %d, want 1000000 (not capped)", got)
	}
	if cl := anon.client("anonymous"); cl.DemandWeight != 1_000_000 || cl.DemandNote != "" {
		t.Errorf("/debug/clients of the anonymous client: demand %d, note %q; want 1000000 and no note", cl.DemandWeight, cl.DemandNote)
	}
}

// TestDemandCountsAnInstanceOnce: the streams of one client certificate
// (one workload instance) count once in a Balanced demand however many it
// opens; another certificate of the same service account is another
// instance, and counts.
func TestDemandCountsAnInstanceOnce(t *testing.T) {
	ca := newSPIFFECA(t)
	grant := func(identity.Identity) uint64 { return 5 }
	h := newHarnessWith(t, server.Config{TLS: ca.serverTLS(t), Authenticator: identity.New(identity.Options{}), DemandGrant: grant}, nil)
	spiffe := "spiffe://cluster.local/ns/a/sa/pay"
	h.conn = ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), spiffe))
	if got := demandOf(t, h, claiming("one", 5), "e"); got != 5 {
		t.Fatalf("one stream claiming 5: counts %d, want 5", got)
	}
	for _, id := range []string{"two", "three"} {
		c := h.sotw(claiming(id, 5))
		c.subscribe(EDS, "e")
		c.recv() // counted, as the first was
	}
	if got := demandSum(h, "e"); got != 5 {
		t.Fatalf("three streams of one certificate claiming 5 each: count %d, want 5", got)
	}
	h.conn = ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), spiffe))
	if got := demandOf(t, h, claiming("other-instance", 5), "e2"); got != 5 {
		t.Fatalf("the other certificate's own stream: counts %d, want 5", got)
	}
	c := h.sotw(claiming("other-instance-e", 5))
	c.subscribe(EDS, "e")
	c.recv()
	if got := demandSum(h, "e"); got != 10 {
		t.Fatalf("a second instance's stream: count %d, want 10", got)
	}
}

// The demand weight a node declares: a number or a string of digits,
// 1 to 1,000,000; anything else counts 1 and is not valid.
func TestDemandWeight(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *structpb.Value
		want uint64
		ok   bool
	}{
		{"absent", nil, 1, true},
		{"number", structpb.NewNumberValue(40), 40, true},
		{"string", structpb.NewStringValue("1000000"), 1_000_000, true},
		{"zero", structpb.NewNumberValue(0), 1, false},
		{"fraction", structpb.NewNumberValue(2.5), 1, false},
		{"too large", structpb.NewNumberValue(1_000_001), 1, false},
		{"negative string", structpb.NewStringValue("-3"), 1, false},
		{"long string", structpb.NewStringValue("00000000000000000001"), 1, false},
		{"bool", structpb.NewBoolValue(true), 1, false},
	} {
		n := &core.Node{Id: "n"}
		if tc.v != nil {
			n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{server.DemandWeightKey: tc.v}}
		}
		if got, ok := server.DemandWeight(n); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
