package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
)

// retriesUpstream is lbPolicyUpstream (18.75 / 56.25 / 25 %) with a retry
// policy.
func retriesUpstream(t *testing.T, policy string, r *topology.RetryPolicy) *topology.UpstreamState {
	t.Helper()
	u := lbPolicyUpstream(t, policy, topology.ControlPlane, false)
	u.Upstream.Retries = r
	return u
}

// TestRetriesPerClientKind: explain says what each client does of the
// published policy, and does not promise what a client cannot do: grpc-go
// acts on the gRPC codes only, has no retry budget, ignores the per-try
// timeout and excludes no previous host.
func TestRetriesPerClientKind(t *testing.T) {
	full := &topology.RetryPolicy{On: topology.RetryUnavailable | topology.RetryConnectFailure | topology.RetryInternal, NumRetries: 3,
		PerTryTimeout: 750 * time.Millisecond, BaseInterval: 10 * time.Millisecond, MaxInterval: 30 * time.Millisecond,
		BudgetPercent: 25, BudgetMinConcurrency: 5}
	envoyOnly := &topology.RetryPolicy{On: topology.RetryHTTP5xx | topology.RetryReset, NumRetries: 1,
		BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond}
	for _, tc := range []struct {
		name, lb               string
		in                     *topology.RetryPolicy
		envoyOn, grpcOn        string
		envoyMost, grpcMost    uint32
		envoyNext, grpcNext    string
		grpcBudget, envoyRetry string
		text                   []string
	}{
		{"every knob, round robin", "RoundRobin", full, "ConnectFailure,Internal,Unavailable", "Internal,Unavailable", 4, 4,
			"LoadBalancerBase::chooseHost", "weighted random pick", "not enforced", "cut off after 750ms",
			[]string{
				"  retries: up to 3 on ConnectFailure, Internal, Unavailable; back-off from 10ms, at most 30ms; per-try timeout 750ms; budget 25% of requests under way, at least 5\n",
				"    Envoy at most 4 attempts, acting on ConnectFailure, Internal, Unavailable\n",
				"retry 1 below 10ms, retry 2 below 20ms, retry 3 below 30ms",
				"    gRPC  at most 4 attempts, acting on Internal, Unavailable\n",
				"retry 1 about 10ms, retry 2 about 20ms, retry 3 about 30ms",
				"(56.2500% for the largest)",
			}},
		{"Envoy's conditions only, ring hash", "RingHash", envoyOnly, "Reset,HTTP5xx", "", 2, 1,
			"Ring::chooseHost", "no retries", "no retries", "no per-try timeout",
			[]string{
				"  retries: up to 1 on Reset, HTTP5xx; back-off from 25ms, at most 250ms\n",
				"    gRPC  at most 1 attempt, acting on none of the conditions\n",
			}},
		{"Maglev", "Maglev", envoyOnly, "Reset,HTTP5xx", "", 2, 1, "MaglevTable::chooseHost", "no retries", "no retries", "no per-try timeout", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retriesOf(retriesUpstream(t, tc.lb, tc.in))
			if got == nil || len(got.Clients) != 2 {
				t.Fatalf("report %+v", got)
			}
			e, g := got.Clients[0], got.Clients[1]
			if e.Client != "Envoy" || strings.Join(e.RetryOn, ",") != tc.envoyOn || e.MaxAttempts != tc.envoyMost || !e.ExcludesPreviousHosts ||
				!strings.Contains(e.NextAttempt, tc.envoyNext) || !strings.Contains(e.PerTry, tc.envoyRetry) || e.BudgetEnforced != tc.in.HasBudget() {
				t.Errorf("Envoy: %+v", e)
			}
			if g.Client != "gRPC" || strings.Join(g.RetryOn, ",") != tc.grpcOn || g.MaxAttempts != tc.grpcMost || g.ExcludesPreviousHosts || g.BudgetEnforced ||
				!strings.Contains(g.NextAttempt, tc.grpcNext) || !strings.Contains(g.Budget, tc.grpcBudget) {
				t.Errorf("gRPC: %+v", g)
			}
			var buf bytes.Buffer
			writeRetries(&textWriter{w: &buf}, got)
			for _, want := range tc.text {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("the text has no %q:\n%s", want, buf.String())
				}
			}
		})
	}
	if retriesOf(retriesUpstream(t, "RoundRobin", nil)) != nil {
		t.Error("an upstream without retries has a retries report")
	}
}
