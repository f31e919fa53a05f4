package healthcheck

import (
	"fmt"

	"poise.dev/poise/pkg/weights"
)

// state is one endpoint's verdict and its counts of consecutive results.
type state struct {
	verdict  weights.ProbeHealth
	passes   uint32
	failures uint32
	last     string // why the last failed check failed
	// the evidence of the last change of verdict, for its origin
	edgeCount uint32
	edgeLast  string
}

// observe records one result ("" a pass, else why it failed) and reports
// whether the verdict changed. From Unknown one pass is Healthy (as in Envoy at
// startup); every other edge needs its threshold of consecutive results.
func (s *state) observe(failure string, healthyThreshold, unhealthyThreshold uint32) bool {
	healthyThreshold, unhealthyThreshold = max(healthyThreshold, 1), max(unhealthyThreshold, 1)
	before := s.verdict
	if failure == "" {
		s.failures = 0
		if s.passes < healthyThreshold { // saturates: bounded and enough to decide
			s.passes++
		}
		if s.verdict == weights.ProbeUnknown || (s.verdict == weights.ProbeUnhealthy && s.passes >= healthyThreshold) {
			s.verdict = weights.ProbeHealthy
		}
	} else {
		s.passes = 0
		s.last = failure
		if s.failures < unhealthyThreshold {
			s.failures++
		}
		if s.failures >= unhealthyThreshold {
			s.verdict = weights.ProbeUnhealthy
		}
	}
	if s.verdict == before {
		return false
	}
	s.edgeCount, s.edgeLast = s.passes, ""
	if s.verdict == weights.ProbeUnhealthy {
		s.edgeCount, s.edgeLast = s.failures, s.last
	}
	return true
}

// origin says who decided the verdict and on what evidence, as of the change
// that made it (later results that keep it do not move the origin, so they
// change nothing downstream).
func (s *state) origin(checker string) string {
	switch s.verdict {
	case weights.ProbeHealthy:
		return fmt.Sprintf("active check by %s: %s", checker, plural(s.edgeCount, "pass", "passes"))
	case weights.ProbeUnhealthy:
		return fmt.Sprintf("active check by %s: %s, last: %s", checker, plural(s.edgeCount, "failure", "failures"), s.edgeLast)
	}
	return ""
}

func plural(n uint32, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
