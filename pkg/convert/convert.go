package convert

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

const defaultNamespace = "default"

// MaxClusters bounds the clusters an Upstream imports its Service from
// (spec.endpointsFrom.clusters) and the remote clusters a replica reads.
const MaxClusters = 64

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Key returns the object's namespaced key, with the namespace defaulted as
// kubectl does.
func Key(ns, name string) topology.Key {
	if ns == "" {
		ns = defaultNamespace
	}
	return topology.Key{Namespace: ns, Name: name}
}

func validateMeta(m metav1.ObjectMeta) field.ErrorList {
	var errs field.ErrorList
	switch {
	case m.Name == "":
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "every object needs a name"))
	case len(m.Name) > 253 || !dnsSubdomain.MatchString(m.Name):
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), m.Name, "must be a lowercase RFC 1123 subdomain"))
	}
	// An empty namespace is defaulted; any other must be a namespace name.
	if ns := m.Namespace; ns != "" && (len(ns) > 63 || !dnsLabel.MatchString(ns)) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), ns, "must be a lowercase RFC 1123 label"))
	}
	return errs
}

func inRange(errs field.ErrorList, p *field.Path, v, lo, hi int64) field.ErrorList {
	return inRangeAt(errs, func() *field.Path { return p }, v, lo, hi)
}

// inRangeAt is inRange with the path built only for a problem: in a large
// set, paths for every valid endpoint would cost more than the checks.
func inRangeAt(errs field.ErrorList, p func() *field.Path, v, lo, hi int64) field.ErrorList {
	if v < lo || v > hi {
		errs = append(errs, field.Invalid(p(), v, fmt.Sprintf("must be between %d and %d", lo, hi)))
	}
	return errs
}

func oneOf[T ~string](errs field.ErrorList, p *field.Path, v T, allowed ...T) field.ErrorList {
	for _, a := range allowed {
		if v == a {
			return errs
		}
	}
	vals := make([]string, len(allowed))
	for i, a := range allowed {
		vals[i] = string(a)
	}
	return append(errs, field.NotSupported(p, string(v), vals))
}

func validateLocalityID(errs field.ErrorList, p *field.Path, l v1alpha1.LocalityID) field.ErrorList {
	for _, f := range []struct{ name, v string }{{"region", l.Region}, {"zone", l.Zone}, {"subZone", l.SubZone}} {
		// The schema's maxLength counts characters, not bytes.
		if utf8.RuneCountInString(f.v) > 128 {
			errs = append(errs, field.TooLong(p.Child(f.name), f.v, 128))
		}
	}
	return errs
}

func validateUpstreamRef(errs field.ErrorList, p *field.Path, name string) field.ErrorList {
	if name == "" {
		return append(errs, field.Required(p, "names the Upstream in the same namespace"))
	}
	if len(name) > 253 || !dnsSubdomain.MatchString(name) {
		return append(errs, field.Invalid(p, name, "must be an Upstream name (lowercase RFC 1123 subdomain)"))
	}
	return errs
}

// Upstream validates and converts an Upstream, applying the CRD defaults.
func Upstream(in *v1alpha1.Upstream) (topology.Upstream, field.ErrorList) {
	u := in.DeepCopy()
	u.Default()
	s := u.Spec
	sp := field.NewPath("spec")
	errs := validateMeta(u.ObjectMeta)
	errs = inRange(errs, sp.Child("overprovisioningFactor"), int64(*s.OverprovisioningFactor), 1, 1000)
	errs = inRange(errs, sp.Child("panicThreshold"), int64(*s.PanicThreshold), 0, 100)
	errs = oneOf(errs, sp.Child("panicMode"), s.PanicMode, v1alpha1.PanicModeUseAll, v1alpha1.PanicModeFailClosed)
	errs = oneOf(errs, sp.Child("drainingCapacity"), s.DrainingCapacity, v1alpha1.DrainingCapacityExclude, v1alpha1.DrainingCapacityInclude)
	errs = oneOf(errs, sp.Child("healthAdjustment"), s.HealthAdjustment, v1alpha1.HealthAdjustmentControlPlane, v1alpha1.HealthAdjustmentProxy)
	errs = oneOf(errs, sp.Child("loadBalancing"), s.LoadBalancing, v1alpha1.LoadBalancingRoundRobin, v1alpha1.LoadBalancingLeastRequest,
		v1alpha1.LoadBalancingRandom, v1alpha1.LoadBalancingRingHash, v1alpha1.LoadBalancingMaglev)
	errs = oneOf(errs, sp.Child("protocol"), s.Protocol, v1alpha1.ProtocolHTTP1, v1alpha1.ProtocolHTTP2, v1alpha1.ProtocolGRPC, v1alpha1.ProtocolTCP)
	if d := s.ConnectTimeout.Duration; d <= 0 || d > time.Hour {
		errs = append(errs, field.Invalid(sp.Child("connectTimeout"), s.ConnectTimeout.Duration.String(), "must be greater than 0s and at most 1h"))
	}
	var svc *topology.ServiceRef
	if s.EndpointsFrom != nil {
		p := sp.Child("endpointsFrom", "service")
		ref := s.EndpointsFrom.Service
		if ref.Name == "" || len(ref.Name) > 63 || !dnsLabel.MatchString(ref.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), ref.Name, "must be a Service name (lowercase RFC 1123 label)"))
		}
		switch ref.Port.Type {
		case intstr.Int:
			errs = inRange(errs, p.Child("port"), int64(ref.Port.IntVal), 1, 65535)
		default:
			if !isPortName(ref.Port.StrVal) {
				errs = append(errs, field.Invalid(p.Child("port"), ref.Port.StrVal, "must be a port number 1..65535 or a port name"))
			}
		}
		svc = &topology.ServiceRef{Name: ref.Name, Port: ref.Port.String()}
		if f := s.EndpointsFrom.HashKeyFrom; f != "" {
			errs = oneOf(errs, sp.Child("endpointsFrom", "hashKeyFrom"), f, v1alpha1.HashKeyFromPodName)
			svc.HashKeyFromPodName = f == v1alpha1.HashKeyFromPodName
		}
		if cs := s.EndpointsFrom.Clusters; cs != nil {
			cp := sp.Child("endpointsFrom", "clusters")
			if len(cs) > MaxClusters {
				errs = append(errs, field.TooMany(cp, len(cs), MaxClusters))
				cs = cs[:MaxClusters]
			}
			svc.Clusters = make([]topology.ClusterImport, 0, len(cs))
			for i, c := range cs {
				ci := topology.ClusterImport{Name: c.Name, Weight: 1}
				if c.Name == "" || len(c.Name) > 63 || !dnsLabel.MatchString(c.Name) {
					errs = append(errs, field.Invalid(cp.Index(i).Child("name"), c.Name, "must be a cluster name (lowercase RFC 1123 label)"))
				}
				if c.Priority != nil {
					errs = inRange(errs, cp.Index(i).Child("priority"), int64(*c.Priority), 0, 127)
					ci.Priority = uint32(max(*c.Priority, 0))
				}
				if c.Weight != nil {
					errs = inRange(errs, cp.Index(i).Child("weight"), *c.Weight, 1, 4294967295)
					ci.Weight = uint64(max(*c.Weight, 1))
				}
				for _, o := range svc.Clusters {
					if o.Name == c.Name {
						errs = append(errs, field.Duplicate(cp.Index(i).Child("name"), c.Name))
					}
				}
				svc.Clusters = append(svc.Clusters, ci)
			}
			slices.SortFunc(svc.Clusters, func(a, b topology.ClusterImport) int { return strings.Compare(a.Name, b.Name) })
		}
	}
	var aff *topology.Affinity
	if a := s.LocalityAffinity; a != nil {
		p := sp.Child("localityAffinity")
		mode := a.Mode
		if mode == "" {
			mode = v1alpha1.LocalityAffinityNone
		}
		m, err := affinity.ParseMode(string(mode))
		if err != nil {
			errs = append(errs, field.NotSupported(p.Child("mode"), mode, []string{"None", "PreferSameZone", "PreferSameRegion", "Balanced"}))
		}
		if m == affinity.Balanced && s.HealthAdjustment == v1alpha1.HealthAdjustmentProxy {
			errs = append(errs, field.Invalid(p.Child("mode"), mode, "Balanced needs healthAdjustment ControlPlane: a proxy's own math cannot keep the global split"))
		}
		if len(a.FailoverRegions) > 0 && mode != v1alpha1.LocalityAffinityPreferSameZone && mode != v1alpha1.LocalityAffinityPreferSameRegion {
			errs = append(errs, field.Invalid(p.Child("failoverRegions"), a.FailoverRegions, "failoverRegions ranks the other regions for PreferSameZone and PreferSameRegion only"))
		}
		if len(a.FailoverRegions) > 16 {
			errs = append(errs, field.TooMany(p.Child("failoverRegions"), len(a.FailoverRegions), 16))
		}
		seen := map[string]bool{}
		for i, r := range a.FailoverRegions {
			switch {
			case r == "" || len(r) > 128:
				errs = append(errs, field.Invalid(p.Child("failoverRegions").Index(i), r, "a region name of 1 to 128 characters"))
			case seen[r]:
				errs = append(errs, field.Duplicate(p.Child("failoverRegions").Index(i), r))
			}
			seen[r] = true
		}
		// kept for None too: an Upstream that sets a mode, even None,
		// overrides an imported Service's trafficDistribution
		aff = &topology.Affinity{Mode: m, FailoverRegions: slices.Clone(a.FailoverRegions), Origin: topology.OriginLocalityAffinity}
	}
	hc, errs := healthCheck(errs, sp.Child("healthCheck"), s.HealthCheck)
	ra, errs := requestAffinity(errs, sp.Child("requestAffinity"), &s)
	var lri time.Duration
	if lr := s.LoadReporting; lr != nil {
		// Default() has set the interval
		if lri = lr.Interval.Duration; lri < time.Second || lri > time.Minute {
			errs = append(errs, field.Invalid(sp.Child("loadReporting", "interval"), lri.String(), "must be from 1s to 60s"))
		}
	}
	od, errs := outlierDetection(errs, sp.Child("outlierDetection"), s.OutlierDetection, s.LoadReporting != nil)
	rp, errs := retries(errs, sp.Child("retries"), s.Retries, s.Protocol)
	exp, expErrs := ExportTo(sp.Child("exportTo"), s.ExportTo, Key(u.Namespace, u.Name).Namespace)
	errs = append(errs, expErrs...)
	if len(errs) > 0 {
		return topology.Upstream{}, errs
	}
	pm := weights.UseAll
	if s.PanicMode == v1alpha1.PanicModeFailClosed {
		pm = weights.FailClosed
	}
	dc := weights.ExcludeDraining
	if s.DrainingCapacity == v1alpha1.DrainingCapacityInclude {
		dc = weights.IncludeDraining
	}
	return topology.Upstream{
		Key: Key(u.Namespace, u.Name),
		Policy: weights.Policy{
			OverprovisioningFactor: uint32(*s.OverprovisioningFactor),
			PanicThreshold:         uint32(*s.PanicThreshold),
			PanicMode:              pm,
			DrainingCapacity:       dc,
		},
		HealthAdjustment:   topology.HealthAdjustment(s.HealthAdjustment),
		LoadBalancing:      string(s.LoadBalancing),
		ConnectTimeout:     s.ConnectTimeout.Duration,
		Protocol:           string(s.Protocol),
		AllowLoopback:      s.AddressPolicy != nil && s.AddressPolicy.AllowLoopback,
		Service:            svc,
		Affinity:           aff,
		HealthCheck:        hc,
		LoadReportInterval: lri,
		OutlierDetection:   od,
		RequestAffinity:    ra,
		Retries:            rp,
		ExportTo:           exp,
	}, nil
}

// ExportTo validates an exportTo list as the CRD's schema and CEL rules do
// and returns its canonical rule. own is the namespace "." stands for: the
// object's, or "" for a control plane's default, where "." stays each
// object's own namespace. nil is not set.
func ExportTo(p *field.Path, items []string, own string) (topology.Export, field.ErrorList) {
	if items == nil {
		return topology.Export{}, nil
	}
	var errs field.ErrorList
	if len(items) == 0 {
		errs = append(errs, field.Invalid(p, items, "must hold at least one item: leave it out for the control plane's default"))
	}
	if len(items) > v1alpha1.MaxExportTo {
		errs = append(errs, field.TooMany(p, len(items), v1alpha1.MaxExportTo))
	}
	all := false
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		switch {
		case it == v1alpha1.ExportToAll:
			all = true
		case it == v1alpha1.ExportToOwn:
		case len(it) > 63:
			errs = append(errs, field.TooLong(p.Index(i), it, 63))
		case !dnsLabel.MatchString(it):
			errs = append(errs, field.Invalid(p.Index(i), it, `must be "*", "." or a namespace name (lowercase RFC 1123 label)`))
		}
		if seen[it] {
			errs = append(errs, field.Duplicate(p.Index(i), it))
		}
		seen[it] = true
	}
	// the apiserver runs CEL rules only on an object its schema accepts
	if all && len(items) > 1 && len(errs) == 0 {
		errs = append(errs, field.Invalid(p, items, `'*' (every namespace) stands alone: it already holds every other item`))
	}
	if len(errs) > 0 {
		return topology.Export{}, errs
	}
	return topology.NewExport(items, own), nil
}

// outlierDetection validates a defaulted spec.outlierDetection as its CRD
// schema and CEL rules do, and converts it; nil is none. It needs
// spec.loadReporting: the evidence is the clients' load reports.
func outlierDetection(errs field.ErrorList, p *field.Path, o *v1alpha1.OutlierDetection, reporting bool) (*topology.OutlierDetection, field.ErrorList) {
	if o == nil {
		return nil, errs
	}
	if !reporting {
		errs = append(errs, field.Required(field.NewPath("spec", "loadReporting"), "outlierDetection needs loadReporting: the evidence is the clients' load reports"))
	}
	errs = inRange(errs, p.Child("errorPercent"), int64(*o.ErrorPercent), 1, 100)
	errs = inRange(errs, p.Child("minRequestVolume"), int64(*o.MinRequestVolume), 1, int64(v1alpha1.MaxOutlierMinRequestVolume))
	errs = inRange(errs, p.Child("minReporters"), int64(*o.MinReporters), 1, int64(v1alpha1.MaxOutlierMinReporters))
	errs = inRange(errs, p.Child("maxEjectionPercent"), int64(*o.MaxEjectionPercent), 0, 100)
	base, most := o.BaseEjectionTime.Duration, o.MaxEjectionTime.Duration
	if base < v1alpha1.MinOutlierEjectionTime || base > v1alpha1.MaxOutlierBaseEjectionTime {
		errs = append(errs, field.Invalid(p.Child("baseEjectionTime"), base.String(), "must be from 1s to 1h"))
	}
	switch {
	case most < v1alpha1.MinOutlierEjectionTime || most > v1alpha1.MaxOutlierMaxEjectionTime:
		errs = append(errs, field.Invalid(p.Child("maxEjectionTime"), most.String(), "must be from 1s to 24h"))
	case most < base:
		errs = append(errs, field.Invalid(p.Child("maxEjectionTime"), most.String(), "must not be below baseEjectionTime"))
	}
	return &topology.OutlierDetection{
		ErrorPercent:       uint32(max(*o.ErrorPercent, 0)),
		MinRequestVolume:   uint64(max(*o.MinRequestVolume, 0)),
		MinReporters:       uint32(max(*o.MinReporters, 0)),
		BaseEjectionTime:   base,
		MaxEjectionTime:    most,
		MaxEjectionPercent: uint32(max(*o.MaxEjectionPercent, 0)),
	}, errs
}

var (
	healthCheckPath = regexp.MustCompile(`^/[!-~]*$`)
	healthCheckHost = regexp.MustCompile(`^[!-~]+$`)
)

// healthCheck validates a defaulted spec.healthCheck as its CRD schema and CEL
// rules do, and converts it; nil is no check.
func healthCheck(errs field.ErrorList, p *field.Path, h *v1alpha1.HealthCheck) (*topology.HealthCheck, field.ErrorList) {
	if h == nil {
		return nil, errs
	}
	errs = oneOf(errs, p.Child("type"), h.Type, v1alpha1.HealthCheckGRPC, v1alpha1.HealthCheckHTTP, v1alpha1.HealthCheckTCP)
	out := &topology.HealthCheck{Type: string(h.Type)}
	switch {
	case h.Type == v1alpha1.HealthCheckHTTP && h.HTTP == nil:
		errs = append(errs, field.Required(p.Child("http"), "http is required with type HTTP"))
	case h.Type != v1alpha1.HealthCheckHTTP && h.HTTP != nil:
		errs = append(errs, field.Forbidden(p.Child("http"), "http goes with type HTTP only"))
	}
	if h.GRPC != nil {
		if h.Type != v1alpha1.HealthCheckGRPC {
			errs = append(errs, field.Forbidden(p.Child("grpc"), "grpc goes with type GRPC only"))
		}
		if len(h.GRPC.Service) > 253 {
			errs = append(errs, field.TooLong(p.Child("grpc", "service"), h.GRPC.Service, 253))
		}
		out.GRPCService = h.GRPC.Service
	}
	if hh := h.HTTP; hh != nil {
		hp := p.Child("http")
		if len(hh.Path) > 1024 || !healthCheckPath.MatchString(hh.Path) {
			errs = append(errs, field.Invalid(hp.Child("path"), hh.Path, `must start with "/" and hold at most 1024 printable ASCII characters, no spaces`))
		}
		if hh.Host != "" && (len(hh.Host) > 253 || !healthCheckHost.MatchString(hh.Host)) {
			errs = append(errs, field.Invalid(hp.Child("host"), hh.Host, "must be at most 253 printable ASCII characters, no spaces"))
		}
		if len(hh.ExpectedStatuses) > v1alpha1.MaxExpectedStatusRanges {
			errs = append(errs, field.TooMany(hp.Child("expectedStatuses"), len(hh.ExpectedStatuses), v1alpha1.MaxExpectedStatusRanges))
		}
		for i, r := range hh.ExpectedStatuses {
			rp := hp.Child("expectedStatuses").Index(i)
			errs = inRange(errs, rp.Child("start"), int64(r.Start), 100, 599)
			errs = inRange(errs, rp.Child("end"), int64(r.End), 100, 599)
			if r.Start > r.End {
				errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.Start, r.End), "start must not be above end"))
			}
			out.ExpectedStatuses = append(out.ExpectedStatuses, topology.StatusRange{Start: int(r.Start), End: int(r.End)})
		}
		out.HTTPPath, out.HTTPHost = hh.Path, hh.Host
	}
	if h.Port != nil {
		errs = inRange(errs, p.Child("port"), int64(*h.Port), 1, 65535)
		out.Port = uint32(max(*h.Port, 0))
	}
	iv, to := h.Interval.Duration, h.Timeout.Duration
	if iv < v1alpha1.MinHealthCheckInterval || iv > v1alpha1.MaxHealthCheckInterval {
		errs = append(errs, field.Invalid(p.Child("interval"), iv.String(), "must be from 1s to 5m"))
	}
	switch {
	case to <= 0:
		errs = append(errs, field.Invalid(p.Child("timeout"), to.String(), "must be above 0s"))
	case to >= iv:
		errs = append(errs, field.Invalid(p.Child("timeout"), to.String(), "must be below interval"))
	}
	errs = inRange(errs, p.Child("healthyThreshold"), int64(*h.HealthyThreshold), 1, int64(v1alpha1.MaxHealthThreshold))
	errs = inRange(errs, p.Child("unhealthyThreshold"), int64(*h.UnhealthyThreshold), 1, int64(v1alpha1.MaxHealthThreshold))
	errs = inRange(errs, p.Child("jitterPercent"), int64(*h.JitterPercent), 0, int64(v1alpha1.MaxHealthCheckJitterPercent))
	out.Interval, out.Timeout = iv, to
	out.HealthyThreshold = uint32(max(*h.HealthyThreshold, 0))
	out.UnhealthyThreshold = uint32(max(*h.UnhealthyThreshold, 0))
	out.JitterPercent = uint32(max(*h.JitterPercent, 0))
	return out, errs
}

// Locality validates and converts a Locality, applying the CRD defaults.
func Locality(in *v1alpha1.Locality) (topology.Locality, field.ErrorList) {
	l := in.DeepCopy()
	l.Default()
	sp := field.NewPath("spec")
	errs := validateMeta(l.ObjectMeta)
	errs = validateUpstreamRef(errs, sp.Child("upstream"), l.Spec.Upstream)
	errs = inRange(errs, sp.Child("priority"), int64(*l.Spec.Priority), 0, int64(v1alpha1.MaxPriority))
	errs = inRange(errs, sp.Child("weight"), *l.Spec.Weight, v1alpha1.MinWeight, v1alpha1.MaxWeight)
	errs = validateLocalityID(errs, sp, l.Spec.LocalityID)
	if len(errs) > 0 {
		return topology.Locality{}, errs
	}
	return topology.Locality{
		Key:      Key(l.Namespace, l.Name),
		Upstream: l.Spec.Upstream,
		Priority: uint32(*l.Spec.Priority),
		Locality: locality(l.Spec.LocalityID),
		Weight:   uint64(*l.Spec.Weight),
	}, nil
}

func locality(l v1alpha1.LocalityID) weights.Locality {
	return weights.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
}

var (
	adminStates = map[v1alpha1.AdminState]weights.AdminState{
		v1alpha1.AdminStateReady: weights.Ready, v1alpha1.AdminStateDraining: weights.Draining, v1alpha1.AdminStateUnavailable: weights.Unavailable,
	}
	probeStates = map[v1alpha1.ProbeState]weights.ProbeHealth{
		v1alpha1.ProbeHealthy: weights.ProbeHealthy, v1alpha1.ProbeUnhealthy: weights.ProbeUnhealthy, v1alpha1.ProbeUnknown: weights.ProbeUnknown,
	}
	circuitStates = map[v1alpha1.CircuitState]weights.CircuitState{
		v1alpha1.CircuitClosed: weights.CircuitClosed, v1alpha1.CircuitOpen: weights.CircuitOpen,
	}
)

type addrPort struct {
	addr string
	port int32
}

// EndpointSet validates and converts an EndpointSet, applying the CRD
// defaults. Health reported in its status is attached to the endpoints it
// names, with the set's status as the origin; health for an address that is
// not in the spec is an error, as it would silently do nothing.
func EndpointSet(in *v1alpha1.EndpointSet) (topology.EndpointSet, field.ErrorList) {
	return OwnedEndpointSet(in.DeepCopy())
}

// OwnedEndpointSet is EndpointSet for a caller that hands the object over
// (a decoder that made it for this): it applies the defaults to s itself
// instead of to a copy.
func OwnedEndpointSet(s *v1alpha1.EndpointSet) (topology.EndpointSet, field.ErrorList) {
	s.Default()
	sp := field.NewPath("spec")
	errs := validateMeta(s.ObjectMeta)
	errs = validateUpstreamRef(errs, sp.Child("upstream"), s.Spec.Upstream)
	errs = validateLocalityID(errs, sp.Child("locality"), s.Spec.Locality)
	var prio *uint32
	if s.Spec.Priority != nil {
		errs = inRange(errs, sp.Child("priority"), int64(*s.Spec.Priority), 0, int64(v1alpha1.MaxPriority))
		p := uint32(*s.Spec.Priority)
		prio = &p
	}
	if n := len(s.Spec.Endpoints); n > v1alpha1.MaxEndpointsPerSet {
		errs = append(errs, field.TooMany(sp.Child("endpoints"), n, v1alpha1.MaxEndpointsPerSet))
	}
	key := Key(s.Namespace, s.Name)
	out := topology.EndpointSet{
		Key: key, Kind: topology.KindEndpointSet, Upstream: s.Spec.Upstream,
		Locality: locality(s.Spec.Locality), Priority: prio,
	}
	// Paths are built only for a problem: valid endpoints, nearly all of
	// them, build none.
	ep := func(i int, name string) *field.Path { return sp.Child("endpoints").Index(i).Child(name) }
	seen := make(map[addrPort]int, len(s.Spec.Endpoints))
	if len(s.Spec.Endpoints) > 0 {
		out.Endpoints = make([]topology.Endpoint, 0, len(s.Spec.Endpoints))
	}
	for i, e := range s.Spec.Endpoints {
		errs = validateAddress(errs, func() *field.Path { return ep(i, "address") }, e.Address)
		errs = inRangeAt(errs, func() *field.Path { return ep(i, "port") }, int64(e.Port), 1, 65535)
		errs = inRangeAt(errs, func() *field.Path { return ep(i, "weight") }, *e.Weight, v1alpha1.MinWeight, v1alpha1.MaxWeight)
		admin, ok := adminStates[e.AdminState]
		if !ok {
			errs = oneOf(errs, ep(i, "adminState"), e.AdminState, v1alpha1.AdminStateReady, v1alpha1.AdminStateDraining, v1alpha1.AdminStateUnavailable)
		}
		k := addrPort{e.Address, e.Port}
		if j, dup := seen[k]; dup {
			errs = append(errs, field.Duplicate(sp.Child("endpoints").Index(i), fmt.Sprintf("%s port %d (also endpoints[%d])", e.Address, e.Port, j)))
		}
		seen[k] = i
		if e.HashKey != "" || e.Generation != "" {
			errs = validateEndpointName(errs, func() *field.Path { return ep(i, "hashKey") }, e.HashKey, v1alpha1.MaxHashKeyLength, "-_.:/")
			errs = validateEndpointName(errs, func() *field.Path { return ep(i, "generation") }, e.Generation, v1alpha1.MaxGenerationLength, "-_.:")
		}
		out.Endpoints = append(out.Endpoints, topology.Endpoint{
			Address: e.Address, Port: uint32(e.Port), Weight: uint64(*e.Weight), Admin: admin,
			HashKey: e.HashKey, Generation: e.Generation,
		})
	}
	var origin string
	if len(s.Status.Health) > 0 {
		origin = fmt.Sprintf("EndpointSet %s status", key)
	}
	hp := func(i int) *field.Path { return field.NewPath("status", "health").Index(i) }
	healthSeen := make(map[addrPort]bool, len(s.Status.Health))
	for i, h := range s.Status.Health {
		k := addrPort{h.Address, h.Port}
		j, ok := seen[k]
		switch {
		case !ok:
			errs = append(errs, field.NotFound(hp(i), fmt.Sprintf("%s port %d is not in spec.endpoints", h.Address, h.Port)))
			continue
		case healthSeen[k]:
			errs = append(errs, field.Duplicate(hp(i), fmt.Sprintf("%s port %d", h.Address, h.Port)))
			continue
		}
		healthSeen[k] = true
		probe, pok := probeStates[h.Probe]
		if !pok {
			errs = oneOf(errs, hp(i).Child("probe"), h.Probe, v1alpha1.ProbeHealthy, v1alpha1.ProbeUnhealthy, v1alpha1.ProbeUnknown)
		}
		circuit, cok := circuitStates[h.Circuit]
		if !cok {
			errs = oneOf(errs, hp(i).Child("circuit"), h.Circuit, v1alpha1.CircuitClosed, v1alpha1.CircuitOpen)
		}
		if j < len(out.Endpoints) {
			out.Endpoints[j].Health = topology.Health{
				Probe: probe, ProbeOrigin: origin,
				Circuit: circuit, CircuitOrigin: origin,
				Ejected: h.OutlierEjected, OutlierOrigin: origin,
			}
		}
	}
	if len(errs) > 0 {
		return topology.EndpointSet{}, errs
	}
	return out, nil
}

// validateAddress is the CRD's rules for an endpoint address: an IP address
// EDS can carry. Loopback passes: whether the set's Upstream allows it is for
// the topology to say (topology.AddressError).
func validateAddress(errs field.ErrorList, p func() *field.Path, a string) field.ErrorList {
	switch {
	case a == "":
		return append(errs, field.Required(p(), "an IP address"))
	case len(a) > 253:
		return append(errs, field.TooLong(p(), a, 253))
	}
	if why := topology.ClassifyAddress(a).Refusal(true); why != "" {
		return append(errs, field.Invalid(p(), a, "address "+why))
	}
	return errs
}

// isPortName is the CRD rule for a named port: at most 15 lowercase letters,
// digits and single hyphens, with at least one letter, starting and ending
// alphanumeric.
func isPortName(s string) bool {
	return len(s) <= 15 && dnsLabel.MatchString(s) && strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz") && !strings.Contains(s, "--")
}

// validateEndpointName refuses an endpoint's hashKey or generation (empty
// is absent) that is longer than maxLen or is not letters, digits and the
// characters of inner, starting and ending with a letter or digit: the
// CRD's maxLength and pattern for the field.
func validateEndpointName(errs field.ErrorList, p func() *field.Path, v string, maxLen int, inner string) field.ErrorList {
	if v == "" {
		return errs
	}
	if len(v) > maxLen {
		return append(errs, field.TooLong(p(), v, maxLen))
	}
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	ok := alnum(v[0]) && alnum(v[len(v)-1])
	for i := 0; ok && i < len(v); i++ {
		ok = alnum(v[i]) || strings.IndexByte(inner, v[i]) >= 0
	}
	if !ok {
		return append(errs, field.Invalid(p(), v, fmt.Sprintf("must be letters, digits and the characters %s, starting and ending with a letter or digit", inner)))
	}
	return errs
}
