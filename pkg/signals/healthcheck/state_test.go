package healthcheck

import (
	"testing"

	"poise.dev/poise/pkg/weights"
)

func TestStateThresholds(t *testing.T) {
	t.Parallel()
	const (
		U = weights.ProbeUnknown
		H = weights.ProbeHealthy
		X = weights.ProbeUnhealthy
	)
	for _, tc := range []struct {
		name    string
		results string // p: pass, f: failure
		want    []weights.ProbeHealth
		origin  string
	}{
		{"one pass judges a new endpoint Healthy", "p", []weights.ProbeHealth{H}, "active check by r1: 1 pass"},
		{"unhealthy after the threshold", "fff", []weights.ProbeHealth{U, U, X}, "active check by r1: 3 failures, last: refused"},
		{"a pass resets the failures", "ffpfff", []weights.ProbeHealth{U, U, H, H, H, X}, "active check by r1: 3 failures, last: refused"},
		{"healthy again after its threshold", "fffpp", []weights.ProbeHealth{U, U, X, X, H}, "active check by r1: 2 passes"},
		{"a failure resets the passes", "fffpfp", []weights.ProbeHealth{U, U, X, X, X, X}, "active check by r1: 3 failures, last: refused"},
		{"healthy stays healthy under fewer failures", "pffpff", []weights.ProbeHealth{H, H, H, H, H, H}, "active check by r1: 1 pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s state
			for i, r := range tc.results {
				f := ""
				if r == 'f' {
					f = "refused"
				}
				before := s.verdict
				changed := s.observe(f, 2, 3)
				if s.verdict != tc.want[i] || changed != (before != s.verdict) {
					t.Fatalf("after %q: verdict %v (changed %v), want %v", tc.results[:i+1], s.verdict, changed, tc.want[i])
				}
			}
			if got := s.origin("r1"); got != tc.origin {
				t.Errorf("origin %q, want %q", got, tc.origin)
			}
		})
	}
}
