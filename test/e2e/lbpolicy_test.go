package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// lbPolicyRPCs is the RPCs measured per policy. Against the split explain
// computes here (18.75 / 56.25 / 25 %), an equal split is 0.37·√n standard
// deviations off on the first endpoint (23 at 4,000), and the check's
// threshold is 4.5: a client that ignores locality weights cannot pass, a
// faithful one fails by chance with probability about 2·10⁻⁵ per policy.
const lbPolicyRPCs = 4_000

// TestGRPCClientsCarryOutEveryLoadBalancingPolicy: one
// Upstream per loadBalancing policy over the same three backends — localities
// 3:1, endpoint weights 1 and 3 in the first — each dialled by its own
// grpc-go xDS client. Every policy must reach the client without a NACK and
// be carried out with the split explain computes (18.75 / 56.25 / 25 %).
func TestGRPCClientsCarryOutEveryLoadBalancingPolicy(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 3)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	policies := []string{"RoundRobin", "LeastRequest", "Random", "RingHash", "Maglev"}
	var y strings.Builder
	for _, p := range policies {
		name := strings.ToLower(p)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s, namespace: lb}\nspec: {protocol: GRPC, loadBalancing: %s, addressPolicy: {allowLoopback: true}}\n", name, p)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s-a, namespace: lb}\nspec: {upstream: %s, priority: 0, region: r, zone: a, weight: 3}\n", name, name)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s-b, namespace: lb}\nspec: {upstream: %s, priority: 0, region: r, zone: b, weight: 1}\n", name, name)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s-a, namespace: lb}\nspec:\n  upstream: %s\n  locality: {region: r, zone: a}\n  endpoints:\n  - {address: 127.0.0.1, port: %d, weight: 1}\n  - {address: 127.0.0.1, port: %d, weight: 3}\n",
			name, name, backends[0].Port, backends[1].Port)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s-b, namespace: lb}\nspec:\n  upstream: %s\n  locality: {region: r, zone: b}\n  endpoints:\n  - {address: 127.0.0.1, port: %d, weight: 1}\n",
			name, name, backends[2].Port)
	}
	writeAtomically(t, filepath.Join(manifests, "lb.yaml"), y.String())
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)

	for _, p := range policies {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			up := "lb/" + strings.ToLower(p)
			want := explainOffline(t, manifests, up)
			for i, s := range []uint64{187_500, 562_500, 250_000} {
				if got := want.Share[backends[i].Addr]; got != s {
					t.Fatalf("explain gives %s a share of %d, want %d", backends[i].Addr, got, s)
				}
			}
			// explain says, per client kind, how the policy is carried out
			var rep explain.Report
			testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream="+up, &rep)
			if len(rep.Upstreams) != 1 {
				t.Fatalf("explain: %d upstreams", len(rep.Upstreams))
			}
			lb := rep.Upstreams[0].LoadBalancing
			for _, c := range lb.Clients {
				t.Logf("explain, %s: %s %s, split %s ±%s (%s)", c.Client, c.Rendering, c.LbPolicy, c.Split, explain.Percent(c.BoundMillionths), c.Note)
			}
			if len(lb.Clients) != 2 || lb.Clients[1].Client != "gRPC" || lb.Clients[1].Split != explain.SplitExact || lb.Clients[1].LbPolicy != "ROUND_ROBIN" {
				t.Errorf("explain does not say gRPC clients carry out %s exactly: %+v", p, lb.Clients)
			}
			node := "lb-" + strings.ToLower(p)
			conn := splitcheck.NewXDSClient(t, xdsAddr, node, strings.ToLower(p)+".lb")
			// splitcheck.Warm's wait, with the NACKs in its last word, so a
			// client that never gets a usable cluster is told apart from a
			// wrong split
			testkit.Eventually(t, 15*time.Second, p+": every backend with a share serves, no RPC fails", func() (bool, string) {
				res := splitcheck.Send(conn, 200)
				missing := 0
				for addr, s := range want.Share {
					if s > 0 && res.By[addr] == 0 {
						missing++
					}
				}
				if missing == 0 && len(res.Other) == 0 {
					return true, ""
				}
				var first error
				if len(res.Other) > 0 {
					first = res.Other[0]
				}
				return false, fmt.Sprintf("%d of %d backends never served, %d of 200 RPCs failed (first: %v); CDS NACKs %d",
					missing, len(want.Share), len(res.Other), first, cp.nacks(t, node, "CDS"))
			})
			splitcheck.CheckSplit(t, p, splitcheck.Send(conn, lbPolicyRPCs), want)
			if n := cp.nacks(t, node, "CDS"); n > 0 {
				t.Errorf("%s: the client NACKed the cluster %d times", p, n)
			}
		})
	}
}

// nacks is how many times the node NACKed the type ("CDS", "EDS", …).
func (cp *controlPlane) nacks(t *testing.T, node, typ string) uint64 {
	var v clientsView
	testkit.MustGetJSON(t, cp.adminURL+"/debug/clients", &v)
	for _, c := range v.Clients {
		if c.NodeID == node {
			return c.Types[typ].NACKs
		}
	}
	return 0
}
