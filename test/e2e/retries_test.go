package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// retryCalls is the calls measured per policy. In the first case 95.71 %
// of calls succeed with three attempts; had the client made two at most
// (87.75 %), the successes would be 13 standard deviations off at 3,000
// calls, and 35 had it made one (65 %): the 4.5 threshold tells the
// published policy from a weaker one, and a faithful client fails it by
// chance with probability about 7·10⁻⁶ per count.
const retryCalls = 3_000

// TestGRPCClientsCarryOutRetryPolicies: real grpc-go xDS clients of
// Upstreams with spec.retries, over backends that fail a share of their
// calls with UNAVAILABLE before any response (the trailers-only answer a
// gRPC client may retry), each failure drawn independently. For each
// policy the calls that succeed and the attempts each backend counts
// match what explain's gRPC reading of the published policy predicts: at
// most maxAttempts attempts, each a new pick by share (no previous-host
// exclusion), within 4.5 standard deviations of the exact expectation.
//   - codes: retryOn [Unavailable, ConnectFailure], numRetries 2 over
//     shares 25/75 failing 80 % and 20 % of attempts.
//   - envoy-only: retryOn [HTTP5xx, Reset, ConnectFailure], none a gRPC
//     code: grpc-go makes exactly one attempt per call.
//   - budget: a retry budget of 20 % (at least 1) under a burst where
//     every attempt fails: grpc-go has no retry budget, so every call
//     makes all numRetries + 1 attempts, exactly, as explain says.
func TestGRPCClientsCarryOutRetryPolicies(t *testing.T) {
	t.Parallel()
	type phase struct {
		name     string
		retries  string
		fail     [2]uint64 // per mille, by backend
		checkOut func(t *testing.T, r *explain.Retries, g explain.ClientRetries)
	}
	phases := []phase{
		{"codes", "{retryOn: [Unavailable, ConnectFailure], numRetries: 2, backoff: {baseInterval: 1ms, maxInterval: 4ms}}", [2]uint64{800, 200},
			func(t *testing.T, r *explain.Retries, g explain.ClientRetries) {
				if g.MaxAttempts != 3 || strings.Join(g.RetryOn, ",") != "Unavailable" || g.ExcludesPreviousHosts {
					t.Errorf("explain's gRPC reading: %+v, want 3 attempts on Unavailable only, no previous-host exclusion", g)
				}
			}},
		{"envoy-only", "{retryOn: [HTTP5xx, Reset, ConnectFailure], numRetries: 3, backoff: {baseInterval: 1ms}}", [2]uint64{500, 500},
			func(t *testing.T, r *explain.Retries, g explain.ClientRetries) {
				if g.MaxAttempts != 1 || len(g.RetryOn) != 0 {
					t.Errorf("explain's gRPC reading: %+v, want one attempt: the policy names no gRPC code", g)
				}
			}},
		{"budget", "{retryOn: [Unavailable], numRetries: 3, backoff: {baseInterval: 1ms, maxInterval: 2ms}, budget: {percent: 20, minConcurrency: 1}}", [2]uint64{1000, 1000},
			func(t *testing.T, r *explain.Retries, g explain.ClientRetries) {
				if r.Budget == nil || r.Budget.Percent != 20 || r.Budget.MinConcurrency != 1 {
					t.Errorf("explain's budget %+v, want 20 %% at least 1", r.Budget)
				}
				if g.MaxAttempts != 4 || g.BudgetEnforced || !strings.Contains(g.Budget, "not enforced") {
					t.Errorf("explain's gRPC reading: %+v, want 4 attempts and the budget not enforced", g)
				}
				if e := r.Clients[0]; e.Client != "Envoy" || !e.BudgetEnforced {
					t.Errorf("explain's Envoy reading: %+v, want the budget enforced", e)
				}
			}},
	}
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	backends := map[string][]*splitcheck.Backend{}
	var y strings.Builder
	for _, p := range phases {
		bs := splitcheck.StartBackends(t, "127.0.0.1", 2)
		backends[p.name] = bs
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s, namespace: retries}\nspec: {protocol: GRPC, addressPolicy: {allowLoopback: true}, retries: %s}\n", p.name, p.retries)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s, namespace: retries}\nspec:\n  upstream: %s\n  locality: {region: r, zone: a}\n  endpoints:\n  - {address: 127.0.0.1, port: %d, weight: 1}\n  - {address: 127.0.0.1, port: %d, weight: 3}\n",
			p.name, p.name, bs[0].Port, bs[1].Port)
	}
	writeAtomically(t, filepath.Join(manifests, "retries.yaml"), y.String())
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)

	for i, p := range phases {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			bs := backends[p.name]
			up := "retries/" + p.name
			var rep explain.Report
			testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream="+up, &rep)
			want := splitcheck.ExpectationOf(t, rep)
			r := rep.Upstreams[0].Retries
			if r == nil || len(r.Clients) != 2 || r.Clients[1].Client != "gRPC" {
				t.Fatalf("explain shows no retry policy for both client kinds: %+v", r)
			}
			g := r.Clients[1]
			t.Logf("explain, gRPC: %d attempts on %v; next attempt: %s; budget: %s", g.MaxAttempts, g.RetryOn, g.NextAttempt, g.Budget)
			p.checkOut(t, r, g)

			node := fmt.Sprintf("retries-%d", i)
			conn := splitcheck.NewXDSClient(t, xdsAddr, node, p.name+".retries")
			// every backend connected, no failure yet: the measured calls
			// then pick among both from the first
			splitcheck.Warm(t, conn, want)
			fail := map[string]uint64{}
			for j, b := range bs {
				b.SetUnavailable(p.fail[j], uint64(1000*i+j+1))
				b.ResetAttempts()
				fail[b.Addr] = p.fail[j]
			}
			calls := splitcheck.SendOutcomes(conn, retryCalls, 8)
			attempts := map[string]int64{}
			for _, b := range bs {
				attempts[b.Addr] = b.Attempts()
			}
			for c, n := range calls.Codes {
				if c != codes.Unavailable {
					t.Errorf("%d calls ended %v, not UNAVAILABLE (first: %v)", n, c, calls.First[c])
				}
			}
			model := splitcheck.NewRetryModel(want.Share, fail, int(g.MaxAttempts))
			splitcheck.CheckRetries(t, p.name, calls, attempts, model)
			if p.name == "codes" {
				// the check tells the published policy from a weaker one
				for _, fewer := range []int{1, 2} {
					if z := splitcheck.RetryDeviation(calls, attempts, splitcheck.NewRetryModel(want.Share, fail, fewer)); z < 4.5 {
						t.Errorf("with %d attempts at most the counts would be only %.2f standard deviations off: the check cannot tell", fewer, z)
					}
				}
			}
			for _, typ := range []string{"RDS", "CDS"} {
				if n := cp.nacks(t, node, typ); n > 0 {
					t.Errorf("the client NACKed %s %d times", typ, n)
				}
			}
		})
	}
}
