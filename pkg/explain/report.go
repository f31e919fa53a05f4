package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Report is the explanation of a snapshot. Its JSON field names are a
// stable interface documented in docs/explain.md.
type Report struct {
	Revision uint64 `json:"revision"`
	// From and Demand are the client locality and the demand given
	// (--from, --demand, or the query); absent when no locality is given.
	From      *From         `json:"from,omitempty"`
	Demand    []DemandEntry `json:"demand,omitempty"`
	Upstreams []Upstream    `json:"upstreams"`
	// Orphans are objects whose upstream does not exist.
	Orphans []string `json:"orphans,omitempty"`
	// DefaultExportTo is the rule of the objects without spec.exportTo the
	// report resolved visibility with (--default-export-to, "*" unless
	// given); absent when it resolved none (see ResolveVisibility).
	DefaultExportTo string `json:"defaultExportTo,omitempty"`
	// Audience is the client readability is judged for (--client-namespace,
	// --client-anonymous), and SpatialDomains, with it, who may read each
	// SpatialDomain and whether that client may.
	Audience       *Audience                 `json:"audience,omitempty"`
	SpatialDomains []SpatialDomainVisibility `json:"spatialDomains,omitempty"`
}

// Upstream explains one upstream. Figures named *Millionths, health,
// availability, load, share and traffic are millionths (1000000 = 100 %).
type Upstream struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Policy    Policy `json:"policy"`
	// SplitBy says whose math the published split follows: "ControlPlane"
	// (these figures, exactly) or "Proxy" (Envoy applies its own math to
	// the published topology; these figures are what the control plane would do).
	SplitBy string `json:"splitBy"`
	// LoadBalancing says, per client kind, how the loadBalancing policy is
	// published and whether the figures below hold exactly or within a bound.
	LoadBalancing LoadBalancing `json:"loadBalancing"`
	// Affinity is the client-locality affinity in force and what set it.
	Affinity Affinity `json:"affinity"`
	// HealthCheck is the upstream's active health check (spec.healthCheck),
	// when it has one: its verdicts are the probe signals whose origin
	// starts "active check by".
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// Retries is the upstream's retry policy (spec.retries), when it has
	// one, and what each client kind does of it.
	Retries *Retries `json:"retries,omitempty"`
	// Visibility is the upstream's spec.exportTo, when it sets one: the
	// namespaces whose clients may read it. Absent, the control plane's
	// default applies; a report that resolves visibility
	// (ResolveVisibility) has it for every upstream, from either.
	Visibility *Visibility `json:"visibility,omitempty"`
	// Access, present when the report judges readability for a client
	// (Report.Audience), says whether it may read the upstream, and why.
	Access *Access `json:"access,omitempty"`
	// Split is the None split: what every client receives without
	// localityAffinity. Embedded, its fields are the upstream's own in JSON.
	Split
	// Class, present when a client locality is given (--from, ?from=), is
	// what the clients of that locality receive and how it was derived.
	Class *Class `json:"class,omitempty"`
	// UnmatchedLocalities are the Locality objects of the upstream that
	// place no endpoint set: their weight applies to nothing. Manifest files
	// refuse them (unless the upstream imports a Service); a cluster's
	// objects may have them while endpoints are yet to come.
	UnmatchedLocalities []UnmatchedLocality `json:"unmatchedLocalities,omitempty"`
}

// UnmatchedLocality is a Locality object that matches no endpoints.
type UnmatchedLocality struct {
	// Locality is "Locality ns/name".
	Locality       string `json:"locality"`
	Priority       uint32 `json:"priority"`
	Region         string `json:"region"`
	Zone           string `json:"zone"`
	SubZone        string `json:"subZone"`
	LocalityWeight uint64 `json:"localityWeight"`
}

// unmatchedLocalities lists the Locality objects of u's groups without
// endpoint sets, in group order.
func unmatchedLocalities(u *topology.UpstreamState) []UnmatchedLocality {
	var out []UnmatchedLocality
	for _, g := range u.Groups {
		if len(g.Sets) > 0 {
			continue
		}
		for _, k := range g.LocalityObjects {
			out = append(out, UnmatchedLocality{Locality: "Locality " + k.String(), Priority: g.Priority,
				Region: g.Locality.Region, Zone: g.Locality.Zone, SubZone: g.Locality.SubZone, LocalityWeight: g.LocalityWeight})
		}
	}
	return out
}

// Split is one priority → locality → endpoint derivation.
type Split struct {
	Outcome                     string      `json:"outcome"`
	NormalizedTotalAvailability uint64      `json:"normalizedTotalAvailability"`
	TotalPanic                  bool        `json:"totalPanic"`
	DroppedMillionths           uint64      `json:"droppedMillionths"`
	Priorities                  []Priority  `json:"priorities"`
	Simulation                  *Simulation `json:"simulation,omitempty"`
}

// HealthCheck is an upstream's active health check, as configured.
type HealthCheck struct {
	Type               string `json:"type"`
	Target             string `json:"target"` // what is asked: the gRPC service, the HTTP request, a TCP connect
	Port               uint32 `json:"port,omitempty"`
	IntervalMs         int64  `json:"intervalMs"`
	TimeoutMs          int64  `json:"timeoutMs"`
	UnhealthyThreshold uint32 `json:"unhealthyThreshold"`
	HealthyThreshold   uint32 `json:"healthyThreshold"`
	JitterPercent      uint32 `json:"jitterPercent"`
}

func healthCheckOf(u *topology.Upstream) *HealthCheck {
	hc := u.HealthCheck
	if hc == nil {
		return nil
	}
	target := "connect"
	switch hc.Type {
	case "GRPC":
		target = fmt.Sprintf("grpc.health.v1 service %q", hc.GRPCService)
	case "HTTP":
		var st []string
		for _, r := range hc.ExpectedStatuses {
			if r.Start == r.End {
				st = append(st, strconv.Itoa(r.Start))
			} else {
				st = append(st, fmt.Sprintf("%d-%d", r.Start, r.End))
			}
		}
		target = fmt.Sprintf("GET %s expecting %s", hc.HTTPPath, strings.Join(st, ", "))
		if hc.HTTPHost != "" {
			target += " (Host " + hc.HTTPHost + ")"
		}
	}
	return &HealthCheck{Type: hc.Type, Target: target, Port: hc.Port, IntervalMs: hc.Interval.Milliseconds(), TimeoutMs: hc.Timeout.Milliseconds(),
		UnhealthyThreshold: hc.UnhealthyThreshold, HealthyThreshold: hc.HealthyThreshold, JitterPercent: hc.JitterPercent}
}

// Visibility is the exportTo rule of an upstream or SpatialDomain.
type Visibility struct {
	// All: exported to every namespace ("*"), and to clients of none.
	All bool `json:"all"`
	// Namespaces are the namespaces it is exported to, sorted, with "."
	// resolved to the object's own; empty with All.
	Namespaces []string `json:"namespaces"`
	// Origin is what set the rule: OriginSpec (its own spec.exportTo) or
	// OriginDefault (the control plane's default).
	Origin string `json:"origin"`
}

func visibilityOf(u *topology.Upstream) *Visibility {
	e := u.ExportTo
	if !e.Set {
		return nil
	}
	ns := e.Namespaces()
	if ns == nil {
		ns = []string{}
	}
	return &Visibility{All: e.All, Namespaces: ns, Origin: OriginSpec}
}

// Affinity is an upstream's client-locality affinity (docs/weights.md,
// "Client-locality affinity").
type Affinity struct {
	Mode            string   `json:"mode"`
	FailoverRegions []string `json:"failoverRegions"`
	// Origin is what set the mode: "spec.localityAffinity", an imported
	// Service's "Service NS/NAME trafficDistribution VALUE", or
	// AffinityDefault when neither asks for one.
	Origin string `json:"origin"`
}

// AffinityDefault is the Origin of the None mode nothing asked for.
const AffinityDefault = "default"

func affinityOf(u *topology.Upstream) Affinity {
	out := Affinity{Mode: u.ModeOf().String(), FailoverRegions: []string{}, Origin: AffinityDefault}
	if a := u.Affinity; a != nil {
		out.FailoverRegions = append(out.FailoverRegions, a.FailoverRegions...)
		out.Origin = a.Origin
	}
	return out
}

// Policy is the upstream's computation knobs.
type Policy struct {
	OverprovisioningFactor uint32 `json:"overprovisioningFactor"`
	PanicThreshold         uint32 `json:"panicThreshold"`
	PanicMode              string `json:"panicMode"`
	DrainingCapacity       string `json:"drainingCapacity"`
	HealthAdjustment       string `json:"healthAdjustment"`
}

// Priority is stage 1 for one priority.
type Priority struct {
	Priority            uint32     `json:"priority"`
	ConfiguredWeight    uint64     `json:"configuredWeight"`
	EligibleWeight      uint64     `json:"eligibleWeight"`
	PanicEligibleWeight uint64     `json:"panicEligibleWeight"`
	Health              uint64     `json:"health"`
	Load                uint64     `json:"load"`
	InPanic             bool       `json:"inPanic"`
	DroppedMillionths   uint64     `json:"droppedMillionths"`
	Localities          []Locality `json:"localities"`
}

// Locality is stage 2 for one (priority, locality) group.
type Locality struct {
	Region         string `json:"region"`
	Zone           string `json:"zone"`
	SubZone        string `json:"subZone"`
	LocalityWeight uint64 `json:"localityWeight"`
	// LocalityFrom names the Locality objects that set priority and weight;
	// empty when the defaults apply.
	LocalityFrom     []string `json:"localityFrom"`
	ConfiguredWeight uint64   `json:"configuredWeight"`
	SelectableWeight uint64   `json:"selectableWeight"`
	Availability     uint64   `json:"availability"`
	EffectiveWeight  uint64   `json:"effectiveWeight"`
	ShareInPriority  uint64   `json:"shareInPriority"`
	Traffic          uint64   `json:"traffic"`
	// Observed is the number of simulated picks, present with --simulate.
	Observed  *uint64    `json:"observed,omitempty"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is stage 3 for one endpoint.
type Endpoint struct {
	Address        string `json:"address"`
	Port           uint32 `json:"port"`
	Weight         uint64 `json:"weight"`
	AdminState     string `json:"adminState"`
	Probe          string `json:"probe"`
	Circuit        string `json:"circuit"`
	OutlierEjected bool   `json:"outlierEjected"`
	Scope          string `json:"scope"`
	Configured     bool   `json:"configured"`
	Eligible       bool   `json:"eligible"`
	PanicEligible  bool   `json:"panicEligible"`
	Selectable     bool   `json:"selectable"`
	// Reason is "Eligible" or the first failing reason.
	Reason string `json:"reason"`
	// ReasonFrom is the origin of the signal behind Reason, when known.
	ReasonFrom string `json:"reasonFrom,omitempty"`
	Share      uint64 `json:"share"`
	// From names the object the endpoint came from.
	From string `json:"from"`
	// Origin is where an imported endpoint was read, with its cluster
	// ("EndpointSlice NS/NAME in cluster C"), or why a cluster's endpoint is
	// Unavailable ("cluster C unreachable since HH:MM:SS; ...").
	Origin string `json:"origin,omitempty"`
	// HashKey is the endpoint's hash key, published as its envoy.lb
	// hash_key metadata; absent, rings place it by address.
	HashKey string `json:"hashKey,omitempty"`
	// Generation names the backend at the address: a new one starts with
	// empty outlier, active-check and load-report state (docs/health.md).
	Generation string `json:"generation,omitempty"`
	// GenerationSince is when the replica answering first published this
	// generation at the address: live state, which the admin port's
	// /debug/explain fills (SetGenerationSince) and an offline report,
	// having no clock, leaves out.
	GenerationSince *time.Time `json:"generationSince,omitempty"`
	// Observed is the number of simulated picks, present with --simulate.
	Observed *uint64 `json:"observed,omitempty"`
}

// Build explains every upstream of a snapshot, or only those keys when given.
func Build(s *topology.Snapshot, only ...topology.Key) Report {
	rep := Report{Revision: s.Revision, Upstreams: []Upstream{}}
	for _, u := range s.Upstreams() {
		if len(only) > 0 && !slices.Contains(only, u.Upstream.Key) {
			continue
		}
		rep.Upstreams = append(rep.Upstreams, BuildUpstream(u))
	}
	for _, o := range s.Orphans() {
		rep.Orphans = append(rep.Orphans, o.String())
	}
	return rep
}

// BuildUpstream explains one upstream.
func BuildUpstream(u *topology.UpstreamState) Upstream {
	p := u.Upstream.Policy
	out := Upstream{
		Namespace: u.Upstream.Key.Namespace,
		Name:      u.Upstream.Key.Name,
		Policy: Policy{
			OverprovisioningFactor: p.OverprovisioningFactor,
			PanicThreshold:         p.PanicThreshold,
			PanicMode:              p.PanicMode.String(),
			DrainingCapacity:       p.DrainingCapacity.String(),
			HealthAdjustment:       string(u.Upstream.HealthAdjustment),
		},
		SplitBy:       string(u.Upstream.HealthAdjustment),
		LoadBalancing: loadBalancing(u),
		Affinity:      affinityOf(&u.Upstream),
		HealthCheck:   healthCheckOf(&u.Upstream),
		Retries:       retriesOf(u),
		Visibility:    visibilityOf(&u.Upstream),
		Split:         buildSplit(u, nil),

		UnmatchedLocalities: unmatchedLocalities(u),
	}
	if out.SplitBy == "" {
		out.SplitBy = string(topology.ControlPlane)
	}
	return out
}

// buildSplit explains the derivation in u.Result. configured maps a result
// priority to the configured priority its Locality objects were given at:
// nil when the result's priorities are the configured ones, the effective
// priority table when a PreferSame* class renumbered them.
func buildSplit(u *topology.UpstreamState, configured []topology.EffectivePriority) Split {
	r := u.Result
	out := Split{
		Outcome:                     r.Outcome.String(),
		NormalizedTotalAvailability: r.NTA,
		TotalPanic:                  r.TotalPanic,
		DroppedMillionths:           r.DroppedMillionths,
		Priorities:                  []Priority{},
	}
	for _, pr := range r.Priorities {
		xp := Priority{
			Priority: pr.Priority, ConfiguredWeight: pr.ConfiguredWeight, EligibleWeight: pr.EligibleWeight,
			PanicEligibleWeight: pr.PanicEligibleWeight, Health: pr.Health, Load: pr.Load,
			InPanic: pr.InPanic, DroppedMillionths: pr.Dropped, Localities: []Locality{},
		}
		groupPriority := pr.Priority
		if i, ok := slices.BinarySearchFunc(configured, pr.Priority, func(e topology.EffectivePriority, p uint32) int {
			return cmp.Compare(e.Effective, p)
		}); ok {
			groupPriority = configured[i].Configured
		}
		for _, l := range r.Localities[pr.FirstLocality : pr.FirstLocality+pr.LocalityCount] {
			xl := Locality{
				Region: l.Locality.Region, Zone: l.Locality.Zone, SubZone: l.Locality.SubZone,
				LocalityWeight: l.LocalityWeight, LocalityFrom: []string{},
				ConfiguredWeight: l.ConfiguredWeight, SelectableWeight: l.SelectableWeight,
				Availability: l.Availability, EffectiveWeight: l.EffectiveWeight,
				ShareInPriority: l.ShareInPriority, Traffic: l.Traffic, Endpoints: []Endpoint{},
			}
			// Groups are in canonical (priority, locality) order; they may
			// also hold Locality objects without endpoints, which no result
			// locality finds.
			if gi, ok := slices.BinarySearchFunc(u.Groups, l.Locality, func(g topology.Group, loc weights.Locality) int {
				return cmp.Or(cmp.Compare(g.Priority, groupPriority), g.Locality.Compare(loc))
			}); ok {
				for _, k := range u.Groups[gi].LocalityObjects {
					xl.LocalityFrom = append(xl.LocalityFrom, "Locality "+k.String())
				}
			}
			for i := l.FirstEndpoint; i < l.FirstEndpoint+l.EndpointCount; i++ {
				er, e, origin := u.EndpointResult(i)
				xl.Endpoints = append(xl.Endpoints, Endpoint{
					Address: e.Address, Port: e.Port, Weight: e.Weight,
					AdminState: e.Admin.String(), Probe: e.Probe.String(), Circuit: e.Circuit.String(),
					OutlierEjected: e.Ejected, Scope: e.Scope.String(),
					Configured: er.Configured, Eligible: er.Eligible, PanicEligible: er.PanicEligible,
					Selectable: er.Selectable, Reason: er.Reason.String(),
					ReasonFrom: ReasonOrigin(er.Reason, origin), Share: er.Share, From: origin.Set.String(),
					Origin: origin.Health.AdminOrigin, HashKey: origin.HashKey, Generation: origin.Generation,
				})
			}
			xp.Localities = append(xp.Localities, xl)
		}
		out.Priorities = append(out.Priorities, xp)
	}
	return out
}

// ReasonOrigin is the origin of the signal a reason comes from (who said
// so, on what evidence); an admin state nothing else set is the endpoint's
// object's own spec. Explain prints it as reasonFrom, the plane's log beside
// an endpoint taken out or brought back.
func ReasonOrigin(r weights.Reason, o topology.Origin) string {
	switch r.Signal() {
	case weights.SignalProbe:
		return o.Health.ProbeOrigin
	case weights.SignalCircuit:
		return o.Health.CircuitOrigin
	case weights.SignalOutlier:
		return o.Health.OutlierOrigin
	case weights.SignalScope:
		return o.Health.ScopeOrigin
	case weights.SignalAdmin:
		if o.Health.AdminOrigin != "" {
			return o.Health.AdminOrigin
		}
		return o.Set.String() + " spec"
	}
	return ""
}
