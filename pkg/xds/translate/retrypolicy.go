package translate

import (
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"poise.dev/poise/pkg/topology"
)

// PreviousHostsPredicate is the retry host predicate that makes Envoy pick
// again, up to HostSelectionRetryMaxAttempts times, when a retry's pick is
// an endpoint an earlier attempt of the request already used.
const PreviousHostsPredicate = "envoy.retry_host_predicates.previous_hosts"

// HostSelectionRetryMaxAttempts is how many times Envoy picks again for a
// retry whose pick the predicate refuses; when every pick is refused the
// retry goes to the last one (Envoy's LoadBalancerBase::chooseHost). Five
// re-picks leave a random pick among H equal endpoints on a previous one
// with probability (1/H)⁶ at most: 1.6 % for two endpoints, 0.14 % for three.
const HostSelectionRetryMaxAttempts = 5

// RetryPolicy is the RouteAction.retry_policy of the upstream's policy, nil
// without one. Every field is one both Envoy and grpc-go accept
// (grpc-go's unmarshal_rds.go, generateRetryConfig): retry_on names only
// tokens both know, num_retries ≥ 1, and the back-off is always written
// with base_interval > 0 and max_interval ≥ it, so the clients do not fall
// back to defaults of their own. grpc-go reads retry_on's gRPC codes,
// num_retries and retry_back_off, and ignores the rest (per_try_timeout,
// the host predicate).
func RetryPolicy(up topology.Upstream) *route.RetryPolicy {
	r := up.Retries
	if r == nil {
		return nil
	}
	var on []string
	for _, c := range topology.RetryConditions {
		if r.On&c.On != 0 {
			on = append(on, c.Token)
		}
	}
	p := &route.RetryPolicy{
		RetryOn:    strings.Join(on, ","),
		NumRetries: wrapperspb.UInt32(r.NumRetries),
		RetryHostPredicate: []*route.RetryPolicy_RetryHostPredicate{{
			Name:       PreviousHostsPredicate,
			ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushosts.PreviousHostsPredicate{})},
		}},
		HostSelectionRetryMaxAttempts: HostSelectionRetryMaxAttempts,
		RetryBackOff: &route.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(r.BaseInterval),
			MaxInterval:  durationpb.New(r.MaxInterval),
		},
	}
	if r.PerTryTimeout > 0 {
		p.PerTryTimeout = durationpb.New(r.PerTryTimeout)
	}
	return p
}

// CircuitBreakers is the Cluster's circuit_breakers when the upstream's
// retry policy has a budget, nil otherwise: one threshold at the default
// priority holding only the retry budget, so every other limit keeps
// Envoy's default. grpc-go reads only max_requests there
// (unmarshal_cds.go, circuitBreakersFromCluster), which stays unset.
func CircuitBreakers(up topology.Upstream) *cluster.CircuitBreakers {
	r := up.Retries
	if !r.HasBudget() {
		return nil
	}
	return &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
		Priority: core.RoutingPriority_DEFAULT,
		RetryBudget: &cluster.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent:       &typev3.Percent{Value: float64(r.BudgetPercent)},
			MinRetryConcurrency: wrapperspb.UInt32(r.BudgetMinConcurrency),
		},
	}}}
}
