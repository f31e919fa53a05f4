package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RetryCondition is a failure an attempt may be retried on (docs/retries.md).
// +kubebuilder:validation:Enum=ConnectFailure;Reset;HTTP5xx;Cancelled;DeadlineExceeded;Internal;ResourceExhausted;Unavailable
type RetryCondition string

const (
	// RetryOnConnectFailure: the connection to the endpoint could not be
	// made (Envoy connect-failure; a gRPC client never sends an attempt on
	// a connection it has not made).
	RetryOnConnectFailure RetryCondition = "ConnectFailure"
	// RetryOnReset: the endpoint reset or closed the stream before a
	// response began (Envoy reset).
	RetryOnReset RetryCondition = "Reset"
	// RetryOnHTTP5xx: an HTTP 5xx response, or none at all (Envoy 5xx).
	RetryOnHTTP5xx RetryCondition = "HTTP5xx"
	// The gRPC status codes a retry may follow: those of gRFC A44, which
	// Envoy and grpc-go both read from retry_on.
	RetryOnCancelled         RetryCondition = "Cancelled"
	RetryOnDeadlineExceeded  RetryCondition = "DeadlineExceeded"
	RetryOnInternal          RetryCondition = "Internal"
	RetryOnResourceExhausted RetryCondition = "ResourceExhausted"
	RetryOnUnavailable       RetryCondition = "Unavailable"
)

// Defaults and bounds of RetryPolicy. The kubebuilder markers must repeat them.
const (
	DefaultRetryNumRetries     int32 = 1
	MaxRetryNumRetries         int32 = 4
	MaxRetryConditions               = 8
	DefaultRetryBaseInterval         = 25 * time.Millisecond
	MaxRetryBaseInterval             = 10 * time.Second
	MaxRetryMaxInterval              = 5 * time.Minute
	MaxRetryPerTryTimeout            = time.Hour
	DefaultRetryBudgetPercent  int32 = 20
	DefaultRetryMinConcurrency int32 = 3
	MaxRetryMinConcurrency     int32 = 10000
)

// RetryPolicy is an Upstream's retry policy: which failures are retried,
// how often, how far apart, how long each attempt may take and how many
// retries may be under way at once (docs/retries.md).
type RetryPolicy struct {
	// retryOn lists the failures an attempt is retried on, each once.
	// gRPC clients act on the gRPC status codes only.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	RetryOn []RetryCondition `json:"retryOn"`

	// numRetries is how many times a request is retried at most, 1 to 4:
	// a request makes at most numRetries + 1 attempts.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4
	NumRetries *int32 `json:"numRetries,omitempty"`

	// perTryTimeout bounds each attempt (Envoy only: gRPC clients bound the
	// whole call by its deadline), from 1ms to 1h; a fraction of a
	// millisecond is dropped. Without it an attempt may take as long as the
	// request may.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('1h')",message="perTryTimeout must be from 1ms to 1h"
	PerTryTimeout *metav1.Duration `json:"perTryTimeout,omitempty"`

	// backoff spaces the retries out.
	// +optional
	Backoff *RetryBackoff `json:"backoff,omitempty"`

	// budget bounds the retries under way at once, across all of the
	// upstream's requests of one client (Envoy's retry budget). Without it
	// Envoy's default circuit breaker allows 3 retries at once.
	// +optional
	Budget *RetryBudget `json:"budget,omitempty"`
}

// RetryBackoff is the exponential back-off between retries: the n-th retry
// waits about baseInterval × 2ⁿ⁻¹, at most maxInterval, each client with
// its own jitter (docs/retries.md).
// +kubebuilder:validation:XValidation:rule="!has(self.baseInterval) || !has(self.maxInterval) || duration(self.maxInterval) >= duration(self.baseInterval)",message="maxInterval must not be below baseInterval"
type RetryBackoff struct {
	// baseInterval is the first retry's back-off, from 1ms to 10s; a
	// fraction of a millisecond is dropped.
	// +optional
	// +kubebuilder:default="25ms"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="baseInterval must be from 1ms to 10s"
	BaseInterval *metav1.Duration `json:"baseInterval,omitempty"`

	// maxInterval caps a back-off, from 1ms to 5m, not below baseInterval;
	// a fraction of a millisecond is dropped. Without it, 10 ×
	// baseInterval.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('5m')",message="maxInterval must be from 1ms to 5m"
	MaxInterval *metav1.Duration `json:"maxInterval,omitempty"`
}

// RetryBudget is Envoy's retry budget (the Cluster's
// circuit_breakers.thresholds[].retry_budget): retries under way at once
// may be at most percent of the requests under way, or minConcurrency,
// whichever is more. gRPC clients have no retry budget (docs/retries.md).
type RetryBudget struct {
	// percent is the share of the requests under way that may be retries
	// under way, 1 to 100.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`

	// minConcurrency is how many retries may be under way at once whatever
	// the share, 0 to 10000.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MinConcurrency *int32 `json:"minConcurrency,omitempty"`
}

// Default fills the unset fields of the retry policy with their defaults.
// maxInterval has none of its own: convert takes 10 × baseInterval.
func (r *RetryPolicy) Default() {
	if r.NumRetries == nil {
		r.NumRetries = new(DefaultRetryNumRetries)
	}
	if r.Backoff != nil && r.Backoff.BaseInterval == nil {
		r.Backoff.BaseInterval = &metav1.Duration{Duration: DefaultRetryBaseInterval}
	}
	if b := r.Budget; b != nil {
		if b.Percent == nil {
			b.Percent = new(DefaultRetryBudgetPercent)
		}
		if b.MinConcurrency == nil {
			b.MinConcurrency = new(DefaultRetryMinConcurrency)
		}
	}
}
