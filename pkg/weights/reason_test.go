package weights

import "testing"

// Every reason has a name and a classification: a reason added to the
// const block without a case in classify fails here, before it can be
// published as something it is not.
func TestEveryReasonIsClassified(t *testing.T) {
	t.Parallel()
	if got := len(Reasons()); got != int(reasonCount) {
		t.Fatalf("Reasons() has %d reasons, want %d", got, reasonCount)
	}
	for _, r := range Reasons() {
		if r.String() == "Invalid" {
			t.Errorf("reason %d has no name in reasonNames", r)
		}
		if _, _, ok := r.classify(); !ok {
			t.Errorf("reason %d (%s) has no case in classify", r, r)
		}
		if s := r.Signal(); s.String() == "Invalid" {
			t.Errorf("reason %s: signal %d has no name in signalNames", r, s)
		}
	}
	if _, _, ok := reasonCount.classify(); ok {
		t.Errorf("classify accepts reasonCount, which is no reason")
	}
}

// The classification agrees with eligibility, the one place the signals are
// read: over every endpoint state, the reported reason's Signal is a signal
// that failed, Eligible is eligibility's verdict, and every reason occurs.
func TestReasonClassificationAgreesWithEligibility(t *testing.T) {
	t.Parallel()
	seen := map[Reason]bool{}
	for _, scope := range []Scope{ScopeIn, ScopeOut} {
		for _, admin := range []AdminState{Ready, Draining, Unavailable} {
			for _, probe := range []ProbeHealth{ProbeUnknown, ProbeHealthy, ProbeUnhealthy} {
				for _, circuit := range []CircuitState{CircuitClosed, CircuitOpen} {
					for _, ejected := range []bool{false, true} {
						for _, drain := range []DrainingCapacity{ExcludeDraining, IncludeDraining} {
							e := Endpoint{Scope: scope, Admin: admin, Probe: probe, Circuit: circuit, Ejected: ejected}
							_, eligible, _, r := eligibility(&e, Policy{DrainingCapacity: drain})
							seen[r] = true
							if r.Eligible() != eligible {
								t.Errorf("%+v: %s.Eligible() = %v, eligibility says %v", e, r, r.Eligible(), eligible)
							}
							failed := map[Signal]bool{
								SignalNone:    r == ReasonNone,
								SignalScope:   scope != ScopeIn,
								SignalAdmin:   admin != Ready,
								SignalProbe:   probe == ProbeUnhealthy,
								SignalCircuit: circuit == CircuitOpen,
								SignalOutlier: ejected,
							}
							if !failed[r.Signal()] {
								t.Errorf("%+v: reason %s has signal %d, which did not fail", e, r, r.Signal())
							}
						}
					}
				}
			}
		}
	}
	for _, r := range Reasons() {
		if !seen[r] {
			t.Errorf("no endpoint state gives reason %d (%s)", r, r)
		}
	}
}

// A proxy doing its own math is told HEALTHY only for an eligible endpoint
// a probe vouched for, and never about one out of scope or Unavailable.
func TestReasonProxyHealth(t *testing.T) {
	t.Parallel()
	want := map[Reason][3]ProxyHealth{ // by probe: Unknown, Healthy, Unhealthy
		ReasonNone:           {ProxyUnknown, ProxyHealthy, ProxyUnknown},
		ReasonOutOfScope:     {ProxyWithheld, ProxyWithheld, ProxyWithheld},
		ReasonUnavailable:    {ProxyWithheld, ProxyWithheld, ProxyWithheld},
		ReasonDraining:       {ProxyDraining, ProxyDraining, ProxyDraining},
		ReasonProbeUnhealthy: {ProxyUnhealthy, ProxyUnhealthy, ProxyUnhealthy},
		ReasonCircuitOpen:    {ProxyUnhealthy, ProxyUnhealthy, ProxyUnhealthy},
		ReasonOutlierEjected: {ProxyUnhealthy, ProxyUnhealthy, ProxyUnhealthy},
	}
	for _, r := range Reasons() {
		w, ok := want[r]
		if !ok {
			t.Errorf("reason %d (%s): add how a proxy is told about it to this table", r, r)
			continue
		}
		for p, h := range w {
			if got := r.ProxyHealth(ProbeHealth(p)); got != h {
				t.Errorf("%s.ProxyHealth(%s) = %d, want %d", r, ProbeHealth(p), got, h)
			}
		}
	}
}
