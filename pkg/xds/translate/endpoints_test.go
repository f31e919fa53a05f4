package translate

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/weights"
)

// TestDelegatedHealthOfEveryReason pins the EDS status a proxy doing its own
// math receives for every reason and probe verdict; a new reason fails here
// until its row says how it is published.
func TestDelegatedHealthOfEveryReason(t *testing.T) {
	const withheld = core.HealthStatus(-1)
	want := map[weights.Reason][3]core.HealthStatus{ // by probe: Unknown, Healthy, Unhealthy
		weights.ReasonNone:           {core.HealthStatus_UNKNOWN, core.HealthStatus_HEALTHY, core.HealthStatus_UNKNOWN},
		weights.ReasonOutOfScope:     {withheld, withheld, withheld},
		weights.ReasonUnavailable:    {withheld, withheld, withheld},
		weights.ReasonDraining:       {core.HealthStatus_DRAINING, core.HealthStatus_DRAINING, core.HealthStatus_DRAINING},
		weights.ReasonProbeUnhealthy: {core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY},
		weights.ReasonCircuitOpen:    {core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY},
		weights.ReasonOutlierEjected: {core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY, core.HealthStatus_UNHEALTHY},
	}
	for _, r := range weights.Reasons() {
		row, ok := want[r]
		if !ok {
			t.Errorf("reason %d (%s): add the EDS status it is published with to this table", r, r)
			continue
		}
		for p, w := range row {
			probe := weights.ProbeHealth(p)
			got, published := delegatedHealth(weights.EndpointResult{Reason: r}, weights.Endpoint{Probe: probe})
			if !published {
				got = withheld
			}
			if got != w {
				t.Errorf("reason %s, probe %s: published as %v, want %v", r, probe, got, w)
			}
		}
	}
}
