package server_test

import (
	"slices"
	"testing"
	"time"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
)

// One certificate reporting 10^12 successes on an endpoint that three
// other instances see failing does not mask it: the store keeps the flood
// at the per-instance cap, so the fleet's error ratio on the endpoint
// stays above errorPercent and it is ejected. The same reports with the
// flood counted as sent would drown the errors: nothing would be ejected.
func TestOneInstanceCannotMaskAFailingEndpoint(t *testing.T) {
	t.Parallel()
	const maxReq, claimed = 1000, 1_000_000_000_000
	s := serveTrustedLRSWith(t, loadreport.Config{MaxRequests: maxReq})
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		report(t, s.ca.dial(t, s.addr, s.cert(t, "b", "ledger")), id, failingOne())
	}
	report(t, s.ca.dial(t, s.addr, s.cert(t, "b", "ledger")), "flood", endpointStats("bench/svc-0000", "10.0.0.0", claimed, claimed, 0))

	r, _ := s.loads.Reports("bench/svc-0000", time.Now())
	if got := ejectedFrom(r, s.loads.Window()); !slices.Equal(got, []string{"10.0.0.0"}) {
		t.Errorf("with the flood capped, ejected %v, want 10.0.0.0", got)
	}
	i := slices.Index(r.Endpoints, loadreport.Endpoint{Address: "10.0.0.0", Port: 8080})
	flood := slices.IndexFunc(r.Reporters, func(rep loadreport.ReporterLoads) bool { return rep.Loads[i].Errors == 0 })
	if i < 0 || len(r.Reporters) != 4 || flood < 0 {
		t.Fatalf("reports = %+v, want the three failing instances and the flood", r.Reporters)
	}
	if kept := r.Reporters[flood].Loads[i]; kept != (loadreport.Load{Issued: maxReq, Successes: maxReq}) {
		t.Errorf("the flood kept %+v, want the cap %d", kept, maxReq)
	}
	if d := s.loads.Drops(); d.Capped != claimed-maxReq || d.CappedReports != 1 {
		t.Errorf("drops = %+v, want the flood's excess counted", d)
	}

	// the same reports, the flood counted as sent
	uncapped := loadreport.ClusterReports{Endpoints: r.Endpoints, Reporters: slices.Clone(r.Reporters)}
	uncapped.Reporters[flood].Loads = slices.Clone(r.Reporters[flood].Loads)
	uncapped.Reporters[flood].Loads[i] = loadreport.Load{Issued: claimed, Successes: claimed}
	sum := outlier.Summarize(uncapped, 20)
	e := sum.Endpoints[slices.IndexFunc(sum.Endpoints, func(e outlier.EndpointSummary) bool { return e.Address == "10.0.0.0" })]
	if 100*e.Errors >= 20*e.Requests {
		t.Fatalf("uncapped, 10.0.0.0 has %d errors in %d requests: the flood would not mask it, the test shows nothing", e.Errors, e.Requests)
	}
	if got := ejectedFrom(uncapped, s.loads.Window()); len(got) != 0 {
		t.Errorf("uncapped, %d errors in %d requests ejected %v", e.Errors, e.Requests, got)
	}
}
