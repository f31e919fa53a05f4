package convert_test

import (
	"reflect"
	"testing"
	"time"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

// withRetries sets spec.retries on Unavailable, then lets f change it.
func withRetries(f func(*v1alpha1.RetryPolicy)) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		r := &v1alpha1.RetryPolicy{RetryOn: []v1alpha1.RetryCondition{v1alpha1.RetryOnUnavailable}}
		if f != nil {
			f(r)
		}
		u.Spec.Retries = r
	}
}

// TestRetries: an empty policy takes the documented defaults (one retry,
// 25 ms back-off up to 10 ×, no per-try timeout, no budget), set fields are
// kept, and every bound is refused naming its field.
func TestRetries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Upstream)
		want   *topology.RetryPolicy
	}{
		{"none", func(*v1alpha1.Upstream) {}, nil},
		{"defaults", withRetries(nil), &topology.RetryPolicy{On: topology.RetryUnavailable, NumRetries: 1,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond}},
		{"an empty backoff and budget", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.Backoff, r.Budget = &v1alpha1.RetryBackoff{}, &v1alpha1.RetryBudget{}
		}), &topology.RetryPolicy{On: topology.RetryUnavailable, NumRetries: 1,
			BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, BudgetPercent: 20, BudgetMinConcurrency: 3}},
		{"every field at its upper bound", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.RetryOn = []v1alpha1.RetryCondition{"Unavailable", "ConnectFailure", "Reset", "HTTP5xx", "Cancelled", "DeadlineExceeded", "Internal", "ResourceExhausted"}
			r.NumRetries, r.PerTryTimeout = new(int32(4)), dur(time.Hour)
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(10 * time.Second), MaxInterval: dur(5 * time.Minute)}
			r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(100)), MinConcurrency: new(int32(10000))}
		}), &topology.RetryPolicy{On: 0xff, NumRetries: 4, PerTryTimeout: time.Hour,
			BaseInterval: 10 * time.Second, MaxInterval: 5 * time.Minute, BudgetPercent: 100, BudgetMinConcurrency: 10000}},
		{"fractions of a millisecond are dropped", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.PerTryTimeout = dur(2500 * time.Microsecond)
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(1500 * time.Microsecond), MaxInterval: dur(1999 * time.Microsecond)}
		}), &topology.RetryPolicy{On: topology.RetryUnavailable, NumRetries: 1, PerTryTimeout: 2 * time.Millisecond,
			BaseInterval: time.Millisecond, MaxInterval: time.Millisecond}},
		{"without maxInterval, 10 × the truncated baseInterval", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(7*time.Millisecond + 900*time.Microsecond)}
		}), &topology.RetryPolicy{On: topology.RetryUnavailable, NumRetries: 1, BaseInterval: 7 * time.Millisecond, MaxInterval: 70 * time.Millisecond}},
		{"every field at its lower bound", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.RetryOn = []v1alpha1.RetryCondition{"ConnectFailure"}
			r.PerTryTimeout = dur(time.Millisecond)
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(time.Millisecond), MaxInterval: dur(time.Millisecond)}
			r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(1)), MinConcurrency: new(int32(0))}
		}), &topology.RetryPolicy{On: topology.RetryConnectFailure, NumRetries: 1, PerTryTimeout: time.Millisecond,
			BaseInterval: time.Millisecond, MaxInterval: time.Millisecond, BudgetPercent: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			tc.mutate(in)
			got, errs := convert.Upstream(in)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if !reflect.DeepEqual(got.Retries, tc.want) {
				t.Errorf("got %+v\nwant %+v", got.Retries, tc.want)
			}
		})
	}

	// each case is refused naming one field
	for _, tc := range []struct {
		name, field string
		mutate      func(*v1alpha1.Upstream)
	}{
		{"no condition", "spec.retries.retryOn", withRetries(func(r *v1alpha1.RetryPolicy) { r.RetryOn = nil })},
		{"an unknown condition", "spec.retries.retryOn[1]", withRetries(func(r *v1alpha1.RetryPolicy) { r.RetryOn = []v1alpha1.RetryCondition{"Unavailable", "Sometimes"} })},
		{"a condition twice", "spec.retries.retryOn[2]", withRetries(func(r *v1alpha1.RetryPolicy) { r.RetryOn = []v1alpha1.RetryCondition{"Reset", "Internal", "Reset"} })},
		{"numRetries 0", "spec.retries.numRetries", withRetries(func(r *v1alpha1.RetryPolicy) { r.NumRetries = new(int32(0)) })},
		{"numRetries 5", "spec.retries.numRetries", withRetries(func(r *v1alpha1.RetryPolicy) { r.NumRetries = new(int32(5)) })},
		{"perTryTimeout 0s", "spec.retries.perTryTimeout", withRetries(func(r *v1alpha1.RetryPolicy) { r.PerTryTimeout = dur(0) })},
		{"perTryTimeout 0.5ms", "spec.retries.perTryTimeout", withRetries(func(r *v1alpha1.RetryPolicy) { r.PerTryTimeout = dur(500 * time.Microsecond) })},
		{"perTryTimeout above 1h", "spec.retries.perTryTimeout", withRetries(func(r *v1alpha1.RetryPolicy) { r.PerTryTimeout = dur(time.Hour + time.Millisecond) })},
		{"baseInterval 0s", "spec.retries.backoff.baseInterval", withRetries(func(r *v1alpha1.RetryPolicy) { r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(0)} })},
		{"baseInterval above 10s", "spec.retries.backoff.baseInterval", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(11 * time.Second), MaxInterval: dur(time.Minute)}
		})},
		{"maxInterval below baseInterval", "spec.retries.backoff.maxInterval", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{MaxInterval: dur(24 * time.Millisecond)}
		})},
		{"maxInterval above 5m", "spec.retries.backoff.maxInterval", withRetries(func(r *v1alpha1.RetryPolicy) { r.Backoff = &v1alpha1.RetryBackoff{MaxInterval: dur(6 * time.Minute)} })},
		{"maxInterval below baseInterval by a fraction of a millisecond", "spec.retries.backoff.maxInterval", withRetries(func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: dur(1900 * time.Microsecond), MaxInterval: dur(1500 * time.Microsecond)}
		})},
		{"budget percent 0", "spec.retries.budget.percent", withRetries(func(r *v1alpha1.RetryPolicy) { r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(0))} })},
		{"budget percent 101", "spec.retries.budget.percent", withRetries(func(r *v1alpha1.RetryPolicy) { r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(101))} })},
		{"budget minConcurrency 10001", "spec.retries.budget.minConcurrency", withRetries(func(r *v1alpha1.RetryPolicy) { r.Budget = &v1alpha1.RetryBudget{MinConcurrency: new(int32(10001))} })},
		{"protocol TCP", "spec.retries", func(u *v1alpha1.Upstream) {
			withRetries(nil)(u)
			u.Spec.Protocol = v1alpha1.ProtocolTCP
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantRefused(t, tc.mutate, []string{tc.field}) })
	}
}

// wantRefused converts a valid Upstream changed by mutate and requires
// errors naming exactly the fields want.
func wantRefused(t *testing.T, mutate func(*v1alpha1.Upstream), want []string) {
	t.Helper()
	in := validUpstream()
	mutate(in)
	if _, errs := convert.Upstream(in); !reflect.DeepEqual(fields(errs), want) {
		t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), want, errs)
	}
}
