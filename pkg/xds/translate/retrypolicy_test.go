package translate_test

import (
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
)

// TestRetryPolicyPassesBothClients: at every bound of spec.retries, the
// published retry_policy passes Envoy's generated validation and every
// rule grpc-go NACKs a route for (internal/xds/xdsclient/xdsresource,
// generateRetryConfig: num_retries ≥ 1, base_interval and max_interval
// above 0), with max_interval ≥ base_interval as Envoy requires, the
// back-off always written out, and retry_on holding only tokens both know.
func TestRetryPolicyPassesBothClients(t *testing.T) {
	known := map[string]bool{}
	for _, c := range topology.RetryConditions {
		known[c.Token] = true
	}
	for _, tc := range []struct {
		name string
		r    topology.RetryPolicy
	}{
		{"lower bounds", topology.RetryPolicy{On: topology.RetryConnectFailure, NumRetries: 1, PerTryTimeout: time.Millisecond,
			BaseInterval: time.Millisecond, MaxInterval: time.Millisecond, BudgetPercent: 1}},
		{"upper bounds", topology.RetryPolicy{On: 0xff, NumRetries: 4, PerTryTimeout: time.Hour,
			BaseInterval: 10 * time.Second, MaxInterval: 5 * time.Minute, BudgetPercent: 100, BudgetMinConcurrency: 10000}},
		{"defaults", topology.RetryPolicy{On: topology.RetryUnavailable, NumRetries: 1, BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := topology.Upstream{Key: topology.Key{Namespace: "n", Name: "u"}, Retries: &tc.r}
			p := translate.RetryPolicy(up)
			if err := p.ValidateAll(); err != nil {
				t.Fatalf("Envoy's validation: %v", err)
			}
			b := p.GetRetryBackOff()
			base, most := b.GetBaseInterval().AsDuration(), b.GetMaxInterval().AsDuration()
			switch {
			case p.GetNumRetries() == nil || p.GetNumRetries().GetValue() < 1:
				t.Errorf("num_retries %v: grpc-go NACKs below 1", p.GetNumRetries())
			case b.GetBaseInterval() == nil || b.GetMaxInterval() == nil:
				t.Errorf("back-off %v: both intervals must be written, or the clients take defaults of their own", b)
			case base <= 0 || most < base:
				t.Errorf("back-off %v to %v: grpc-go NACKs an interval of 0, Envoy a max below the base", base, most)
			case base != tc.r.BaseInterval || most != tc.r.MaxInterval || p.GetNumRetries().GetValue() != tc.r.NumRetries:
				t.Errorf("published %v", p)
			}
			for _, tok := range strings.Split(p.GetRetryOn(), ",") {
				if !known[tok] {
					t.Errorf("retry_on token %q is not one both clients know", tok)
				}
			}
			cb := translate.CircuitBreakers(up)
			switch {
			case !tc.r.HasBudget():
				if cb != nil {
					t.Errorf("circuit breakers %v without a budget", cb)
				}
			case cb.ValidateAll() != nil || len(cb.GetThresholds()) != 1 || cb.GetThresholds()[0].GetMaxRequests() != nil:
				t.Errorf("circuit breakers %v: one threshold with the budget alone (grpc-go reads max_requests there)", cb)
			}
		})
	}
	if translate.RetryPolicy(topology.Upstream{}) != nil || translate.CircuitBreakers(topology.Upstream{}) != nil {
		t.Error("an upstream without retries publishes a retry policy or circuit breakers")
	}
}
