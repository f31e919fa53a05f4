package explain

import (
	"fmt"
	"strings"
	"time"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
)

// RouteLoads is what the Envoys of the spatial listener reported for the
// domain over LRS, over the load-report window: requests by client region
// and replica region, and the share that crossed regions. Only a running
// control plane has them (/debug/explain-route); explain-route on manifest
// files has no reports.
type RouteLoads struct {
	// Reporting: the domain has spec.loadReporting. Without it the domain's
	// clusters report nothing and the rest is empty.
	Reporting bool   `json:"reporting"`
	Window    string `json:"window"`
	// Requests by client region, then replica region (at most 32 client
	// regions named, the rest as ~other; ~none for clients without one).
	Requests    []loadreport.SpatialRequests `json:"requests"`
	Total       uint64                       `json:"total"`
	CrossRegion uint64                       `json:"crossRegion"`
	// CrossRegionShare is CrossRegion over the requests of clients with a
	// known region, 0 to 1; absent when there are none.
	CrossRegionShare *float64 `json:"crossRegionShare,omitempty"`
	Reporters        int      `json:"reporters"`
}

// AddLoads adds to r the loads of its domain st over window (the store's
// SpatialDomain answer; nil when it has none) and a step that says them.
func AddLoads(r *RouteReport, st *topology.SpatialState, l *loadreport.SpatialLoad, window time.Duration) {
	rl := &RouteLoads{Window: window.String(), Requests: []loadreport.SpatialRequests{}}
	r.Loads = rl
	if st.Domain.LoadReportInterval <= 0 {
		r.Steps = append(r.Steps, "loads: not reported (the SpatialDomain has no spec.loadReporting)")
		return
	}
	rl.Reporting = true
	if l != nil && l.Domain == st.Domain.Key.String() {
		rl.Requests, rl.Total, rl.CrossRegion, rl.CrossRegionShare, rl.Reporters = l.Requests, l.Total, l.CrossRegion, l.CrossRegionShare, l.Reporters
	}
	if rl.Total == 0 {
		r.Steps = append(r.Steps, fmt.Sprintf("loads: no requests reported in the last %s", rl.Window))
		return
	}
	cells := make([]string, len(rl.Requests))
	for i, c := range rl.Requests {
		cells[i] = fmt.Sprintf("%s→%s %d", c.ClientRegion, c.ReplicaRegion, c.Requests)
	}
	share := "no client with a known region"
	if rl.CrossRegionShare != nil {
		share = fmt.Sprintf("cross-region %.1f %% (%d)", *rl.CrossRegionShare*100, rl.CrossRegion)
	}
	r.Steps = append(r.Steps, fmt.Sprintf("loads: last %s, %d client(s), %d requests by client→replica region: %s; %s",
		rl.Window, rl.Reporters, rl.Total, strings.Join(cells, ", "), share))
}
