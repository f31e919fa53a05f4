package trafficmap

import (
	"fmt"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/weights"
)

// Severity grades a spill: the traffic a split sends beyond its first
// priority (under a client locality's class, beyond its first effective
// priority, the clients' own zone or region). The thresholds are the
// upstream's own: its overprovisioning factor f says a priority may lose
// 1 − 100/f of its capacity and keep all its traffic, and the same
// fraction of the traffic is the spill called headroom.
type Severity string

const (
	// SpillNone: the first priority carries everything.
	SpillNone Severity = "none"
	// SpillHeadroom: 0 < spill ≤ 1 − 100/f of the traffic (28.5714 % at
	// the default factor 140 %), the loss overprovisioning is set for
	// spilling by design. With f ≤ 100 % there is no headroom.
	SpillHeadroom Severity = "headroom"
	// SpillDegraded: more than the headroom, at most half the traffic.
	SpillDegraded Severity = "degraded"
	// SpillSevere: more than half the traffic leaves the first priority:
	// it keeps less than it sends away.
	SpillSevere Severity = "severe"
)

// Severities is every grade, mildest first.
func Severities() []Severity {
	return []Severity{SpillNone, SpillHeadroom, SpillDegraded, SpillSevere}
}

// spillSeverity grades spill millionths under overprovisioning factor
// opf (percent), comparing integers exactly: no threshold is rounded.
func spillSeverity(spill uint64, opf uint32) Severity {
	spill = min(spill, weights.Million)
	switch {
	case spill == 0:
		return SpillNone
	case 2*spill > weights.Million:
		return SpillSevere
	case opf > 100 && spill*uint64(opf) <= uint64(opf-100)*weights.Million:
		return SpillHeadroom
	}
	return SpillDegraded
}

// headroom is the largest spill graded SpillHeadroom under opf, in
// millionths (rounded down, as the grading compares exactly); 0 when
// opf ≤ 100.
func headroom(opf uint32) uint64 {
	if opf <= 100 {
		return 0
	}
	return uint64(opf-100) * weights.Million / uint64(opf)
}

// spillNote says how much spills, its grade and the thresholds it was
// graded by, for the upstream's notes.
func spillNote(spill uint64, sev Severity, first string, opf uint32) string {
	limits := fmt.Sprintf("no headroom at overprovisioning factor %d%%", opf)
	if h := headroom(opf); h > 0 {
		limits = fmt.Sprintf("up to %s (1 − 100/%d) is headroom", explain.Percent(h), opf)
	}
	return fmt.Sprintf("spill %s beyond %s is %s: %s, up to 50.0000%% degraded, above it severe", explain.Percent(spill), first, sev, limits)
}

// SpillKey is one grade of the page's key and the rule that gives it.
type SpillKey struct {
	Severity Severity
	Rule     string
}

// spillKeys is the key of every grade a spill can have.
func spillKeys() []SpillKey {
	return []SpillKey{
		{SpillHeadroom, "at most 1 − 100/f of the traffic"},
		{SpillDegraded, "more, at most 50 %"},
		{SpillSevere, "more than 50 %"},
	}
}
