package server_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
)

// TestVisibilityGRPCXDS: grpc-go's own xDS client, whose control-plane
// connection proves namespace a (the server's Audience hook says so for
// every call), reaches a/pay through xds:///pay.a and finds b/ledger
// absent (its listener is never sent): the channel does not become ready
// until b/ledger is exported to a too.
func TestVisibilityGRPCXDS(t *testing.T) {
	t.Parallel()
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(lis) }()
	t.Cleanup(backend.Stop)
	port := uint32(lis.Addr().(*net.TCPAddr).Port)

	h := newHarnessWith(t, server.Config{Audience: func(context.Context) (server.Audience, error) {
		return server.Audience{Namespace: "a"}, nil
	}}, nil)
	d := topology.NewDirectory()
	var b topology.Batch
	for i, k := range []topology.Key{payKey, ledgerKey} {
		u := topologytest.Upstream(i)
		u.Key, u.ExportTo, u.AllowLoopback = k, topology.NewExport([]string{"."}, k.Namespace), true
		b.PutUpstream(u)
		s := topologytest.Set(i, 0, nil)
		s.Key, s.Upstream = topology.Key{Namespace: k.Namespace, Name: k.Name + "-0"}, k.Name
		s.Endpoints = s.Endpoints[:1]
		s.Endpoints[0].Address, s.Endpoints[0].Port = "127.0.0.1", port
		b.PutEndpointSet(s)
	}
	snap, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	pub := publish.New(h.cache, "grpc", nil)
	if _, err := pub.Publish(snap); err != nil {
		t.Fatal(err)
	}

	bootstrap := fmt.Sprintf(`{"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "grpc-xds-a", "locality": {"region": "eu-west"}}}`, h.addr)
	resolver, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(target string) *grpc.ClientConn {
		conn, err := grpc.NewClient(target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	check := func(conn *grpc.ClientConn, wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	if err := check(dial("xds:///"+listenerOf(payKey)), 20*time.Second); err != nil {
		t.Fatalf("a/pay through xDS as a client of a: %v", err)
	}
	ledger := dial("xds:///" + listenerOf(ledgerKey))
	if err := check(ledger, 2*time.Second); err == nil {
		t.Fatal("b/ledger reached through xDS by a client of a")
	}
	// exported to a too now: the waiting channel is sent it and connects
	u := snap.Upstream(ledgerKey).Upstream
	u.ExportTo = topology.NewExport([]string{".", "a"}, u.Key.Namespace)
	var more topology.Batch
	more.PutUpstream(u)
	if snap, err = d.Apply(more); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(snap); err != nil {
		t.Fatal(err)
	}
	if err := check(ledger, 20*time.Second); err != nil {
		t.Fatalf("b/ledger, once exported to a, through xDS as a client of a: %v", err)
	}
	if got := h.client("grpc-xds-a").Audience; got != "a" {
		t.Errorf("/debug/clients audience: %q, want a", got)
	}
}
