package scale

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"poise.dev/poise/pkg/loadgen"
	"poise.dev/poise/test/cpbinary"
)

// TestLoadReconnectAfterRestart: 120 clients (Envoy-like and gRPC-like,
// SotW and Delta) of the real binary, which is killed (SIGKILL) and
// started again on the same address: every client opens its stream again
// at once, a storm. Every Delta client tells the replica what it holds
// (initial_resource_versions) and is sent none of it again: the replica's
// resource versions name their content, so a restarted replica gives its
// unchanged resources the versions they had, and is answered all the same
// (an empty response), so that it knows it is served. A flip after the
// restart reaches every subscriber, and every client ends holding what it
// did.
func TestLoadReconnectAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the controlplane binary")
	}
	const upstreams = 20
	tree, err := loadgen.Generate(t.TempDir(), upstreams)
	if err != nil {
		t.Fatal(err)
	}
	xds, admin := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	serve := func() *cpbinary.Process {
		p := cpbinary.Start(t, bin, "serve", "-f", tree.Dir, "--xds-address", xds, "--admin-address", admin)
		p.WaitReady(t, "http://"+admin)
		return p
	}
	first := serve()
	churn := loadgen.FileChurn{Tree: tree}
	clusters := churn.Clusters()
	pattern := loadgen.Pattern{Envoy: 60, GRPC: 60, DeltaPercent: 50, EnvoyMin: 5, EnvoyMax: 15, GRPCMin: 1, GRPCMax: 4,
		Hot: 2, Skew: 1, Localities: 3, StreamsPerConn: 2, Seed: 11}
	specs, err := pattern.Specs(clusters, nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := loadgen.NewFleet(xds, clusters, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet.Reconnect = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := fleet.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	waitSynced(t, ctx, fleet)
	before := fleet.Holdings()

	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	killed := time.Now()
	serve()
	back := time.Now()
	// every stream ended with the process: each client reconnects once at
	// least (the counter is the fleet's own; no event tells it)
	for fleet.Counters().Reconnects < int64(len(specs)) {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d clients reconnected", fleet.Counters().Reconnects, len(specs))
		case <-time.After(20 * time.Millisecond):
		}
	}
	// a flip after the storm reaches every subscriber of the hot cluster
	at := time.Now()
	fleet.Log().Add(0, at.UnixNano())
	if err := churn.Flip(ctx, 0); err != nil {
		t.Fatal(err)
	}
	_, expected := fleet.Log().Flips()
	waitDelivered(t, ctx, fleet, expected, func() string {
		return fmt.Sprintf("%d of %d deliveries after the restart", fleet.Delivered(), expected)
	})
	reached := time.Since(at)
	c := fleet.Counters()
	resumed := fleet.Resumed.Dist()
	t.Logf("killed and restarted in %v; %d reconnects; stream end → first response p50 %d µs, max %d µs (%d of them: a Delta client owed nothing is answered with nothing in it); "+
		"a flip after it reached its %d subscribers in %v; Delta resources sent again at the version held: %d; SotW resent unchanged: %d; resent unchanged otherwise: %d",
		back.Sub(killed).Round(time.Millisecond), c.Reconnects, resumed.P50Us, resumed.MaxUs, resumed.N, expected, reached.Round(time.Millisecond),
		c.ResentAfterResume, c.SotWResentAfterReconnect, c.Resent)
	var ended int64
	for reason, n := range c.StreamEnds {
		ended += n
		t.Logf("streams ended: %d: %s", n, reason)
	}
	if ended != c.Reconnects {
		t.Errorf("stream ends by reason %v sum to %d, reconnects %d: each reconnect's end has its reason", c.StreamEnds, ended, c.Reconnects)
	}
	if resumed.N < c.Reconnects {
		t.Errorf("%d of %d reopened streams were answered: every client must learn it is served", resumed.N, c.Reconnects)
	}
	if c.ResentAfterResume != 0 || c.Resent != 0 {
		t.Errorf("after the restart the Delta clients were sent %d resources at the version they held, and %d resources were sent again unchanged: want none",
			c.ResentAfterResume, c.Resent)
	}
	if c.Strays != 0 || c.Leaks != 0 || c.Unattributed != 0 || c.CDSLosses != 0 {
		t.Errorf("strays %d %v, leaks %d, unexplained updates %d, CDS losses %d: want none", c.Strays, c.StrayNames, c.Leaks, c.Unattributed, c.CDSLosses)
	}
	after := fleet.Holdings()
	for i := range specs {
		if len(after[i]) != len(before[i]) {
			t.Errorf("client %s held %d resources before the restart, %d after", specs[i].Node.ID, len(before[i]), len(after[i]))
			continue
		}
		for j, h := range after[i] {
			if h.Cluster != clusters[0] && h.Hash != before[i][j].Hash {
				t.Errorf("client %s: %s changed across the restart (nothing changed it)", specs[i].Node.ID, h.Cluster)
			}
		}
	}
}
