package server_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"poise.dev/poise/pkg/xds/server"
)

// publishV1 publishes clusters c1, c2 (both views) and their CLAs (view 0
// on ports 8001, 8002; view 1 on 18001, 18002) at version v1.
func publishV1(t *testing.T, h *harness) {
	h.apply("v1",
		both(CDS, entry(t, "v1", cluster("c1", 1)), entry(t, "v1", cluster("c2", 1))),
		put(0, EDS, entry(t, "v1", cla("c1", 8001)), entry(t, "v1", cla("c2", 8002))),
		put(1, EDS, entry(t, "v1", cla("c1", 18001)), entry(t, "v1", cla("c2", 18002))))
}

// startEnvoy opens a SotW stream as Envoy does: wildcard CDS, then EDS for
// the clusters, then the ACKs.
func startEnvoy(t *testing.T, h *harness, id string) *sotwClient {
	env := h.sotw(envoyNode(id))
	env.subscribe(CDS)
	cds := env.expect(CDS, "v1", "c1", "c2")
	env.subscribe(EDS, "c1", "c2")
	eds := env.expect(EDS, "v1", "c1", "c2")
	env.ack(cds)
	env.ack(eds)
	env.none(quiet)
	return env
}

func TestSotWSendsOnlyWhatChangedInADSOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	publishV1(t, h)
	env := startEnvoy(t, h, "envoy-1")

	// One CLA changes: EDS carries that CLA alone; CDS stays quiet.
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	eds := env.expect(EDS, "v2", "c1")
	if p := portOf(t, eds.GetResources()[0]); p != 9001 {
		t.Fatalf("port %d, want 9001", p)
	}
	env.ack(eds)
	env.none(quiet)

	// A cluster changes: CDS is sent whole (it is state of the world); EDS stays quiet.
	h.apply("v3", both(CDS, entry(t, "v3", cluster("c2", 2))))
	cds := env.expect(CDS, "v3", "c1", "c2")
	env.ack(cds)
	env.none(quiet)

	// A cluster and its CLA change together: CDS before EDS on the one stream.
	for i, v := range []string{"v4", "v5", "v6"} {
		h.apply(v, both(CDS, entry(t, v, cluster("c1", int64(3+i)))), put(0, EDS, entry(t, v, cla("c1", uint32(9002+i)))))
		cds = env.expect(CDS, v, "c1", "c2")
		eds = env.expect(EDS, v, "c1")
		env.ack(cds)
		env.ack(eds)
		env.none(quiet)
	}

	// A new cluster with its CLA: CDS carries it; Envoy then asks EDS for it
	// and is sent only the CLA it lacks.
	h.apply("v7", both(CDS, entry(t, "v7", cluster("c3", 1))), put(0, EDS, entry(t, "v7", cla("c3", 8003))))
	cds = env.expect(CDS, "v7", "c1", "c2", "c3")
	if err := env.request(EDS, []string{"c1", "c2", "c3"}, "v6", eds.GetNonce(), ""); err != nil {
		t.Fatal(err)
	}
	eds = env.expect(EDS, "v7", "c3")
	env.ack(cds)
	env.ack(eds)
	env.none(quiet)

	c := h.client("envoy-1")
	if got := c.Types["CDS"]; got.Pushes != 6 || got.LastSentVersion != "v7" || got.LastSentCount != 3 {
		t.Errorf("CDS state %+v, want 6 pushes, last v7 with 3 resources", got)
	}
	if got := c.Types["EDS"]; got.Pushes != 6 || got.LastSentVersion != "v7" || got.LastSentCount != 1 {
		t.Errorf("EDS state %+v, want 6 pushes, last v7 with 1 resource", got)
	}
	eventually(t, "ACKs recorded", func() bool {
		c := h.client("envoy-1")
		return c.Types["CDS"].LastAckedVersion == "v7" && c.Types["EDS"].LastAckedVersion == "v7"
	})
}

func TestSotWNACKIsRecordedAndNotResent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typeURL string
		bad     func(t *testing.T, h *harness)
		// other changes another resource of the type; then is what the client is sent.
		other func(t *testing.T, h *harness)
		then  []string
		// fix changes the rejected resource again.
		fix func(t *testing.T, h *harness)
	}{{
		typeURL: EDS,
		bad:     func(t *testing.T, h *harness) { h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 0)))) },
		other:   func(t *testing.T, h *harness) { h.apply("v3", put(0, EDS, entry(t, "v3", cla("c2", 9002)))) },
		then:    []string{"c2"}, // the rejected c1 is not re-sent
		fix:     func(t *testing.T, h *harness) { h.apply("v4", put(0, EDS, entry(t, "v4", cla("c1", 9001)))) },
	}, {
		typeURL: CDS,
		bad:     func(t *testing.T, h *harness) { h.apply("v2", both(CDS, entry(t, "v2", cluster("c1", 0)))) },
		other:   func(t *testing.T, h *harness) { h.apply("v3", both(CDS, entry(t, "v3", cluster("c2", 2)))) },
		then:    []string{"c1", "c2"}, // CDS is state of the world: always whole
		fix:     func(t *testing.T, h *harness) { h.apply("v4", both(CDS, entry(t, "v4", cluster("c1", 5)))) },
	}} {
		t.Run(short(tc.typeURL), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			publishV1(t, h)
			env := startEnvoy(t, h, "envoy-1")
			s := short(tc.typeURL)

			tc.bad(t, h)
			bad := env.recv()
			if bad.GetTypeUrl() != tc.typeURL || bad.GetVersionInfo() != "v2" {
				t.Fatalf("got %s %s, want %s v2", short(bad.GetTypeUrl()), bad.GetVersionInfo(), s)
			}
			env.nack(bad, "v1", "c1: invalid value for field connect_timeout")
			// A naive cache answers the NACK with the same version at once, in a loop.
			env.none(600 * time.Millisecond)

			c := h.client("envoy-1")
			ts := c.Types[s]
			if ts.NACKs != 1 || ts.LastNACK == nil {
				t.Fatalf("%s state %+v, want one NACK", s, ts)
			}
			if n := *ts.LastNACK; n.Version != "v2" || n.Nonce != bad.GetNonce() || n.Error != "c1: invalid value for field connect_timeout" {
				t.Errorf("NACK %+v, want version v2, nonce %s and the client's error", n, bad.GetNonce())
			}
			if ts.LastAckedVersion != "v1" || ts.LastSentVersion != "v2" || ts.Pushes != 2 {
				t.Errorf("%s state %+v, want acked v1, sent v2, 2 pushes", s, ts)
			}
			if got := h.nacks(s); got != 1 {
				t.Errorf("NACK metric %s = %v, want 1", s, got)
			}
			for _, other := range []string{"CDS", "EDS", "LDS", "RDS"} {
				if other != s && h.nacks(other) != 0 {
					t.Errorf("NACK metric %s = %v, want 0", other, h.nacks(other))
				}
			}
			if got := h.clients.NACKCount(tc.typeURL); got != 1 {
				t.Errorf("NACKCount = %d, want 1", got)
			}

			tc.other(t, h)
			r := env.expect(tc.typeURL, "v3", tc.then...)
			env.ack(r)
			env.none(quiet)

			tc.fix(t, h)
			r = env.recv()
			if r.GetTypeUrl() != tc.typeURL || r.GetVersionInfo() != "v4" || !slices.Contains(names(t, r.GetResources()), "c1") {
				t.Fatalf("got %s %s %v, want the fixed c1 at v4", short(r.GetTypeUrl()), r.GetVersionInfo(), names(t, r.GetResources()))
			}
			env.ack(r)
			env.none(quiet)
			eventually(t, "the ACK of v4", func() bool { return h.client("envoy-1").Types[s].LastAckedVersion == "v4" })
			if got := h.nacks(s); got != 1 {
				t.Errorf("NACK metric %s = %v after recovery, want 1", s, got)
			}
		})
	}
}

func TestDeltaADS(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	publishV1(t, h)
	d := h.delta(envoyNode("envoy-d"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS}) // wildcard
	cds := d.expect(CDS, at("v1", "c1", "c2"), nil)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1", "c2"}})
	eds := d.expect(EDS, at("v1", "c1", "c2"), nil)
	if cds.GetSystemVersionInfo() != "v1" || eds.GetSystemVersionInfo() != "v1" {
		t.Errorf("system versions %q %q, want v1", cds.GetSystemVersionInfo(), eds.GetSystemVersionInfo())
	}
	d.ack(cds)
	d.ack(eds)
	d.none(quiet)

	// A change sends only the changed resource.
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	eds = d.expect(EDS, at("v2", "c1"), nil)
	d.ack(eds)
	d.none(quiet)

	// A deletion is sent as removed_resources, CDS before EDS.
	h.apply("v3", del(0, CDS, "c2"), del(1, CDS, "c2"), del(0, EDS, "c2"), del(1, EDS, "c2"))
	cds = d.expect(CDS, nil, []string{"c2"})
	eds = d.expect(EDS, nil, []string{"c2"})
	d.ack(cds)
	d.ack(eds)
	d.none(quiet)

	// A NACK is recorded and not answered with the same version.
	h.apply("v4", put(0, EDS, entry(t, "v4", cla("c1", 0))))
	bad := d.expect(EDS, at("v4", "c1"), nil)
	d.nack(bad, "c1: port 0")
	d.none(600 * time.Millisecond)
	ts := h.client("envoy-d").Types["EDS"]
	if ts.NACKs != 1 || ts.LastNACK == nil || ts.LastNACK.Version != "v4" || ts.LastNACK.Error != "c1: port 0" {
		t.Fatalf("EDS state %+v (NACK %+v), want one NACK of v4 with the client's error", ts, ts.LastNACK)
	}
	if ts.LastAckedVersion != "v3" {
		t.Errorf("last acked %q, want v3", ts.LastAckedVersion)
	}
	if got := h.nacks("EDS"); got != 1 {
		t.Errorf("NACK metric = %v, want 1", got)
	}
	h.apply("v5", put(0, EDS, entry(t, "v5", cla("c1", 9005))))
	eds = d.expect(EDS, at("v5", "c1"), nil)
	d.ack(eds)
	d.none(quiet)
	d.close()

	// Reconnect holding the current versions: nothing is re-sent, each
	// type answered empty (the client learns it is served)...
	d2 := h.delta(envoyNode("envoy-d"))
	d2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, InitialResourceVersions: map[string]string{"c1": "v1"}})
	d2.ack(d2.expect(CDS, nil, nil))
	d2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1"}, InitialResourceVersions: map[string]string{"c1": "v5"}})
	d2.ack(d2.expect(EDS, nil, nil))
	d2.none(600 * time.Millisecond)
	// ...but the next change is.
	h.apply("v6", put(0, EDS, entry(t, "v6", cla("c1", 9006))))
	d2.ack(d2.expect(EDS, at("v6", "c1"), nil))
	d2.none(quiet)

	// Reconnect with stale versions: only what changed is sent.
	d3 := h.delta(envoyNode("envoy-d3"))
	d3.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, InitialResourceVersions: map[string]string{"c1": "v1", "c2": "v1"}})
	d3.ack(d3.expect(CDS, nil, []string{"c2"}))
	d3.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1"}, InitialResourceVersions: map[string]string{"c1": "v5"}})
	d3.ack(d3.expect(EDS, at("v6", "c1"), nil))
	d3.none(quiet)
}

func TestViewsByClientFeatures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c1 := entry(t, "v1", cluster("c1", 1))
	rt := entry(t, "v1", routeConfig("svc", "c1"))
	h.apply("v1",
		both(CDS, c1),
		put(0, EDS, entry(t, "v1", cla("c1", 1000))),
		put(1, EDS, entry(t, "v1", cla("c1", 2000))),
		put(1, LDS, entry(t, "v1", listener("svc"))),
		both(RDS, rt))

	// gRPC: listener, route, cluster, endpoints, by name, from view 1.
	g := h.sotw(grpcNode("grpc-1"))
	g.subscribe(LDS, "svc")
	g.ack(g.expect(LDS, "v1", "svc"))
	g.subscribe(RDS, "svc")
	g.ack(g.expect(RDS, "v1", "svc"))
	g.subscribe(CDS, "c1")
	g.ack(g.expect(CDS, "v1", "c1"))
	g.subscribe(EDS, "c1")
	r := g.expect(EDS, "v1", "c1")
	if p := portOf(t, r.GetResources()[0]); p != 2000 {
		t.Errorf("gRPC node got the CLA of port %d, want view 1's 2000", p)
	}
	g.ack(r)
	g.none(quiet)

	// Envoy: view 0's CLA, and never the listener published only to view 1.
	env := h.sotw(envoyNode("envoy-1"))
	env.subscribe(CDS)
	env.ack(env.expect(CDS, "v1", "c1"))
	env.subscribe(EDS, "c1")
	r = env.expect(EDS, "v1", "c1")
	if p := portOf(t, r.GetResources()[0]); p != 1000 {
		t.Errorf("Envoy node got the CLA of port %d, want view 0's 1000", p)
	}
	env.ack(r)
	env.subscribe(LDS)
	// Envoy waits for a first LDS answer; it must hold no listener.
	lds := env.expect(LDS, "v1")
	env.ack(lds)
	env.none(quiet)

	// A new listener for view 1 reaches no Envoy, and an unsubscribed gRPC client neither.
	h.apply("v2", put(1, LDS, entry(t, "v2", listener("svc2"))))
	env.none(quiet)
	g.none(quiet)
	if got := h.client("envoy-1").Types["LDS"]; got.Pushes != 1 || got.LastSentCount != 0 {
		t.Errorf("Envoy LDS state %+v, want one empty push", got)
	}
}

func TestMarshalledOnceAndSharedByClients(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c1, c2 := entry(t, "v1", cluster("c1", 1)), entry(t, "v1", cluster("c2", 1))
	e1, e2 := entry(t, "v1", cla("c1", 8001)), entry(t, "v1", cla("c2", 8002))
	h.apply("v1", both(CDS, c1, c2), put(0, EDS, e1, e2))

	a := h.sotw(envoyNode("a"))
	a.subscribe(CDS)
	ra := a.expect(CDS, "v1", "c1", "c2")
	g := h.sotw(grpcNode("g")) // view 1: the same Entry was published to both views
	g.subscribe(CDS, "c1", "c2")
	rg := g.expect(CDS, "v1", "c1", "c2")
	d := h.delta(envoyNode("d"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	rd := d.expect(CDS, at("v1", "c1", "c2"), nil)
	for i, e := range []struct{ value []byte }{{c1.Any.GetValue()}, {c2.Any.GetValue()}} {
		for _, got := range [][]byte{ra.GetResources()[i].GetValue(), rg.GetResources()[i].GetValue(), rd.GetResources()[i].GetResource().GetValue()} {
			if !bytes.Equal(got, e.value) {
				t.Fatalf("resource %d: clients got different bytes than the marshalled entry", i)
			}
		}
	}

	// The cache hands out the same Entry (and *anypb.Any) to every view and client.
	v0, v1 := h.cache.Resources(0)[CDS], h.cache.Resources(1)[CDS]
	if len(v0) != 2 || v0[0] != c1 || v1[0] != c1 || v0[1] != c2 || v1[1] != c2 || v0[0].Any != c1.Any {
		t.Fatalf("views hold %v and %v, want the published entries themselves", v0, v1)
	}

	// Another resource changes: the unchanged one keeps its Entry and version.
	d.ack(rd)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1", "c2"}})
	d.ack(d.expect(EDS, at("v1", "c1", "c2"), nil))
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c2", 9002))))
	d.ack(d.expect(EDS, at("v2", "c2"), nil))
	d.none(quiet)
	eds := h.cache.Resources(0)[EDS]
	if eds[0] != e1 || eds[0].Version != "v1" || eds[1].Version != "v2" {
		t.Fatalf("EDS entries %+v, %+v: want c1 unchanged at v1, c2 at v2", eds[0], eds[1])
	}
}

func TestResponseVersionIsTheLastApplyThatChangedTheType(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("v1", both(CDS, entry(t, "v1", cluster("c1", 1))), put(0, EDS, entry(t, "v1", cla("c1", 8001))))
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 8002))))
	h.apply("v3", both(CDS, entry(t, "v3", cluster("c1", 3))))
	h.apply("v4", put(0, EDS, entry(t, "v4", cla("c9", 8009)))) // EDS changes, not c1

	env := h.sotw(envoyNode("envoy-1"))
	env.subscribe(CDS)
	env.ack(env.expect(CDS, "v3", "c1"))
	env.subscribe(EDS, "c1")
	r := env.expect(EDS, "v4", "c1")
	if p := portOf(t, r.GetResources()[0]); p != 8002 {
		t.Errorf("port %d, want 8002", p)
	}
	env.ack(r)
	env.none(quiet)

	d := h.delta(envoyNode("envoy-d"))
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	if r := d.expect(CDS, at("v3", "c1"), nil); r.GetSystemVersionInfo() != "v3" {
		t.Errorf("delta CDS system version %q, want v3", r.GetSystemVersionInfo())
	}
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{"c1"}})
	if r := d.expect(EDS, at("v2", "c1"), nil); r.GetSystemVersionInfo() != "v4" {
		t.Errorf("delta EDS system version %q, want v4", r.GetSystemVersionInfo())
	}

	// An Apply that changes nothing a client holds still moves the type's version.
	h.apply("v5", put(0, EDS, entry(t, "v5", cla("c9", 9009))))
	h.apply("v6", put(0, EDS, entry(t, "v6", cla("c1", 9001))))
	env.ack(env.expect(EDS, "v6", "c1"))
	env.none(quiet)
}

func TestClientKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		node *core.Node
		want string
	}{
		{envoyNode("e"), server.KindEnvoy},
		{&core.Node{UserAgentName: "Envoy"}, server.KindEnvoy},
		{grpcNode("g"), server.KindGRPC},
		{&core.Node{UserAgentName: "gRPC Java"}, server.KindGRPC},
		{&core.Node{UserAgentName: "custom", ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning"}}, server.KindGRPC},
		{&core.Node{UserAgentName: "curl"}, server.KindUnknown},
		{nil, server.KindUnknown},
	} {
		if got := server.ClientKind(tc.node); got != tc.want {
			t.Errorf("ClientKind(%v) = %s, want %s", tc.node, got, tc.want)
		}
	}
}

func TestClientsRegistryAndGauge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	publishV1(t, h)
	gauges := func(envoy, grpc, unknown float64) func() bool {
		return func() bool {
			return h.connected(server.KindEnvoy) == envoy && h.connected(server.KindGRPC) == grpc && h.connected(server.KindUnknown) == unknown
		}
	}

	env := h.sotw(envoyNode("envoy-1"))
	eventually(t, "an unknown stream", gauges(0, 0, 1)) // no node seen yet
	env.subscribe(CDS)
	cds := env.expect(CDS, "v1", "c1", "c2")
	eventually(t, "one envoy", gauges(1, 0, 0))

	g := h.sotw(grpcNode("grpc-1"))
	g.subscribe(CDS, "c1")
	g.ack(g.expect(CDS, "v1", "c1"))
	located := envoyNode("envoy-2")
	located.Locality = &core.Locality{Region: "r1", Zone: "a"}
	d := h.delta(located)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	d.ack(d.expect(CDS, at("v1", "c1", "c2"), nil))
	u := h.sotw(&core.Node{Id: "probe", UserAgentName: "curl"})
	u.subscribe(CDS)
	u.expect(CDS, "v1", "c1", "c2")
	eventually(t, "2 envoys, 1 gRPC, 1 unknown", gauges(2, 1, 1))

	want := map[string]server.Client{
		"envoy-1": {Protocol: "sotw", Kind: server.KindEnvoy, Rendering: "weighted", UserAgent: "envoy", Cluster: "test"},
		"grpc-1":  {Protocol: "sotw", Kind: server.KindGRPC, Rendering: "per-endpoint", UserAgent: "gRPC Go", Cluster: "test"},
		"envoy-2": {Protocol: "delta", Kind: server.KindEnvoy, Rendering: "weighted", UserAgent: "envoy", Cluster: "test", Zone: "r1/a"},
		"probe":   {Protocol: "sotw", Kind: server.KindUnknown, Rendering: "weighted", UserAgent: "curl"},
	}
	list := h.clients.List()
	if len(list) != 4 {
		t.Fatalf("%d clients, want 4", len(list))
	}
	for _, c := range list {
		w := want[c.NodeID]
		if c.Protocol != w.Protocol || c.Kind != w.Kind || c.Rendering != w.Rendering || c.UserAgent != w.UserAgent || c.Cluster != w.Cluster || c.Zone != w.Zone {
			t.Errorf("client %s = %+v, want %+v", c.NodeID, c, w)
		}
		if c.Connected.IsZero() || c.Stream == 0 {
			t.Errorf("client %s: no stream id or connection time", c.NodeID)
		}
	}
	if f := h.client("grpc-1").Features; !slices.Contains(f, "envoy.lb.does_not_support_overprovisioning") {
		t.Errorf("gRPC features %v", f)
	}

	// Sent and acked versions per type.
	if ts := h.client("envoy-1").Types["CDS"]; ts.LastSentVersion != "v1" || ts.LastAckedVersion != "" || ts.LastSentNonce != cds.GetNonce() || ts.LastSentCount != 2 {
		t.Errorf("before the ACK: %+v", ts)
	}
	env.ack(cds)
	eventually(t, "the CDS ACK", func() bool { return h.client("envoy-1").Types["CDS"].LastAckedVersion == "v1" })
	env.subscribe(EDS, "c1")
	eds := env.expect(EDS, "v1", "c1")
	h.apply("v2", both(CDS, entry(t, "v2", cluster("c1", 2))))
	cds = env.expect(CDS, "v2", "c1", "c2")
	eventually(t, "v2 sent", func() bool {
		c := h.client("envoy-1")
		return c.Types["CDS"].LastSentVersion == "v2" && c.Types["CDS"].LastAckedVersion == "v1" && c.Types["EDS"].LastSentVersion == "v1"
	})
	env.ack(cds)
	env.ack(eds)
	eventually(t, "v2 acked", func() bool {
		c := h.client("envoy-1")
		return c.Types["CDS"].LastAckedVersion == "v2" && c.Types["EDS"].LastAckedVersion == "v1" && c.Types["CDS"].Pushes == 2
	})
	// The delta client acks per nonce; its acked version is the one sent with that nonce.
	d.ack(d.expect(CDS, at("v2", "c1"), nil))
	eventually(t, "delta v2 acked", func() bool { return h.client("envoy-2").Types["CDS"].LastAckedVersion == "v2" })

	// The gauge follows streams closing.
	env.close()
	eventually(t, "envoy-1 gone", gauges(1, 1, 1))
	d.close()
	u.close()
	eventually(t, "only gRPC left", gauges(0, 1, 0))
	g.close()
	eventually(t, "no clients", func() bool { return gauges(0, 0, 0)() && len(h.clients.List()) == 0 })
}
