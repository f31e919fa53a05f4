package weights

// Million is 100 % in the millionths every share, availability and load uses.
const Million = 1_000_000

// MaxWeight is the largest endpoint or locality weight: Envoy and gRPC carry
// weights as uint32.
const MaxWeight = 1<<32 - 1

// MaxPriority is the highest priority an endpoint may carry (Envoy's limit).
const MaxPriority = 127

// AdminState is the administrative state an operator set on an endpoint.
type AdminState uint8

const (
	Ready AdminState = iota
	Draining
	Unavailable
)

// ProbeHealth is the verdict of an active health check. Unknown is eligible.
type ProbeHealth uint8

const (
	ProbeUnknown ProbeHealth = iota
	ProbeHealthy
	ProbeUnhealthy
)

// CircuitState is the passive circuit breaker's permission.
type CircuitState uint8

const (
	CircuitClosed CircuitState = iota
	CircuitOpen
)

// Scope says whether an endpoint is in the topology scope of this computation.
type Scope uint8

const (
	ScopeIn Scope = iota
	ScopeOut
)

// PanicMode decides what a priority (or the whole upstream) in panic does.
type PanicMode uint8

const (
	// UseAll routes to every panic-eligible endpoint, ignoring health.
	UseAll PanicMode = iota
	// FailClosed drops the traffic of a priority in panic.
	FailClosed
)

// DrainingCapacity decides whether Draining endpoints count as configured capacity.
type DrainingCapacity uint8

const (
	ExcludeDraining DrainingCapacity = iota
	IncludeDraining
)

// Locality is a (region, zone, subZone) key.
type Locality struct {
	Region  string
	Zone    string
	SubZone string
}

// Compare orders localities bytewise by region, zone, then subZone.
func (l Locality) Compare(o Locality) int {
	if c := compareStrings(l.Region, o.Region); c != 0 {
		return c
	}
	if c := compareStrings(l.Zone, o.Zone); c != 0 {
		return c
	}
	return compareStrings(l.SubZone, o.SubZone)
}

func (l Locality) String() string {
	return l.Region + "/" + l.Zone + "/" + l.SubZone
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Endpoint is one candidate with its place in the hierarchy and its
// independent health signals. The zero value of each signal is the healthy one.
type Endpoint struct {
	Address        string
	Port           uint32
	Priority       uint32
	Locality       Locality
	LocalityWeight uint64 // 1..MaxWeight, the locality's desired share in its priority
	Weight         uint64 // 1..MaxWeight, capacity inside the locality
	Admin          AdminState
	Probe          ProbeHealth
	Circuit        CircuitState
	Ejected        bool
	Scope          Scope
}

// Policy holds the per-upstream knobs of the computation.
type Policy struct {
	OverprovisioningFactor uint32 // percent, 1..1000
	PanicThreshold         uint32 // percent, 0..100; 0 disables panic
	PanicMode              PanicMode
	DrainingCapacity       DrainingCapacity
}

// DefaultPolicy is the policy of an upstream that sets nothing.
func DefaultPolicy() Policy {
	return Policy{OverprovisioningFactor: 140, PanicThreshold: 50}
}

// Outcome says whether the upstream routes at all.
type Outcome uint8

const (
	// Routable: loads and shares sum to Million (less any FailClosed drop).
	Routable Outcome = iota
	// NoCapacity: nothing can be selected; every share is 0.
	NoCapacity
	// PanicRejected: total panic under FailClosed; all traffic is dropped.
	PanicRejected
)

// Reason is why an endpoint is not eligible; ReasonNone means it is.
// The first failing reason is reported, in the declared order. What a reason
// means to the rest of the control plane (its signal, how a proxy is told)
// is classified once, in reason.go.
type Reason uint8

const (
	ReasonNone Reason = iota
	ReasonOutOfScope
	ReasonUnavailable
	ReasonDraining
	ReasonProbeUnhealthy
	ReasonCircuitOpen
	ReasonOutlierEjected

	reasonCount // keep last: the tests iterate every reason below it
)

// PriorityResult is stage 1 for one priority.
type PriorityResult struct {
	Priority            uint32
	ConfiguredWeight    uint64 // T_p
	EligibleWeight      uint64 // E_p
	PanicEligibleWeight uint64 // P_p
	Health              uint64 // health_p, millionths
	Load                uint64 // load_p, millionths
	InPanic             bool
	Dropped             uint64 // part of Load dropped by FailClosed
	// Localities indexes Result.Localities: [First, First+Count).
	FirstLocality, LocalityCount int
}

// LocalityResult is stage 2 for one (priority, locality) group.
type LocalityResult struct {
	Priority         uint32
	Locality         Locality
	LocalityWeight   uint64
	ConfiguredWeight uint64 // T_L
	SelectableWeight uint64 // S_L
	Availability     uint64 // avail_L, millionths
	EffectiveWeight  uint64 // eff_L = LocalityWeight × Availability
	ShareInPriority  uint64 // millionths of its priority
	Traffic          uint64 // millionths of all traffic
	// Endpoints indexes Result.Endpoints: [First, First+Count).
	FirstEndpoint, EndpointCount int
}

// EndpointResult is stage 3 for one endpoint, in canonical order.
type EndpointResult struct {
	Index         int // position in the input slice
	Configured    bool
	Eligible      bool
	PanicEligible bool
	Selectable    bool
	Reason        Reason
	Share         uint64 // millionths of all traffic
}

// Result is the whole derivation for one upstream. Priorities, localities
// and endpoints are in canonical order (docs/weights.md, "Ordering"), so
// the same input in any order gives an identical Result apart from Index.
type Result struct {
	Outcome           Outcome
	NTA               uint64 // normalized total availability, millionths
	TotalPanic        bool
	DroppedMillionths uint64
	Priorities        []PriorityResult
	Localities        []LocalityResult
	Endpoints         []EndpointResult
}
