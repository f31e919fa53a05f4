package explain

import (
	"fmt"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
)

// Retries is an upstream's retry policy (spec.retries) as published on its
// route, and what each client kind does of it (docs/retries.md). Every
// duration is in milliseconds.
type Retries struct {
	// RetryOn are the conditions, in publishing order.
	RetryOn         []string     `json:"retryOn"`
	NumRetries      uint32       `json:"numRetries"`
	PerTryTimeoutMs int64        `json:"perTryTimeoutMs,omitempty"`
	BaseIntervalMs  int64        `json:"baseIntervalMs"`
	MaxIntervalMs   int64        `json:"maxIntervalMs"`
	Budget          *RetryBudget `json:"budget,omitempty"`
	// Clients says, per client kind, what it carries out.
	Clients []ClientRetries `json:"clients"`
}

// RetryBudget is the policy's retry budget, published on the Cluster.
type RetryBudget struct {
	Percent        uint32 `json:"percent"`
	MinConcurrency uint32 `json:"minConcurrency"`
}

// ClientRetries is what one client kind does with the published policy.
type ClientRetries struct {
	// Client is "Envoy" or "gRPC", as in LoadBalancing.
	Client string `json:"client"`
	// RetryOn are the conditions this client acts on; empty when none.
	RetryOn []string `json:"retryOn"`
	// MaxAttempts is the most attempts a request makes, the first
	// included: 1 when the client acts on no condition.
	MaxAttempts uint32 `json:"maxAttempts"`
	// ExcludesPreviousHosts says whether a retry avoids the endpoints the
	// request's earlier attempts used.
	ExcludesPreviousHosts bool `json:"excludesPreviousHosts"`
	// BudgetEnforced says whether the client bounds retries under way at
	// once by the budget.
	BudgetEnforced bool `json:"budgetEnforced"`
	// PerTry, Backoff, Budget and NextAttempt say each in a sentence what
	// the client does.
	PerTry      string `json:"perTry"`
	Backoff     string `json:"backoff"`
	Budget      string `json:"budget"`
	NextAttempt string `json:"nextAttempt"`
}

// retriesOf explains the upstream's retry policy; nil without one.
func retriesOf(u *topology.UpstreamState) *Retries {
	r := u.Upstream.Retries
	if r == nil {
		return nil
	}
	out := &Retries{NumRetries: r.NumRetries, PerTryTimeoutMs: r.PerTryTimeout.Milliseconds(),
		BaseIntervalMs: r.BaseInterval.Milliseconds(), MaxIntervalMs: r.MaxInterval.Milliseconds(), RetryOn: []string{}}
	var grpcOn []string
	for _, c := range topology.RetryConditions {
		if r.On&c.On == 0 {
			continue
		}
		out.RetryOn = append(out.RetryOn, c.Name)
		if c.GRPC {
			grpcOn = append(grpcOn, c.Name)
		}
	}
	if r.HasBudget() {
		out.Budget = &RetryBudget{Percent: r.BudgetPercent, MinConcurrency: r.BudgetMinConcurrency}
	}
	out.Clients = []ClientRetries{envoyRetries(u, out), grpcRetries(u, r, grpcOn)}
	return out
}

func envoyRetries(u *topology.UpstreamState, r *Retries) ClientRetries {
	c := ClientRetries{Client: "Envoy", RetryOn: r.RetryOn, MaxAttempts: r.NumRetries + 1, ExcludesPreviousHosts: true,
		PerTry:  "no per-try timeout: an attempt may take what is left of the route's timeout (Envoy's default 15s)",
		Backoff: "retry n waits a uniformly random time below min(base × 2ⁿ⁻¹, max), whole milliseconds (full jitter): " + backoffs(r, false),
		Budget:  "no budget: Envoy's default circuit breaker, at most 3 retries under way at once (max_retries)"}
	if r.PerTryTimeoutMs > 0 {
		c.PerTry = fmt.Sprintf("each attempt is cut off after %s; a cut-off attempt is retried only under HTTP5xx (Envoy counts the reset as a gateway error)", ms(r.PerTryTimeoutMs))
	}
	if b := r.Budget; b != nil {
		c.BudgetEnforced = true
		c.Budget = fmt.Sprintf("at most %d%% of the requests under way (active and pending), or %d, whichever is more, may be retries under way at once on each Envoy; a retry past it is not made and the failure is returned (upstream_rq_retry_overflow)", b.Percent, b.MinConcurrency)
	}
	const repicks = translate.HostSelectionRetryMaxAttempts
	switch translate.LbPolicyOf(u.Upstream, translate.Weighted).Policy {
	case cluster.Cluster_RING_HASH:
		c.NextAttempt = fmt.Sprintf("the request's hash again; a pick the previous-hosts predicate refuses moves one point along the ring, up to %d times (Envoy's Ring::chooseHost), so the retry reaches another owner unless every point tried belongs to an endpoint already used", repicks)
	case cluster.Cluster_MAGLEV:
		c.NextAttempt = fmt.Sprintf("the request's hash again; a pick the previous-hosts predicate refuses is made again with the hash's bits flipped by the attempt number, up to %d times (Envoy's MaglevTable::chooseHost)", repicks)
	default:
		c.NextAttempt = fmt.Sprintf("a new pick; one the previous-hosts predicate refuses (an endpoint an earlier attempt used) is made again, up to %d times, and when every pick is refused the last is used (Envoy's LoadBalancerBase::chooseHost)", repicks)
	}
	if selectable(u) == 1 {
		c.NextAttempt += "; with one selectable endpoint every attempt goes to it"
	}
	return c
}

func grpcRetries(u *topology.UpstreamState, r *topology.RetryPolicy, on []string) ClientRetries {
	c := ClientRetries{Client: "gRPC", RetryOn: on, MaxAttempts: 1}
	if on == nil {
		c.RetryOn = []string{}
		c.PerTry, c.Backoff, c.Budget = "no retries", "no retries", "no retries"
		c.NextAttempt = "no retries: grpc-go acts only on the gRPC status codes (Cancelled, DeadlineExceeded, Internal, ResourceExhausted, Unavailable) and this policy names none; ConnectFailure, Reset and HTTP5xx are Envoy's"
		return c
	}
	c.MaxAttempts = r.NumRetries + 1
	c.PerTry = "ignored: grpc-go reads no per_try_timeout; the call's own deadline bounds all its attempts together"
	rep := &Retries{NumRetries: r.NumRetries, BaseIntervalMs: r.BaseInterval.Milliseconds(), MaxIntervalMs: r.MaxInterval.Milliseconds()}
	c.Backoff = "retry n waits min(base × 2ⁿ⁻¹, max) times a random factor from 0.8 to 1.2 (grpc-go's shouldRetry): " + backoffs(rep, true) +
		"; only a failure that came before any response header (trailers only) is retried"
	c.Budget = fmt.Sprintf("none: grpc-go has no retry budget (it reads no retry_budget, and xDS sends it no retryThrottling), so every failing call makes all %d attempts however many fail at once", c.MaxAttempts)
	if r.HasBudget() {
		c.Budget = fmt.Sprintf("not enforced: grpc-go reads no retry_budget (and xDS sends it no retryThrottling), so every failing call makes all %d attempts however many fail at once; the budget bounds Envoy only", c.MaxAttempts)
	}
	switch translate.LbPolicyOf(u.Upstream, translate.PerEndpoint).Policy {
	case cluster.Cluster_RING_HASH:
		c.NextAttempt = "no previous-host exclusion: the retry hashes the same request and goes back to the same endpoint while it is connected (grpc-go's ring_hash picker)"
	default:
		c.NextAttempt = "no previous-host exclusion: each attempt is a new weighted random pick over the endpoints (each its own locality, grpc-go's weighted_target), so a retry returns to the endpoint that failed with probability its share"
		if top := largestShare(u); top > 0 {
			c.NextAttempt += fmt.Sprintf(" (%s for the largest)", Percent(top))
		}
	}
	return c
}

// backoffs lists the back-off of each retry: Envoy's range (below the
// bound) or gRPC's nominal wait, which its jitter moves by ±20 %.
func backoffs(r *Retries, nominal bool) string {
	var parts []string
	cur := r.BaseIntervalMs
	for n := uint32(1); n <= r.NumRetries; n++ {
		d := min(cur, r.MaxIntervalMs)
		if nominal {
			parts = append(parts, fmt.Sprintf("retry %d about %s", n, ms(d)))
		} else {
			parts = append(parts, fmt.Sprintf("retry %d below %s", n, ms(d)))
		}
		cur *= 2
	}
	return strings.Join(parts, ", ")
}

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

// selectable counts the endpoints with traffic.
func selectable(u *topology.UpstreamState) int {
	n := 0
	if u.Result.Outcome != weights.Routable {
		return 0
	}
	for i := range u.Result.Endpoints {
		if u.Result.Endpoints[i].Share > 0 {
			n++
		}
	}
	return n
}

// largestShare is the largest endpoint share, in millionths of all traffic.
func largestShare(u *topology.UpstreamState) uint64 {
	var top uint64
	if u.Result.Outcome != weights.Routable {
		return 0
	}
	for i := range u.Result.Endpoints {
		top = max(top, u.Result.Endpoints[i].Share)
	}
	return top
}

func writeRetries(tw *textWriter, r *Retries) {
	if r == nil {
		return
	}
	tw.printf("  retries: up to %d on %s; back-off from %s, at most %s", r.NumRetries, strings.Join(r.RetryOn, ", "), ms(r.BaseIntervalMs), ms(r.MaxIntervalMs))
	if r.PerTryTimeoutMs > 0 {
		tw.printf("; per-try timeout %s", ms(r.PerTryTimeoutMs))
	}
	if b := r.Budget; b != nil {
		tw.printf("; budget %d%% of requests under way, at least %d", b.Percent, b.MinConcurrency)
	}
	tw.printf("\n")
	for _, c := range r.Clients {
		on := "none of the conditions"
		if len(c.RetryOn) > 0 {
			on = strings.Join(c.RetryOn, ", ")
		}
		tw.printf("    %-5s at most %d attempt%s, acting on %s\n", c.Client, c.MaxAttempts, plural(int(c.MaxAttempts)), on)
		if c.MaxAttempts > 1 {
			tw.printf("      per try: %s\n      back-off: %s\n      budget: %s\n", c.PerTry, c.Backoff, c.Budget)
		}
		tw.printf("      next attempt: %s\n", c.NextAttempt)
	}
}
