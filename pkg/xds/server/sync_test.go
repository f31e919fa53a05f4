package server_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"poise.dev/poise/pkg/xds/server"
)

// typeState is the registry's state of one type of node's stream, as
// /debug/clients lists it.
func (h *harness) typeState(node, short string) server.TypeState {
	h.t.Helper()
	ts := h.client(node).Types[short]
	if ts == nil {
		h.t.Fatalf("%s has no %s state", node, short)
	}
	return *ts
}

// served is what node's one stream is served of one type.
func (h *harness) served(node, short string) server.ServingType {
	h.t.Helper()
	s := h.clients.Serving(node, 100, nil)
	if len(s) != 1 {
		h.t.Fatalf("%s: %d streams served", node, len(s))
	}
	return s[0].Types[short]
}

// TestClientStates: each type a client asked for is SYNCED once it ACKed
// what it is sent, STALE while a response waits for its answer, NACKED
// once it rejected the last one (until a later one is ACKed), and NOT SENT
// while nothing of the type is published; against the version its view is
// at now, which may move past what it ACKed without making it stale when
// nothing in its scope changed. What it is served marks the resources it
// has not ACKed and those it rejected, with its reason.
func TestClientStates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	early := h.sotw(envoyNode("envoy-0"))
	early.subscribe(CDS) // nothing is published yet
	eventually(t, "CDS asked for", func() bool {
		for _, c := range h.clients.List() {
			if c.NodeID == "envoy-0" && c.Types["CDS"] != nil {
				return true
			}
		}
		return false
	})
	if ts := h.typeState("envoy-0", "CDS"); ts.State != server.NotSent || ts.CurrentVersion != "" {
		t.Errorf("CDS before anything is published: %s current %q; want NOT SENT, none", ts.State, ts.CurrentVersion)
	}
	publishV1(t, h)
	env := startEnvoy(t, h, "envoy-1")
	for _, short := range []string{"CDS", "EDS"} {
		if got := h.typeState("envoy-1", short); got.State != server.Synced || got.CurrentVersion != "v1" || got.LastAckedVersion != "v1" {
			t.Errorf("%s: %s current %q acked %q; want SYNCED current v1 acked v1", short, got.State, got.CurrentVersion, got.LastAckedVersion)
		}
	}

	// a new c1, sent and not yet answered
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	bad := env.expect(EDS, "v2", "c1")
	eventually(t, "EDS stale", func() bool { return h.typeState("envoy-1", "EDS").State == server.Stale })
	served := h.served("envoy-1", "EDS")
	if served.State != server.Stale || served.AckedVersion != "v1" || served.Version != "v2" || !served.NotAcked["c1"] || served.NotAcked["c2"] || len(served.Rejected) != 0 {
		t.Errorf("EDS served while v2 waits: %s acked %s version %s, not acked %v, rejected %v; want STALE, v1, v2, c1 only, none",
			served.State, served.AckedVersion, served.Version, served.NotAcked, served.Rejected)
	}

	// rejected: NACKED, c1 with the client's reason
	env.nack(bad, "v1", "port 9001 refused")
	eventually(t, "EDS nacked", func() bool { return h.typeState("envoy-1", "EDS").State == server.NACKed })
	served = h.served("envoy-1", "EDS")
	if served.State != server.NACKed || served.Rejected["c1"] != "port 9001 refused" || len(served.Rejected) != 1 || len(served.NotAcked) != 0 {
		t.Errorf("EDS served after the NACK: %s, rejected %v, not acked %v; want NACKED, c1 with its reason, none", served.State, served.Rejected, served.NotAcked)
	}
	if ts := h.typeState("envoy-1", "CDS"); ts.State != server.Synced {
		t.Errorf("CDS %s after an EDS NACK; want SYNCED", ts.State)
	}

	// a fix, ACKed: SYNCED again
	h.apply("v3", put(0, EDS, entry(t, "v3", cla("c1", 8001))))
	env.ack(env.expect(EDS, "v3", "c1"))
	eventually(t, "EDS synced", func() bool { return h.typeState("envoy-1", "EDS").State == server.Synced })
	if served = h.served("envoy-1", "EDS"); len(served.Rejected) != 0 || len(served.NotAcked) != 0 || served.AckedVersion != "v3" {
		t.Errorf("EDS served after the fix: rejected %v, not acked %v, acked %s", served.Rejected, served.NotAcked, served.AckedVersion)
	}

	// a cluster the client does not ask for changes: the view's version
	// moves, the client has nothing to take and stays SYNCED
	h.apply("v4", put(0, EDS, entry(t, "v4", cla("c3", 8003))))
	env.none(quiet)
	if ts := h.typeState("envoy-1", "EDS"); ts.State != server.Synced || ts.CurrentVersion != "v4" || ts.LastAckedVersion != "v3" {
		t.Errorf("EDS after a change out of its scope: %s current %s acked %s; want SYNCED v4 v3", ts.State, ts.CurrentVersion, ts.LastAckedVersion)
	}

	// Delta: the same states
	d := h.delta(envoyNode("envoy-delta"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	first := d.expect(CDS, at("v1", "c1", "c2"), nil)
	eventually(t, "delta CDS stale", func() bool { return h.typeState("envoy-delta", "CDS").State == server.Stale })
	d.nack(first, "no")
	eventually(t, "delta CDS nacked", func() bool { return h.typeState("envoy-delta", "CDS").State == server.NACKed })
	h.apply("v5", both(CDS, entry(t, "v5", cluster("c1", 2))))
	d.ack(d.expect(CDS, at("v5", "c1"), nil))
	eventually(t, "delta CDS synced", func() bool { return h.typeState("envoy-delta", "CDS").State == server.Synced })
	if served := h.served("envoy-delta", "CDS"); len(served.Rejected) != 1 || served.Rejected["c2"] != "no" {
		t.Errorf("delta CDS: rejected %v; want c2, whose NACKed content it still lacks", served.Rejected)
	}
}
