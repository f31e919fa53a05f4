package topology

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/weights"
)

// Key names a namespaced object.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// ParseKey reads NAMESPACE/NAME, or NAME alone in namespace default.
func ParseKey(s string) (Key, error) {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		if s == "" {
			return Key{}, fmt.Errorf("empty name: want NAMESPACE/NAME")
		}
		return Key{Namespace: "default", Name: s}, nil
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return Key{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	return Key{Namespace: ns, Name: name}, nil
}

// Compare orders keys by namespace, then name.
func (k Key) Compare(o Key) int {
	switch {
	case k.Namespace < o.Namespace:
		return -1
	case k.Namespace > o.Namespace:
		return 1
	case k.Name < o.Name:
		return -1
	case k.Name > o.Name:
		return 1
	}
	return 0
}

// HealthAdjustment says who applies health to the published weights.
type HealthAdjustment string

const (
	// ControlPlane: the control plane computes exact shares; proxies replay them.
	ControlPlane HealthAdjustment = "ControlPlane"
	// Proxy: the source topology is published as is; the proxy does its own math.
	Proxy HealthAdjustment = "Proxy"
)

// Upstream is one Envoy cluster and the knobs of its computation.
type Upstream struct {
	Key              Key
	Policy           weights.Policy
	HealthAdjustment HealthAdjustment
	LoadBalancing    string // RoundRobin, LeastRequest, Random, RingHash, Maglev
	ConnectTimeout   time.Duration
	Protocol         string // HTTP1, HTTP2, GRPC, TCP
	// AllowLoopback lets the upstream publish loopback endpoint addresses
	// (spec.addressPolicy.allowLoopback), for local development.
	AllowLoopback bool
	// Service, when set, imports the endpoints of a Kubernetes Service.
	Service *ServiceRef
	// Affinity, when set, is the upstream's client-locality affinity and
	// where it came from: spec.localityAffinity, kept even when its mode is
	// None because an Upstream that sets a mode overrides what an imported
	// Service prefers; else, in the Kubernetes source, the imported
	// Service's spec.trafficDistribution. nil is mode None with nothing
	// asking for it. Every user reads the mode through ModeOf, so an
	// explicit None renders exactly as nil does: one split for every client.
	Affinity *Affinity
	// HealthCheck, when set, is the upstream's active health check
	// (spec.healthCheck, docs/health.md).
	HealthCheck *HealthCheck
	// LoadReportInterval, when above zero, is spec.loadReporting.interval:
	// the upstream's clients report their load to Poise at this interval.
	// Zero means the upstream has no load reporting.
	LoadReportInterval time.Duration
	// OutlierDetection, when set, is the upstream's fleet outlier detection
	// (spec.outlierDetection, docs/health.md); it needs LoadReportInterval.
	OutlierDetection *OutlierDetection
	// RequestAffinity, when set, is spec.requestAffinity: where each
	// request's key is taken from, for RingHash and Maglev.
	RequestAffinity *RequestAffinity
	// Retries, when set, is the upstream's retry policy (spec.retries,
	// docs/retries.md).
	Retries *RetryPolicy
	// ExportTo is spec.exportTo, the namespaces whose clients may read the
	// upstream, with "." resolved to Key.Namespace; not Set follows the
	// control plane's default (VisibleTo). It is comparable, so equal's
	// comparison of the whole value covers it.
	ExportTo Export
}

// OutlierDetection is an upstream's fleet outlier detection, validated and
// with its defaults applied (docs/health.md, "Fleet outlier detection").
type OutlierDetection struct {
	ErrorPercent       uint32 // 1..100
	MinRequestVolume   uint64 // 1..1e9
	MinReporters       uint32 // 1..1000
	BaseEjectionTime   time.Duration
	MaxEjectionTime    time.Duration // ≥ BaseEjectionTime
	MaxEjectionPercent uint32        // 0..100
}

// Equal reports whether o and p are the same detection; nil is none.
func (o *OutlierDetection) Equal(p *OutlierDetection) bool {
	if o == nil || p == nil {
		return o == p
	}
	return *o == *p
}

// HealthCheck is an upstream's active health check, validated and with its
// defaults applied.
type HealthCheck struct {
	Type             string // GRPC, HTTP, TCP
	GRPCService      string // GRPC: the grpc.health.v1 service name
	HTTPPath         string // HTTP: the GET path
	HTTPHost         string // HTTP: the Host header; "" is the endpoint's address
	ExpectedStatuses []StatusRange
	// Port, when not 0, is checked instead of each endpoint's own port.
	Port               uint32
	Interval           time.Duration
	Timeout            time.Duration
	HealthyThreshold   uint32
	UnhealthyThreshold uint32
	JitterPercent      uint32
}

// StatusRange is an inclusive range of HTTP statuses.
type StatusRange struct{ Start, End int }

// Equal reports whether h and o are the same check; nil is no check.
func (h *HealthCheck) Equal(o *HealthCheck) bool {
	if h == nil || o == nil {
		return h == o
	}
	return h.Type == o.Type && h.GRPCService == o.GRPCService && h.HTTPPath == o.HTTPPath && h.HTTPHost == o.HTTPHost &&
		h.Port == o.Port && h.Interval == o.Interval && h.Timeout == o.Timeout &&
		h.HealthyThreshold == o.HealthyThreshold && h.UnhealthyThreshold == o.UnhealthyThreshold &&
		h.JitterPercent == o.JitterPercent && slices.Equal(h.ExpectedStatuses, o.ExpectedStatuses)
}

// Affinity is an upstream's client-locality-aware routing
// (docs/weights.md, "Client-locality affinity").
type Affinity struct {
	Mode            affinity.Mode
	FailoverRegions []string
	// Origin says what set the mode, for explain: OriginLocalityAffinity,
	// or "Service NS/NAME trafficDistribution VALUE" for an imported
	// Service's preference. It is part of the upstream's identity, so a
	// Service changing from PreferClose to PreferSameZone (the same mode)
	// still moves the revision and explain shows the new origin.
	Origin string
}

// OriginLocalityAffinity is the Origin of an affinity the Upstream sets itself.
const OriginLocalityAffinity = "spec.localityAffinity"

func (a *Affinity) equal(o *Affinity) bool {
	if a == nil || o == nil {
		return a == o
	}
	return a.Mode == o.Mode && a.Origin == o.Origin && slices.Equal(a.FailoverRegions, o.FailoverRegions)
}

// equal reports whether u and o are the same object (o non-nil).
func (u Upstream) equal(o *Upstream) bool {
	a, b := u, *o
	a.Service, b.Service = nil, nil
	a.Affinity, b.Affinity = nil, nil
	a.HealthCheck, b.HealthCheck = nil, nil
	a.OutlierDetection, b.OutlierDetection = nil, nil
	a.RequestAffinity, b.RequestAffinity = nil, nil
	a.Retries, b.Retries = nil, nil
	if !u.Retries.Equal(o.Retries) {
		return false
	}
	if a != b || (u.Service == nil) != (o.Service == nil) || !u.Affinity.equal(o.Affinity) || !u.HealthCheck.Equal(o.HealthCheck) ||
		!u.OutlierDetection.Equal(o.OutlierDetection) || !u.RequestAffinity.Equal(o.RequestAffinity) {
		return false
	}
	return u.Service == nil || u.Service.equal(o.Service)
}

// ServiceRef names a Service in the upstream's namespace and one of its ports.
type ServiceRef struct {
	Name string
	Port string // a port name or number
	// Clusters, when set, are the only clusters the Service is imported
	// from, in name order, each with its priority and weight; nil is the
	// home cluster and every registered one at priority 0, weight 1.
	Clusters []ClusterImport
	// HashKeyFromPodName: each imported endpoint with a Pod targetRef
	// carries the Pod's name as its HashKey.
	HashKeyFromPodName bool
}

// ClusterImport is one cluster a Service is imported from.
type ClusterImport struct {
	Name     string
	Priority uint32
	Weight   uint64
}

func (r *ServiceRef) equal(o *ServiceRef) bool {
	return r.Name == o.Name && r.Port == o.Port && slices.Equal(r.Clusters, o.Clusters) && (r.Clusters == nil) == (o.Clusters == nil) &&
		r.HashKeyFromPodName == o.HashKeyFromPodName
}

// Locality is one Locality object: the priority and weight of an
// (upstream, region, zone, subZone) group.
type Locality struct {
	Key      Key
	Upstream string // an Upstream name in Key.Namespace
	Priority uint32
	Locality weights.Locality
	Weight   uint64
}

// EndpointSet is the endpoints of one upstream in one locality, from an
// EndpointSet object or imported from a Service's EndpointSlices.
type EndpointSet struct {
	Key      Key
	Kind     string // the kind of the object it came from, for messages
	Upstream string // an Upstream name in Key.Namespace
	Locality weights.Locality
	// Priority, when set, chooses the priority; otherwise the matching
	// Locality object does, and without one the group is priority 0.
	Priority *uint32
	// LocalityWeight, when set, is the group's locality weight unless a
	// Locality object sets one (an imported cluster's weight); without it
	// the default is 1.
	LocalityWeight *uint64
	Endpoints      []Endpoint
	// addresses is set by Batch.PutEndpointSet: which endpoints an
	// upstream may refuse for their address.
	addresses addressCheck
}

// equal reports whether s and o are the same object (o non-nil).
func (s EndpointSet) equal(o *EndpointSet) bool {
	if s.Key != o.Key || s.Kind != o.Kind || s.Upstream != o.Upstream || s.Locality != o.Locality ||
		(s.Priority == nil) != (o.Priority == nil) || (s.Priority != nil && *s.Priority != *o.Priority) ||
		(s.LocalityWeight == nil) != (o.LocalityWeight == nil) || (s.LocalityWeight != nil && *s.LocalityWeight != *o.LocalityWeight) {
		return false
	}
	return slices.Equal(s.Endpoints, o.Endpoints)
}

// Endpoint is one address in an EndpointSet with its admin state and its
// independent health signals.
type Endpoint struct {
	Address string
	Port    uint32
	Weight  uint64
	Admin   weights.AdminState
	Health  Health
	// HashKey, when set, is the endpoint's stable name on a hash ring,
	// published as its envoy.lb hash_key metadata; empty: the address.
	HashKey string
	// Generation names the backend at the address (an imported Pod's
	// targetRef uid, an EndpointSet endpoint's generation field). A new
	// generation at a known address is a new endpoint for the signals: its
	// outlier, active-check and load-report state start empty. Empty is a
	// generation too: the one an address has without a name.
	Generation string
}

// Health keeps each signal with the origin that reported it, so explain and
// status can say who made an endpoint ineligible. An empty origin means the
// signal was never reported and holds its default.
type Health struct {
	Probe         weights.ProbeHealth
	ProbeOrigin   string
	Circuit       weights.CircuitState
	CircuitOrigin string
	Ejected       bool
	OutlierOrigin string
	Scope         weights.Scope
	ScopeOrigin   string
	// AdminOrigin says where the admin state came from when the set alone
	// does not: "EndpointSlice NS/NAME in cluster C" for an imported
	// endpoint, or why it is Unavailable ("cluster C unreachable since
	// HH:MM:SS"). Empty: the set's spec.
	AdminOrigin string
}
