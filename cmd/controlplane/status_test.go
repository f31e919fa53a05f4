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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/source/kube"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
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
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- controlplane.Run(ctx, controlplane.Config{Paths: paths, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
			Started: func(a controlplane.Addrs) { started <- a }})
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
	conn, ctx := dial(t, xds)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// dial connects to xds for 30 s at most; both end with the test. test/soak
// keeps a dial of its own that is tied to no test: its hostile actors redial
// from their own goroutines, with requests past gRPC's default size limit.
func dial(t *testing.T, xds string) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(xds, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return conn, ctx
}

// adsClient opens a raw ADS stream as node id and ACKs the CDS response,
// returning the version it ACKed.
func adsClient(t *testing.T, xds, id string) string {
	t.Helper()
	st := adsStream(t, xds)
	node := &core.Node{Id: id, Cluster: "test", Locality: &core.Locality{Region: "eu-west", Zone: "eu-west-1a"},
		UserAgentName: "envoy"}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}
	return resp.VersionInfo
}

func TestStatus(t *testing.T) {
	a := startPlane(t)
	version := adsClient(t, a.XDS, "envoy-status-1")
	// the ACK is recorded once the plane reads it
	var rows []replicaClient
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, stdout, stderr := runCLI("status", "--admin-address", a.Admin, "-o", "json")
		if code != exitOK {
			t.Fatalf("status: exit %d: %s", code, stderr)
		}
		rows = nil
		if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 && rows[0].Client.Types["CDS"] != nil && rows[0].Client.Types["CDS"].LastAckedVersion == version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's ACK of %s does not show: %s", version, stdout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := rows[0]; r.Replica != a.Admin || r.Client.NodeID != "envoy-status-1" || r.Client.Kind == "" {
		t.Errorf("row = %+v", r)
	}
	code, stdout, stderr := runCLI("status", "--admin-address", a.Admin)
	t.Logf("status:\n%s", stdout)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != exitOK || len(lines) != 2 || !strings.HasPrefix(lines[0], "NODE") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"envoy-status-1", a.Admin, rows[0].Client.Kind, version} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row lacks %q: %s", want, lines[1])
		}
	}

	// a replica that does not answer is named, the others still listed
	code, stdout, stderr = runCLI("status", "--admin-address", "127.0.0.1:1,"+a.Admin)
	if code != exitInvalid || !strings.Contains(stderr, "replica 127.0.0.1:1:") || !strings.Contains(stdout, "envoy-status-1") {
		t.Errorf("status with a dead replica: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("status"); code != exitUsage || !strings.Contains(stderr, "--admin-address HOST:PORT is required") {
		t.Errorf("status without --admin-address: exit %d, %s", code, stderr)
	}
}

// TestProxyConfig: proxy-config shows what a connected client is served,
// decoded: the checkout cluster's ClusterLoadAssignment, whose priority-0
// locality weights are the traffic explain computes for it.
func TestProxyConfig(t *testing.T) {
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
	since := time.Date(2026, 11, 30, 10, 42, 7, 0, time.UTC)
	var b strings.Builder
	err := writeStatusText(&b, nil, []replicaCluster{
		{Replica: "127.0.0.1:19010", Cluster: kube.ClusterStatus{Name: "eu-2", Secret: "poise/remote-eu-2", State: kube.ClusterStale, Since: since, LastSync: since, Error: "dial tcp: connection refused"}},
		{Replica: "127.0.0.1:19000", Cluster: kube.ClusterStatus{Name: "eu-2", Secret: "poise/remote-eu-2", State: kube.ClusterStale, Since: since, LastSync: since, Error: "dial tcp: connection refused"}},
		{Replica: "127.0.0.1:19000", Cluster: kube.ClusterStatus{Name: "eu-1", Secret: "poise/remote-eu-1", State: kube.ClusterSynced, LastSync: since}},
	})
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
// its claim, shows its class alone.
func TestStatusPlacedZone(t *testing.T) {
	acked := func(v string) map[string]*server.TypeState {
		return map[string]*server.TypeState{"CDS": {LastAckedVersion: v, LastSentVersion: v}, "EDS": {LastAckedVersion: v, LastSentVersion: v}}
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
			ZoneFrom: server.ZoneFromIdentity, ClaimedZone: "eu-west/eu-west-a", Types: acked("a1b2c3-7")}},
	}
	var b strings.Builder
	if err := writeStatusText(&b, rows, nil); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "status-placed", b.String())
}
