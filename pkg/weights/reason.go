package weights

// Signal is the input a Reason comes from. The math never learns where a
// signal came from; explain uses the Signal to name the origin of each one.
type Signal uint8

const (
	// SignalNone: no signal failed, the endpoint is eligible.
	SignalNone Signal = iota
	// SignalScope: the endpoint is outside the topology scope of this computation.
	SignalScope
	// SignalAdmin: the administrative state an operator or a source set.
	SignalAdmin
	// SignalProbe: an active health check's verdict.
	SignalProbe
	// SignalCircuit: the passive circuit breaker.
	SignalCircuit
	// SignalOutlier: fleet outlier detection's ejection.
	SignalOutlier
)

// ProxyHealth is how an endpoint is published to a proxy that does its own
// health math (health adjustment Proxy): one of Envoy's EDS health statuses,
// or not at all.
type ProxyHealth uint8

const (
	// ProxyWithheld: the endpoint is left out of the assignment.
	ProxyWithheld ProxyHealth = iota
	// ProxyUnknown: published as UNKNOWN, which Envoy routes to.
	ProxyUnknown
	// ProxyHealthy: published as HEALTHY.
	ProxyHealthy
	// ProxyUnhealthy: published as UNHEALTHY, so the proxy's panic math
	// still sees it.
	ProxyUnhealthy
	// ProxyDraining: published as DRAINING.
	ProxyDraining
)

// classify is the one place that says what each reason means. The switch
// names every reason and has no default: a reason added without a case
// returns ok false, which the tests report.
func (r Reason) classify() (signal Signal, proxy ProxyHealth, ok bool) {
	switch r {
	case ReasonNone:
		// HEALTHY only when a probe said so; see ProxyHealth.
		return SignalNone, ProxyHealthy, true
	case ReasonOutOfScope:
		return SignalScope, ProxyWithheld, true
	case ReasonUnavailable:
		return SignalAdmin, ProxyWithheld, true
	case ReasonDraining:
		return SignalAdmin, ProxyDraining, true
	case ReasonProbeUnhealthy:
		return SignalProbe, ProxyUnhealthy, true
	case ReasonCircuitOpen:
		return SignalCircuit, ProxyUnhealthy, true
	case ReasonOutlierEjected:
		return SignalOutlier, ProxyUnhealthy, true
	}
	return SignalNone, ProxyWithheld, false
}

// Eligible reports whether the reason lets the endpoint take traffic
// outside panic: only ReasonNone does.
func (r Reason) Eligible() bool { return r == ReasonNone }

// Signal is the input the reason comes from.
func (r Reason) Signal() Signal {
	s, _, _ := r.classify()
	return s
}

// ProxyHealth is how an endpoint with this reason and probe verdict is
// published when the proxy does the health math. An eligible endpoint no
// probe has vouched for is UNKNOWN rather than HEALTHY. A reason nothing
// classifies is withheld, never published as healthy.
func (r Reason) ProxyHealth(p ProbeHealth) ProxyHealth {
	_, h, _ := r.classify()
	if h == ProxyHealthy && p != ProbeHealthy {
		return ProxyUnknown
	}
	return h
}

// Reasons is every reason, in declared order.
func Reasons() []Reason {
	out := make([]Reason, 0, reasonCount)
	for r := range reasonCount {
		out = append(out, r)
	}
	return out
}
