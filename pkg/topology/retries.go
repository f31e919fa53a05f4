package topology

import "time"

// RetryOn is a set of retry conditions, one bit each.
type RetryOn uint16

// The retry conditions, in the order Poise publishes them.
const (
	RetryConnectFailure RetryOn = 1 << iota
	RetryReset
	RetryHTTP5xx
	RetryCancelled
	RetryDeadlineExceeded
	RetryInternal
	RetryResourceExhausted
	RetryUnavailable
)

// RetryConditions names every condition: its API name and its token in
// Envoy's and gRPC's retry_on, in publishing order. GRPC marks the gRPC
// status codes, the only ones gRPC clients act on (gRFC A44).
var RetryConditions = []struct {
	On    RetryOn
	Name  string
	Token string
	GRPC  bool
}{
	{RetryConnectFailure, "ConnectFailure", "connect-failure", false},
	{RetryReset, "Reset", "reset", false},
	{RetryHTTP5xx, "HTTP5xx", "5xx", false},
	{RetryCancelled, "Cancelled", "cancelled", true},
	{RetryDeadlineExceeded, "DeadlineExceeded", "deadline-exceeded", true},
	{RetryInternal, "Internal", "internal", true},
	{RetryResourceExhausted, "ResourceExhausted", "resource-exhausted", true},
	{RetryUnavailable, "Unavailable", "unavailable", true},
}

// RetryPolicy is an upstream's retry policy (spec.retries), validated and
// with its defaults applied. It is comparable.
type RetryPolicy struct {
	On         RetryOn
	NumRetries uint32 // 1..4
	// PerTryTimeout bounds each attempt; 0 is none.
	PerTryTimeout time.Duration
	// BaseInterval and MaxInterval are the back-off, whole milliseconds,
	// BaseInterval ≤ MaxInterval.
	BaseInterval, MaxInterval time.Duration
	// BudgetPercent, when above 0, is the retry budget: retries under way
	// at most BudgetPercent % of the requests under way, or
	// BudgetMinConcurrency, whichever is more. 0 is no budget.
	BudgetPercent        uint32 // 0, or 1..100
	BudgetMinConcurrency uint32 // 0..10000
}

// Equal reports whether r and o are the same policy; nil is none.
func (r *RetryPolicy) Equal(o *RetryPolicy) bool {
	if r == nil || o == nil {
		return r == o
	}
	return *r == *o
}

// HasBudget reports whether r (nil: no policy) has a retry budget.
func (r *RetryPolicy) HasBudget() bool { return r != nil && r.BudgetPercent > 0 }
