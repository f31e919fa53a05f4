package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/golden"
)

// startPlane runs the control plane on the examples in-process and returns
// its addresses. test/kube's startPlane is another function for another job:
// it runs the Kubernetes source as one of several replicas, captures its logs
// and can stop it mid-test; here the commands only need a files-mode plane
// that lives as long as the test.
func startPlane(t *testing.T) controlplane.Addrs {
	t.Helper()
	return startPlaneOn(t, examples)
}

// startPlaneOn runs the control plane on the manifests of paths.
func startPlaneOn(t *testing.T, paths ...string) controlplane.Addrs {
	t.Helper()
	return startPlaneWith(t, controlplane.Config{Paths: paths})
}

// startPlaneWith runs the control plane of cfg, on loopback ports of its own.
func startPlaneWith(t *testing.T, cfg controlplane.Config) controlplane.Addrs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	cfg.XDSAddress, cfg.AdminAddress = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Started = func(a controlplane.Addrs) { started <- a }
	go func() {
		done <- controlplane.Run(ctx, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case a := <-started:
		return a
	case err := <-done:
		t.Fatalf("control plane: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not start")
	}
	return controlplane.Addrs{}
}

// adsStream opens a raw ADS stream to xds, closed with the test.
func adsStream(t *testing.T, xds string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, ctx := adstest.Conn(t, xds)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestProxyConfig: proxy-config shows what a connected client is served,
// decoded: the checkout cluster's ClusterLoadAssignment, whose priority-0
// locality weights are the traffic explain computes for it.
func TestProxyConfig(t *testing.T) {
	t.Parallel()
	a := startPlane(t)
	st := adsStream(t, a.XDS)
	node := &core.Node{Id: "envoy-config-1", Cluster: "test", UserAgentName: "envoy"}
	for _, req := range []*discovery.DiscoveryRequest{
		{Node: node, TypeUrl: resource.ClusterType},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/checkout"}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: req.TypeUrl, ResourceNames: req.ResourceNames,
			VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
			t.Fatal(err)
		}
	}

	code, stdout, stderr := runCLI("proxy-config", "envoy-config-1", "--admin-address", a.Admin, "--resource", "shop/checkout", "-o", "json")
	if code != exitOK {
		t.Fatalf("proxy-config: exit %d: %s", code, stderr)
	}
	var replicas []replicaConfig
	if err := json.Unmarshal([]byte(stdout), &replicas); err != nil {
		t.Fatal(err)
	}
	if len(replicas) != 1 || len(replicas[0].Streams) != 1 || len(replicas[0].Streams[0].Types["EDS"].Resources) != 1 {
		t.Fatalf("proxy-config -o json: %s", stdout)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := decodeResource(replicas[0].Streams[0].Types["EDS"].Resources[0], &cla); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		if l.GetPriority() == 0 {
			got[l.GetLocality().GetRegion()+"/"+l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
		}
	}
	snap, _, ok := load(paths{examples}, io.Discard)
	if !ok {
		t.Fatal("examples do not load")
	}
	want := map[string]uint32{}
	for _, pr := range explain.Build(snap, topology.Key{Namespace: "shop", Name: "checkout"}).Upstreams[0].Priorities {
		for _, l := range pr.Localities {
			if l.Traffic > 0 {
				want[l.Region+"/"+l.Zone] = uint32(l.Traffic)
			}
		}
	}
	if len(want) == 0 || !maps.Equal(got, want) {
		t.Errorf("the served CLA's priority-0 weights are %v, explain's traffic %v", got, want)
	}

	code, text, stderr := runCLI("proxy-config", "envoy-config-1", "--admin-address", a.Admin)
	if code != exitOK || !strings.Contains(text, "ENDPOINTS") || !strings.Contains(text, "shop/checkout") || !strings.Contains(text, "CLUSTERS") {
		t.Errorf("proxy-config (text): exit %d\n%s%s", code, text, stderr)
	}
	if code, _, stderr := runCLI("proxy-config", "nobody", "--admin-address", a.Admin); code != exitInvalid || !strings.Contains(stderr, "nobody") {
		t.Errorf("an unknown node: exit %d: %s", code, stderr)
	}
}

// TestStatusClusters: the remote clusters each replica reads are listed
// below its clients, one line per (cluster, replica).
func TestStatusClusters(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 30, 10, 42, 7, 0, time.UTC)
	var b strings.Builder
	err := writeStatusText(&b, statusReport{Clusters: []replicaCluster{
		{Replica: "127.0.0.1:19010", Cluster: source.ClusterStatus{Name: "eu-2", Secret: "poise/remote-eu-2", State: source.ClusterStale, Since: since, LastSync: since, Error: "dial tcp: connection refused"}},
		{Replica: "127.0.0.1:19000", Cluster: source.ClusterStatus{Name: "eu-2", Secret: "poise/remote-eu-2", State: source.ClusterStale, Since: since, LastSync: since, Error: "dial tcp: connection refused"}},
		{Replica: "127.0.0.1:19000", Cluster: source.ClusterStatus{Name: "eu-1", Secret: "poise/remote-eu-1", State: source.ClusterSynced, LastSync: since}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status:\n%s", b.String())
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[2], "CLUSTER") {
		t.Fatalf("want the clients' header, a blank line, the clusters' header and three rows:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"eu-1", "127.0.0.1:19000", "Synced", "2026-11-30T10:42:07Z"},
		{"eu-2", "127.0.0.1:19000", "Stale", "2026-11-30T10:42:07Z", "connection refused"},
		{"eu-2", "127.0.0.1:19010", "Stale"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[3+i], w) {
				t.Errorf("row %d lacks %q: %s", i, w, lines[3+i])
			}
		}
	}
}

// TestStatusPlacedZone: the CLASS column shows the class a client is in
// and, when its identity placed it elsewhere than its node claims, the
// claimed zone beside it; a client placed where it claims, or classed by
// its claim, shows its class alone. Each type's column says where the
// client stands on it, or for a replica that does not say, what it ACKed
// and was sent.
func TestStatusPlacedZone(t *testing.T) {
	t.Parallel()
	acked := func(v string) map[string]*server.TypeState {
		return map[string]*server.TypeState{"CDS": {LastAckedVersion: v, LastSentVersion: v, State: server.Synced, CurrentVersion: v},
			"EDS": {LastAckedVersion: v, LastSentVersion: v, State: server.Synced, CurrentVersion: v}}
	}
	token := func(sa string) *server.ClientIdentity {
		return &server.ClientIdentity{Principal: "shop/" + sa, Method: "token"}
	}
	rows := []replicaClient{
		{Replica: "127.0.0.1:19000", Client: server.Client{Stream: 1, NodeID: "checkout-0.envoy", Kind: "envoy", Audience: "shop", Identity: token("checkout"),
			Zone: "eu-west/eu-west-c", ZoneFrom: server.ZoneFromIdentity, ClaimedZone: "eu-west/eu-west-a", Class: "eu-west/eu-west-c", Types: acked("a1b2c3-7")}},
		{Replica: "127.0.0.1:19000", Client: server.Client{Stream: 2, NodeID: "checkout-1.envoy", Kind: "envoy", Audience: "shop", Identity: token("checkout"),
			Zone: "eu-west/eu-west-a", ZoneFrom: server.ZoneFromIdentity, Class: "eu-west/eu-west-a", Types: acked("a1b2c3-7")}},
		{Replica: "127.0.0.1:19000", Client: server.Client{Stream: 3, NodeID: "ledger-0.grpc", Kind: "grpc", Audience: "anonymous",
			Zone: "eu-west/eu-west-b", ZoneFrom: server.ZoneFromNode, Class: "eu-west/eu-west-b", Types: acked("a1b2c3-7")}},
		{Replica: "127.0.0.1:19000", Client: server.Client{Stream: 4, NodeID: "pay-0.envoy", Kind: "envoy", Audience: "shop", Identity: token("pay"),
			ZoneFrom: server.ZoneFromIdentity, ClaimedZone: "eu-west/eu-west-a", Types: map[string]*server.TypeState{
				"CDS": {LastAckedVersion: "a1b2c3-6", LastSentVersion: "a1b2c3-7", State: server.Stale, CurrentVersion: "a1b2c3-7"},
				"EDS": {LastAckedVersion: "a1b2c3-6", LastSentVersion: "a1b2c3-7", State: server.NACKed, CurrentVersion: "a1b2c3-7",
					LastNACK: &server.NACK{Version: "a1b2c3-7", Error: "port 0 refused", At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}},
				"LDS": {State: server.NotSent}}}},
		// a replica too old to say where its clients stand: what they ACKed
		{Replica: "127.0.0.1:19010", Client: server.Client{Stream: 1, NodeID: "pay-1.envoy", Kind: "envoy", Audience: "anonymous",
			Types: map[string]*server.TypeState{"CDS": {LastAckedVersion: "d4e5-3", LastSentVersion: "d4e5-4"}}}},
	}
	var b strings.Builder
	if err := writeStatusText(&b, statusReport{Clients: rows}); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "status-placed", b.String())
}
