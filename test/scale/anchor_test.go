package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/loadgen"
	"poise.dev/poise/test/cpbinary"
)

// TestAnchorMirrorsReplica runs the go-control-plane anchor
// (cmd/gcpanchor) mirroring the real binary, connects 100 Envoy-like
// clients (SotW and Delta) to the anchor, flips endpoints in three rounds,
// and holds every client to what the replica serves: each change reaches
// every subscriber through the mirror's hop, and each client ends holding
// the replica's bytes of every ClusterLoadAssignment it subscribed to, as
// a fresh stream of the mirror's node is served them; the anchor's Clusters
// are the replica's bytes too.
func TestAnchorMirrorsReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the controlplane binary and the anchor")
	}
	const upstreams = 30
	anchorBin := filepath.Join(t.TempDir(), "gcpanchor")
	args := []string{"build", "-o", anchorBin}
	if os.Getenv(cpbinary.RaceEnv) == "1" {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "poise.dev/poise/test/scale/cmd/gcpanchor")...).CombinedOutput(); err != nil {
		t.Fatalf("build gcpanchor: %v\n%s", err, out)
	}
	tree, err := loadgen.Generate(t.TempDir(), upstreams)
	if err != nil {
		t.Fatal(err)
	}
	xds, admin := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	replica := cpbinary.Start(t, bin, "serve", "-f", tree.Dir, "--xds-address", xds, "--admin-address", admin)
	replica.WaitReady(t, "http://"+admin)
	anchorXDS, anchorAdmin := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	anchor := cpbinary.Start(t, anchorBin, "--mirror", xds, "--xds-address", anchorXDS, "--admin-address", anchorAdmin, "--log-format", "json")
	anchor.WaitReady(t, "http://"+anchorAdmin) // its /readyz: the first mirror sync is in the caches

	churn := loadgen.FileChurn{Tree: tree}
	clusters := churn.Clusters()
	pattern := loadgen.Pattern{Envoy: 100, DeltaPercent: 50, EnvoyMin: 5, EnvoyMax: 20, Hot: 2, Skew: 1, Localities: 3, Seed: 11}
	specs, err := pattern.Specs(clusters, nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := loadgen.NewFleet(anchorXDS, clusters, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := fleet.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	waitSynced(t, ctx, fleet)

	// Three rounds of flips, each awaited: the hot clusters every round, a
	// third of the others in turn.
	for round := range 3 {
		for u := range upstreams {
			if u >= pattern.Hot && u%3 != round {
				continue
			}
			fleet.Log().Add(int32(u), time.Now().UnixNano())
			if err := churn.Flip(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		_, expected := fleet.Log().Flips()
		waitDelivered(t, ctx, fleet, expected, func() string {
			return fmt.Sprintf("round %d: %d of %d deliveries; first error: %v", round, fleet.Delivered(), expected, fleet.Err())
		})
	}
	flips, expected := fleet.Log().Flips()
	conv := fleet.Conv.Dist()
	t.Logf("%d flips, %d deliveries through the anchor; convergence p50 %d µs, p99 %d µs, max %d µs",
		flips, expected, conv.P50Us, conv.P99Us, conv.MaxUs)
	if c := fleet.Counters(); c.Strays != 0 || c.Unattributed != 0 || c.CDSLosses != 0 {
		t.Errorf("strays %d %v, unexplained updates %d, CDS losses %d: want none", c.Strays, c.StrayNames, c.Unattributed, c.CDSLosses)
	}

	// Every flip has reached every subscriber, so the replica serves its
	// last state: what it serves a fresh stream of the mirror's node is
	// what every client of the anchor holds, byte for byte.
	wantCDS, wantEDS := fetchAll(t, ctx, xds, clusters)
	gotCDS, gotEDS := fetchAll(t, ctx, anchorXDS, clusters)
	for name, want := range wantCDS {
		if gotCDS[name] != want {
			t.Errorf("cluster %s: the anchor serves %x, the replica %x", name, gotCDS[name], want)
		}
	}
	for name, want := range wantEDS {
		if gotEDS[name] != want {
			t.Errorf("endpoints %s: the anchor serves %x, the replica %x", name, gotEDS[name], want)
		}
	}
	if len(gotCDS) != len(wantCDS) || len(gotEDS) != len(wantEDS) || len(wantCDS) != upstreams {
		t.Errorf("the anchor serves %d clusters and %d assignments, the replica %d and %d; the tree has %d",
			len(gotCDS), len(gotEDS), len(wantCDS), len(wantEDS), upstreams)
	}
	for i, held := range fleet.Holdings() {
		for _, h := range held {
			if h.Hash != wantEDS[h.Cluster] || !h.CDS {
				t.Errorf("client %s (delta %v): %s holds %x (CDS %v), the replica serves %x",
					specs[i].Node.ID, specs[i].Delta, h.Cluster, h.Hash, h.CDS, wantEDS[h.Cluster])
			}
		}
	}
	if t.Failed() {
		t.Logf("anchor log:\n%s", anchor.Logs())
	}
}

// fetchAll is what a fresh SotW stream with the anchor's mirror node is
// served at addr: every Cluster (a CDS wildcard) and the assignment of
// every cluster named, each decoded for its name and hashed as the load
// clients hash it.
func fetchAll(t *testing.T, ctx context.Context, addr string, clusters []string) (cds, eds map[string]uint64) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "gcpanchor-mirror", Cluster: "gcpanchor", UserAgentName: "envoy",
		ClientFeatures: []string{"envoy.lrs.supports_send_all_clusters", "envoy.config.supports-resource-ttl"}}
	for _, req := range []*discovery.DiscoveryRequest{{Node: node, TypeUrl: loadgen.TypeCDS}, {TypeUrl: loadgen.TypeEDS, ResourceNames: clusters}} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	cds, eds = map[string]uint64{}, map[string]uint64{}
	for len(cds) == 0 || len(eds) < len(clusters) {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("fetch from %s: %v", addr, err)
		}
		for _, a := range resp.GetResources() {
			switch resp.GetTypeUrl() {
			case loadgen.TypeCDS:
				var c clusterv3.Cluster
				if err := proto.Unmarshal(a.GetValue(), &c); err != nil {
					t.Fatal(err)
				}
				cds[c.GetName()] = loadgen.HashOf(a.GetValue())
			case loadgen.TypeEDS:
				var cla endpointv3.ClusterLoadAssignment
				if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
					t.Fatal(err)
				}
				eds[cla.GetClusterName()] = loadgen.HashOf(a.GetValue())
			}
		}
	}
	return cds, eds
}
