package weights

var (
	adminNames   = [...]string{Ready: "Ready", Draining: "Draining", Unavailable: "Unavailable"}
	probeNames   = [...]string{ProbeUnknown: "Unknown", ProbeHealthy: "Healthy", ProbeUnhealthy: "Unhealthy"}
	circuitNames = [...]string{CircuitClosed: "Closed", CircuitOpen: "Open"}
	scopeNames   = [...]string{ScopeIn: "In", ScopeOut: "Out"}
	panicNames   = [...]string{UseAll: "UseAll", FailClosed: "FailClosed"}
	drainNames   = [...]string{ExcludeDraining: "Exclude", IncludeDraining: "Include"}
	outcomeNames = [...]string{Routable: "Routable", NoCapacity: "NoCapacity", PanicRejected: "PanicRejected"}
	reasonNames  = [...]string{
		ReasonNone: "Eligible", ReasonOutOfScope: "OutOfScope", ReasonUnavailable: "Unavailable",
		ReasonDraining: "Draining", ReasonProbeUnhealthy: "ProbeUnhealthy",
		ReasonCircuitOpen: "CircuitOpen", ReasonOutlierEjected: "OutlierEjected",
	}
	signalNames = [...]string{
		SignalNone: "None", SignalScope: "Scope", SignalAdmin: "Admin",
		SignalProbe: "Probe", SignalCircuit: "Circuit", SignalOutlier: "Outlier",
	}
)

func name(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return "Invalid"
}

func (s AdminState) String() string       { return name(adminNames[:], int(s)) }
func (s ProbeHealth) String() string      { return name(probeNames[:], int(s)) }
func (s CircuitState) String() string     { return name(circuitNames[:], int(s)) }
func (s Scope) String() string            { return name(scopeNames[:], int(s)) }
func (m PanicMode) String() string        { return name(panicNames[:], int(m)) }
func (d DrainingCapacity) String() string { return name(drainNames[:], int(d)) }
func (o Outcome) String() string          { return name(outcomeNames[:], int(o)) }
func (r Reason) String() string           { return name(reasonNames[:], int(r)) }
func (s Signal) String() string           { return name(signalNames[:], int(s)) }
