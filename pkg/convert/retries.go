package convert

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// retries validates a defaulted spec.retries as its CRD schema and CEL rules
// do, and converts it; nil is no policy. protocol is the defaulted
// spec.protocol: a TCP upstream has no requests to retry.
func retries(errs field.ErrorList, p *field.Path, r *v1alpha1.RetryPolicy, protocol v1alpha1.Protocol) (*topology.RetryPolicy, field.ErrorList) {
	if r == nil {
		return nil, errs
	}
	if protocol == v1alpha1.ProtocolTCP {
		errs = append(errs, field.Forbidden(p, "retries need protocol HTTP1, HTTP2 or GRPC: a TCP upstream has no requests to retry"))
	}
	out := &topology.RetryPolicy{BaseInterval: v1alpha1.DefaultRetryBaseInterval}
	switch n := len(r.RetryOn); {
	case n == 0:
		errs = append(errs, field.Required(p.Child("retryOn"), "at least one condition to retry on"))
	case n > v1alpha1.MaxRetryConditions:
		errs = append(errs, field.TooMany(p.Child("retryOn"), n, v1alpha1.MaxRetryConditions))
	}
	for i, c := range r.RetryOn {
		bit := retryConditionBit(c)
		switch {
		case bit == 0:
			vals := make([]string, len(topology.RetryConditions))
			for j, rc := range topology.RetryConditions {
				vals[j] = rc.Name
			}
			errs = append(errs, field.NotSupported(p.Child("retryOn").Index(i), string(c), vals))
		case out.On&bit != 0:
			errs = append(errs, field.Duplicate(p.Child("retryOn").Index(i), string(c)))
		}
		out.On |= bit
	}
	errs = inRange(errs, p.Child("numRetries"), int64(*r.NumRetries), 1, int64(v1alpha1.MaxRetryNumRetries))
	out.NumRetries = uint32(max(*r.NumRetries, 0))
	if r.PerTryTimeout != nil {
		out.PerTryTimeout = r.PerTryTimeout.Duration
		errs = millis(errs, p.Child("perTryTimeout"), out.PerTryTimeout, time.Hour, "perTryTimeout must be from 1ms to 1h")
	}
	if b := r.Backoff; b != nil {
		bp := p.Child("backoff")
		out.BaseInterval = b.BaseInterval.Duration
		errs = millis(errs, bp.Child("baseInterval"), out.BaseInterval, v1alpha1.MaxRetryBaseInterval, "baseInterval must be from 1ms to 10s")
		if b.MaxInterval != nil {
			out.MaxInterval = b.MaxInterval.Duration
			n := len(errs)
			errs = millis(errs, bp.Child("maxInterval"), out.MaxInterval, v1alpha1.MaxRetryMaxInterval, "maxInterval must be from 1ms to 5m")
			// the apiserver runs the object's rule only when its fields pass
			if len(errs) == n && out.MaxInterval < out.BaseInterval {
				errs = append(errs, field.Invalid(bp.Child("maxInterval"), out.MaxInterval.String(), "maxInterval must not be below baseInterval"))
			}
		}
	}
	// Envoy reads these durations in whole milliseconds; gRPC would keep
	// a fraction Envoy drops, so Poise drops it for both (after the
	// checks, which judge the value as written, as the CRD's rules do)
	out.PerTryTimeout = out.PerTryTimeout.Truncate(time.Millisecond)
	out.BaseInterval = out.BaseInterval.Truncate(time.Millisecond)
	out.MaxInterval = out.MaxInterval.Truncate(time.Millisecond)
	if out.MaxInterval == 0 {
		// Envoy's and gRPC's own default (unmarshal_rds.go, generateRetryConfig)
		out.MaxInterval = 10 * out.BaseInterval
	}
	if b := r.Budget; b != nil {
		bp := p.Child("budget")
		errs = inRange(errs, bp.Child("percent"), int64(*b.Percent), 1, 100)
		errs = inRange(errs, bp.Child("minConcurrency"), int64(*b.MinConcurrency), 0, int64(v1alpha1.MaxRetryMinConcurrency))
		out.BudgetPercent = uint32(max(*b.Percent, 0))
		out.BudgetMinConcurrency = uint32(max(*b.MinConcurrency, 0))
	}
	return out, errs
}

// millis refuses a duration outside 1ms to most.
func millis(errs field.ErrorList, p *field.Path, d, most time.Duration, msg string) field.ErrorList {
	if d < time.Millisecond || d > most {
		errs = append(errs, field.Invalid(p, d.String(), msg))
	}
	return errs
}

func retryConditionBit(c v1alpha1.RetryCondition) topology.RetryOn {
	for _, rc := range topology.RetryConditions {
		if rc.Name == string(c) {
			return rc.On
		}
	}
	return 0
}
