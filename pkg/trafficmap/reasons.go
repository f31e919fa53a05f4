package trafficmap

import (
	"strings"
	"unicode"

	"poise.dev/poise/pkg/weights"
)

// ReasonKey is one entry of the page's key: a reason an endpoint is not
// eligible, the signal it comes from and the class it is drawn with. The
// key lists every reason of weights.Reasons but Eligible, so a reason
// added there is drawn and keyed without a change here (the stylesheet
// gives each its colour; a test fails while one has none).
type ReasonKey struct {
	Reason string
	Signal string
	Class  string
}

// reasonKeys is the key of every ineligible reason, in declared order.
func reasonKeys() []ReasonKey {
	var out []ReasonKey
	for _, r := range weights.Reasons() {
		if r.Eligible() {
			continue
		}
		out = append(out, ReasonKey{Reason: r.String(), Signal: signalName(r), Class: reasonClass(r)})
	}
	return out
}

// reasonsByName finds a reason by the name explain prints.
func reasonsByName() map[string]weights.Reason {
	m := map[string]weights.Reason{}
	for _, r := range weights.Reasons() {
		m[r.String()] = r
	}
	return m
}

// signalName is the reason's signal in lower case: probe, circuit, …
func signalName(r weights.Reason) string { return strings.ToLower(r.Signal().String()) }

// reasonClass is the CSS class of an endpoint with reason r and of its key:
// reason- and the name in kebab case (ProbeUnhealthy → reason-probe-unhealthy).
func reasonClass(r weights.Reason) string {
	var b strings.Builder
	b.WriteString("reason")
	for _, c := range r.String() {
		if unicode.IsUpper(c) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
