package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// refusals sends n RPCs and returns each one's error, nil for an RPC a
// backend served.
func refusals(conn *grpc.ClientConn, n int) []error {
	client := healthpb.NewHealthClient(conn)
	out := make([]error, n)
	for i := range out {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, out[i] = client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
	}
	return out
}

// dropped reports whether err is grpc-go's drop by the EDS drop_overloads
// (clusterimpl's picker: UNAVAILABLE "RPC is dropped").
func dropped(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "RPC is dropped")
}

// TestPanicRejectedIsADropForGRPCClients: an upstream refused by its
// FailClosed policy (total panic: PanicRejected) is, for grpc-go's xDS
// client, a drop of every RPC (UNAVAILABLE "RPC is dropped", what its load
// reports count as a drop of category panic), not the failure of a cluster
// with no endpoints; no backend serves an RPC. An upstream with no capacity
// at all (NoCapacity) is still that failure, and no RPC is dropped. explain
// says which for each client kind.
func TestPanicRejectedIsADropForGRPCClients(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 8)
	manifests := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	// Both priorities below the 50 % threshold (1 of 7 and 1 of 6
	// eligible) under FailClosed: PanicRejected. Backends 3 and 7 are
	// still eligible.
	topology{panicMode: "FailClosed", unhealthy: unhealthy(0, 1, 2, 4, 5, 6)}.write(t, manifests, backends)
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)
	conn := splitcheck.NewXDSClient(t, xdsAddr, node, listener)

	served := cp.waitServed(t, "PanicRejected", manifests, "e2e/echo")
	if got := served.Upstreams[0].Outcome; got != "PanicRejected" {
		t.Fatalf("outcome %s, want PanicRejected", got)
	}
	expectRefusal(t, served, "gRPC", "RPC is dropped")
	expectRefusal(t, served, "Envoy", "drop overload")
	// RPCs wait while the client connects to a published endpoint; once it
	// is READY it drops every one
	for i, err := range refusals(conn, 200) {
		if !dropped(err) {
			t.Fatalf("PanicRejected: RPC %d: %v, want UNAVAILABLE \"RPC is dropped\"", i, err)
		}
	}
	t.Logf("PanicRejected: 200 of 200 RPCs dropped: %v", refusals(conn, 1)[0])
	for _, b := range backends {
		if n := b.Attempts(); n != 0 {
			t.Errorf("backend %s served %d RPCs of a rejected upstream", b.Addr, n)
		}
	}

	// Every endpoint unhealthy and panic disabled: NoCapacity, an empty
	// assignment. The client fails as for a cluster with nothing in it.
	topology{panicMode: "FailClosed", noPanic: true, unhealthy: unhealthy(0, 1, 2, 3, 4, 5, 6, 7)}.write(t, manifests, backends)
	served = cp.waitServed(t, "NoCapacity", manifests, "e2e/echo")
	if got := served.Upstreams[0].Outcome; got != "NoCapacity" {
		t.Fatalf("outcome %s, want NoCapacity", got)
	}
	expectRefusal(t, served, "gRPC", "not a drop")
	expectRefusal(t, served, "Envoy", "no healthy upstream")
	var last error
	testkit.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "NoCapacity reaches the client", func() (bool, string) {
		last = refusals(conn, 1)[0]
		return last != nil && !dropped(last), fmt.Sprintf("last RPC: %v", last)
	})
	for i, err := range refusals(conn, 200) {
		if status.Code(err) != codes.Unavailable || dropped(err) {
			t.Fatalf("NoCapacity: RPC %d: %v, want UNAVAILABLE and no drop", i, err)
		}
	}
	t.Logf("NoCapacity: 200 of 200 RPCs fail, none dropped: %v", last)
}

// expectRefusal requires explain's refusal for the client kind to hold
// substr.
func expectRefusal(t *testing.T, rep explain.Report, client, substr string) {
	t.Helper()
	for _, c := range rep.Upstreams[0].LoadBalancing.Clients {
		if c.Client == client {
			if !strings.Contains(c.Refusal, substr) {
				t.Errorf("explain: %s refusal %q, want it to say %q", client, c.Refusal, substr)
			}
			return
		}
	}
	t.Errorf("explain names no client %s", client)
}
