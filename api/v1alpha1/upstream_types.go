package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PanicMode says what an upstream does when every priority is in panic.
// +kubebuilder:validation:Enum=UseAll;FailClosed
type PanicMode string

const (
	// PanicModeUseAll routes to every configured Ready endpoint, ignoring health.
	PanicModeUseAll PanicMode = "UseAll"
	// PanicModeFailClosed drops the traffic of a priority in panic.
	PanicModeFailClosed PanicMode = "FailClosed"
)

// DrainingCapacity says whether Draining endpoints count as configured capacity.
// +kubebuilder:validation:Enum=Exclude;Include
type DrainingCapacity string

const (
	// DrainingCapacityExclude leaves Draining endpoints out of configured capacity.
	DrainingCapacityExclude DrainingCapacity = "Exclude"
	// DrainingCapacityInclude counts Draining endpoints as configured (never eligible)
	// capacity, so draining lowers a locality's availability.
	DrainingCapacityInclude DrainingCapacity = "Include"
)

// HealthAdjustment says who applies health to priority and locality shares.
// +kubebuilder:validation:Enum=ControlPlane;Proxy
type HealthAdjustment string

const (
	// HealthAdjustmentControlPlane publishes health-adjusted locality weights computed
	// by the control plane.
	HealthAdjustmentControlPlane HealthAdjustment = "ControlPlane"
	// HealthAdjustmentProxy publishes configured weights and health, and lets the
	// proxy adjust shares itself.
	HealthAdjustmentProxy HealthAdjustment = "Proxy"
)

// LoadBalancingPolicy is the endpoint-picking policy inside a locality.
// +kubebuilder:validation:Enum=RoundRobin;LeastRequest;Random;RingHash;Maglev
type LoadBalancingPolicy string

const (
	LoadBalancingRoundRobin   LoadBalancingPolicy = "RoundRobin"
	LoadBalancingLeastRequest LoadBalancingPolicy = "LeastRequest"
	LoadBalancingRandom       LoadBalancingPolicy = "Random"
	LoadBalancingRingHash     LoadBalancingPolicy = "RingHash"
	LoadBalancingMaglev       LoadBalancingPolicy = "Maglev"
)

// Protocol is the protocol the proxy speaks to an upstream's endpoints.
// +kubebuilder:validation:Enum=HTTP1;HTTP2;GRPC;TCP
type Protocol string

const (
	ProtocolHTTP1 Protocol = "HTTP1"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolTCP   Protocol = "TCP"
)

// Outcome is the routing outcome of an upstream's last computation.
// +kubebuilder:validation:Enum=Routable;NoCapacity;PanicRejected
type Outcome string

const (
	// OutcomeRoutable: the priority loads sum to 1000000.
	OutcomeRoutable Outcome = "Routable"
	// OutcomeNoCapacity: no endpoint can take traffic.
	OutcomeNoCapacity Outcome = "NoCapacity"
	// OutcomePanicRejected: every priority is in panic under FailClosed; all
	// traffic is dropped.
	OutcomePanicRejected Outcome = "PanicRejected"
)

// Defaults of UpstreamSpec. The kubebuilder:default markers must repeat them.
const (
	DefaultOverprovisioningFactor int32 = 140
	DefaultPanicThreshold         int32 = 50
	DefaultPanicMode                    = PanicModeUseAll
	DefaultDrainingCapacity             = DrainingCapacityExclude
	DefaultHealthAdjustment             = HealthAdjustmentControlPlane
	DefaultLoadBalancing                = LoadBalancingRoundRobin
	DefaultConnectTimeout               = 5 * time.Second
	DefaultLoadReportingInterval        = 10 * time.Second
	DefaultProtocol                     = ProtocolHTTP2
)

// UpstreamSpec is the desired state of an Upstream.
// +kubebuilder:validation:XValidation:rule="!has(self.outlierDetection) || has(self.loadReporting)",message="outlierDetection needs loadReporting: the evidence is the clients' load reports"
// +kubebuilder:validation:XValidation:rule="!has(self.localityAffinity) || !has(self.localityAffinity.mode) || self.localityAffinity.mode != 'Balanced' || !has(self.healthAdjustment) || self.healthAdjustment != 'Proxy'",message="localityAffinity.mode Balanced needs healthAdjustment ControlPlane: a proxy's own math cannot keep the global split"
// +kubebuilder:validation:XValidation:rule="!has(self.requestAffinity) || (has(self.loadBalancing) && self.loadBalancing in ['RingHash', 'Maglev'])",message="requestAffinity needs loadBalancing RingHash or Maglev: the key is hashed onto their ring or table"
// +kubebuilder:validation:XValidation:rule="!has(self.retries) || !has(self.protocol) || self.protocol != 'TCP'",message="retries need protocol HTTP1, HTTP2 or GRPC: a TCP upstream has no requests to retry"
type UpstreamSpec struct {
	// overprovisioningFactor is Envoy's overprovisioning factor as an integer percent:
	// 140 means 1.4, so a locality keeps its full share while at least 5/7 of its
	// configured weight is selectable.
	// +optional
	// +kubebuilder:default=140
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	OverprovisioningFactor *int32 `json:"overprovisioningFactor,omitempty"`

	// panicThreshold is an integer percent: a priority whose eligible weight falls
	// below this share of its configured weight is in panic. 0 disables panic.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	PanicThreshold *int32 `json:"panicThreshold,omitempty"`

	// panicMode says what happens in panic: UseAll routes to every Ready endpoint
	// regardless of health; FailClosed drops the traffic.
	// +optional
	// +kubebuilder:default=UseAll
	PanicMode PanicMode `json:"panicMode,omitempty"`

	// drainingCapacity says whether Draining endpoints count as configured capacity
	// (Include) or not (Exclude).
	// +optional
	// +kubebuilder:default=Exclude
	DrainingCapacity DrainingCapacity `json:"drainingCapacity,omitempty"`

	// healthAdjustment says who applies health to locality shares: the control plane
	// (published weights are health-adjusted) or the proxy.
	// +optional
	// +kubebuilder:default=ControlPlane
	HealthAdjustment HealthAdjustment `json:"healthAdjustment,omitempty"`

	// loadBalancing is the endpoint-picking policy inside a locality.
	// +optional
	// +kubebuilder:default=RoundRobin
	LoadBalancing LoadBalancingPolicy `json:"loadBalancing,omitempty"`

	// requestAffinity keys each request, so that requests with the same key
	// (a header, a cookie, the source address, a query parameter) go to the
	// same endpoint; it needs loadBalancing RingHash or Maglev
	// (docs/affinity-keys.md). Without it a RingHash or Maglev upstream hashes
	// nothing of the request: each request lands at random.
	// +optional
	RequestAffinity *RequestAffinity `json:"requestAffinity,omitempty"`

	// connectTimeout is the proxy's TCP connect timeout, above 0s and at most 1h.
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1h')",message="connectTimeout must be above 0s and at most 1h"
	ConnectTimeout *metav1.Duration `json:"connectTimeout,omitempty"`

	// protocol is the protocol the proxy speaks to the endpoints.
	// +optional
	// +kubebuilder:default=HTTP2
	Protocol Protocol `json:"protocol,omitempty"`

	// endpointsFrom imports endpoints from another source in addition to the
	// EndpointSets that name this Upstream.
	// +optional
	EndpointsFrom *EndpointsFrom `json:"endpointsFrom,omitempty"`

	// addressPolicy says which special endpoint addresses this Upstream may
	// publish, from its EndpointSets and its imported Service alike. Without it
	// a loopback address is refused; link-local (169.254.0.0/16, fe80::/10, where
	// cloud metadata services live), unspecified, multicast and broadcast
	// addresses, and DNS names, are refused always.
	// +optional
	AddressPolicy *AddressPolicy `json:"addressPolicy,omitempty"`

	// localityAffinity says how a client's own locality (its xDS node's region and
	// zone) shapes the split it receives. Setting it, even to mode None, decides
	// the mode. Without it, an Upstream that imports a Service follows the
	// Service's spec.trafficDistribution: PreferClose and PreferSameZone mean
	// PreferSameZone, and so does PreferSameNode, because Poise places endpoints
	// by region and zone, not node, and the zone is the closest level it can
	// prefer; any other value, or none, means None. Without it and without a
	// Service's preference, every client receives the same split.
	// +optional
	LocalityAffinity *LocalityAffinity `json:"localityAffinity,omitempty"`

	// healthCheck makes the control plane check this Upstream's endpoints
	// itself (docs/health.md). Its verdict is each endpoint's probe signal,
	// merged with the EndpointSet's own: Unhealthy from either makes the
	// endpoint ineligible. Only the Upstream's own endpoint addresses are
	// checked.
	// +optional
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// loadReporting, when set, asks the xDS clients of this Upstream to report
	// their load to Poise (LRS on the xDS port): its Cluster names the control
	// plane itself as its lrs_server. Without it no load is reported.
	// +optional
	LoadReporting *LoadReporting `json:"loadReporting,omitempty"`
	// outlierDetection, when set, ejects an endpoint whose error ratio in the
	// clients' load reports (spec.loadReporting, which it needs) is high
	// across enough clients (docs/health.md, "Fleet outlier detection"). The
	// decision is each endpoint's outlier signal, with its origin.
	// +optional
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
	// retries is the upstream's retry policy, published on its route to
	// Envoy and to gRPC clients (docs/retries.md). Not with protocol TCP.
	// +optional
	Retries *RetryPolicy `json:"retries,omitempty"`
	// exportTo lists the namespaces whose xDS clients may read this Upstream:
	// "*" for every namespace, "." for the Upstream's own, or a namespace
	// name. "*" stands alone; no item appears twice. Without it the control
	// plane's default applies, which is every namespace unless the platform
	// team sets another (a default of "." keeps each Upstream in its own
	// namespace). A client of no namespace sees only what is exported to
	// "*". For example ["."] or [".", "frontend"].
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|\.|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(x, x == '*') || self.size() == 1",message="'*' (every namespace) stands alone: it already holds every other item"
	ExportTo []string `json:"exportTo,omitempty"`
}

// Limits of spec.exportTo. The markers must repeat them.
const (
	// MaxExportTo is the most items spec.exportTo holds.
	MaxExportTo = 64
	// ExportToAll exports an Upstream to every namespace.
	ExportToAll = "*"
	// ExportToOwn exports an Upstream to its own namespace.
	ExportToOwn = "."
)

// Defaults and bounds of OutlierDetection. The kubebuilder markers must repeat them.
const (
	DefaultOutlierErrorPercent       int32 = 20
	DefaultOutlierMinRequestVolume   int32 = 100
	DefaultOutlierMinReporters       int32 = 3
	DefaultOutlierBaseEjectionTime         = 30 * time.Second
	DefaultOutlierMaxEjectionTime          = 300 * time.Second
	DefaultOutlierMaxEjectionPercent int32 = 10
	MaxOutlierMinRequestVolume       int32 = 1_000_000_000
	MaxOutlierMinReporters           int32 = 1000
	MinOutlierEjectionTime                 = time.Second
	MaxOutlierBaseEjectionTime             = time.Hour
	MaxOutlierMaxEjectionTime              = 24 * time.Hour
)

// OutlierDetection is an Upstream's fleet outlier detection
// (docs/health.md, "Fleet outlier detection"): per endpoint, over the load
// reports' window, the error ratio across the trusted clients.
// +kubebuilder:validation:XValidation:rule="!has(self.baseEjectionTime) || !has(self.maxEjectionTime) || duration(self.maxEjectionTime) >= duration(self.baseEjectionTime)",message="maxEjectionTime must not be below baseEjectionTime"
type OutlierDetection struct {
	// errorPercent is the error ratio, in percent of the requests the trusted
	// clients reported, at which an endpoint is an outlier; 1 to 100.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	ErrorPercent *int32 `json:"errorPercent,omitempty"`

	// minRequestVolume is the fewest requests the trusted clients must have
	// reported on an endpoint in the window to judge it; 1 to 1e9.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	MinRequestVolume *int32 `json:"minRequestVolume,omitempty"`

	// minReporters is the fewest trusted clients that must each see an error
	// ratio of at least errorPercent on an endpoint, so one bad client cannot
	// eject it; 1 to 1000.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MinReporters *int32 `json:"minReporters,omitempty"`

	// baseEjectionTime is how long a first ejection lasts; each consecutive
	// one lasts this times its count. 1s to 1h.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="baseEjectionTime must be from 1s to 1h"
	BaseEjectionTime *metav1.Duration `json:"baseEjectionTime,omitempty"`

	// maxEjectionTime caps one ejection; at least baseEjectionTime, at most 24h.
	// +optional
	// +kubebuilder:default="5m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="maxEjectionTime must be from 1s to 24h"
	MaxEjectionTime *metav1.Duration `json:"maxEjectionTime,omitempty"`

	// maxEjectionPercent is the most of the Upstream's configured endpoint
	// weight ejected at once, in percent; one endpoint may always be ejected
	// when the Upstream has two or more. 0 to 100.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxEjectionPercent *int32 `json:"maxEjectionPercent,omitempty"`
}

// LoadReporting is the load reporting of an Upstream or a SpatialDomain
// (docs/design/signals.md, "Load reports").
type LoadReporting struct {
	// interval is how often clients report (LRS load_reporting_interval), from
	// 1s to 60s: shorter notices trouble sooner at the cost of more reports.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('60s')",message="interval must be from 1s to 60s"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// HealthCheckType is the kind of an active health check.
// +kubebuilder:validation:Enum=GRPC;HTTP;TCP
type HealthCheckType string

const (
	// HealthCheckGRPC calls grpc.health.v1.Health/Check; SERVING passes.
	HealthCheckGRPC HealthCheckType = "GRPC"
	// HealthCheckHTTP sends GET path; an expected status passes.
	HealthCheckHTTP HealthCheckType = "HTTP"
	// HealthCheckTCP opens a connection; opening it passes.
	HealthCheckTCP HealthCheckType = "TCP"
)

// Defaults of HealthCheck. The kubebuilder:default markers must repeat them.
const (
	DefaultHealthCheckInterval            = 10 * time.Second
	DefaultHealthCheckTimeout             = 2 * time.Second
	DefaultHealthyThreshold         int32 = 2
	DefaultUnhealthyThreshold       int32 = 3
	DefaultHealthCheckJitterPercent int32 = 10
	DefaultExpectedStatus           int32 = 200
	MaxHealthThreshold              int32 = 10
	MaxHealthCheckJitterPercent     int32 = 50
	MaxExpectedStatusRanges               = 8
	MinHealthCheckInterval                = time.Second
	MaxHealthCheckInterval                = 5 * time.Minute
)

// HealthCheck is an Upstream's active health check (docs/health.md).
// +kubebuilder:validation:XValidation:rule="self.type == 'HTTP' ? has(self.http) : !has(self.http)",message="http is required with type HTTP and refused with any other type"
// +kubebuilder:validation:XValidation:rule="!has(self.grpc) || self.type == 'GRPC'",message="grpc goes with type GRPC only"
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || !has(self.interval) || duration(self.timeout) < duration(self.interval)",message="timeout must be below interval"
type HealthCheck struct {
	// type is GRPC (grpc.health.v1), HTTP (GET with an expected status) or TCP
	// (a connection opens).
	// +required
	Type HealthCheckType `json:"type"`

	// grpc configures a GRPC check.
	// +optional
	GRPC *GRPCHealthCheck `json:"grpc,omitempty"`

	// http configures an HTTP check; required with type HTTP.
	// +optional
	HTTP *HTTPHealthCheck `json:"http,omitempty"`

	// port is the port checked; default each endpoint's own port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// interval is the time between two checks of one endpoint, 1s to 5m.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('5m')",message="interval must be from 1s to 5m"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// timeout bounds one check; above 0s and below interval.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be above 0s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// healthyThreshold is how many consecutive passes make an Unhealthy
	// endpoint Healthy (one pass suffices for an endpoint not yet judged).
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	HealthyThreshold *int32 `json:"healthyThreshold,omitempty"`

	// unhealthyThreshold is how many consecutive failures make an endpoint
	// Unhealthy.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	UnhealthyThreshold *int32 `json:"unhealthyThreshold,omitempty"`

	// jitterPercent moves each wait by up to this percent of interval, either
	// way, so the checks of many endpoints spread out.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	JitterPercent *int32 `json:"jitterPercent,omitempty"`
}

// GRPCHealthCheck configures a grpc.health.v1 check.
type GRPCHealthCheck struct {
	// service is the service name asked about; empty asks about the server as
	// a whole.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Service string `json:"service,omitempty"`
}

// HTTPHealthCheck configures an HTTP GET check.
type HTTPHealthCheck struct {
	// path is the request path, starting with "/".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[!-~]*$`
	Path string `json:"path"`

	// host is the Host header; default the endpoint's address.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	Host string `json:"host,omitempty"`

	// expectedStatuses are the statuses that pass, as inclusive ranges;
	// default 200 alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:default={{start:200,end:200}}
	ExpectedStatuses []StatusRange `json:"expectedStatuses,omitempty"`
}

// StatusRange is an inclusive range of HTTP statuses.
// +kubebuilder:validation:XValidation:rule="self.start <= self.end",message="start must not be above end"
type StatusRange struct {
	// start is the first status of the range.
	// +required
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	Start int32 `json:"start"`

	// end is the last status of the range.
	// +required
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	End int32 `json:"end"`
}

// LocalityAffinityMode is how a client's locality shapes its split.
// +kubebuilder:validation:Enum=None;PreferSameZone;PreferSameRegion;Balanced
type LocalityAffinityMode string

const (
	LocalityAffinityNone             LocalityAffinityMode = "None"
	LocalityAffinityPreferSameZone   LocalityAffinityMode = "PreferSameZone"
	LocalityAffinityPreferSameRegion LocalityAffinityMode = "PreferSameRegion"
	LocalityAffinityBalanced         LocalityAffinityMode = "Balanced"
)

// LocalityAffinity is an Upstream's client-locality-aware routing
// (docs/weights.md, "Client-locality affinity").
// +kubebuilder:validation:XValidation:rule="!has(self.failoverRegions) || size(self.failoverRegions) == 0 || self.mode in ['PreferSameZone', 'PreferSameRegion']",message="failoverRegions ranks the other regions for PreferSameZone and PreferSameRegion only"
type LocalityAffinity struct {
	// mode: None gives every client the same split. PreferSameZone makes the
	// client's own zone, then its region, then failoverRegions in order, then
	// every other region, successive priorities below each configured one, so
	// traffic spills outwards exactly as it spills between priorities.
	// PreferSameRegion does the same by region. Balanced keeps each client zone's
	// traffic local as far as that zone's capacity allows for its share of the
	// connected clients, and sends the rest to zones with spare capacity, so that
	// over all clients the split is None's.
	// +optional
	// +kubebuilder:default=None
	Mode LocalityAffinityMode `json:"mode,omitempty"`

	// failoverRegions ranks the regions after the client's own, for
	// PreferSameZone and PreferSameRegion. Regions not listed come last,
	// together.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	FailoverRegions []string `json:"failoverRegions,omitempty"`
}

// AddressPolicy opts an Upstream in to endpoint addresses that are refused by
// default.
type AddressPolicy struct {
	// allowLoopback lets the Upstream publish loopback addresses (127.0.0.0/8 and
	// ::1). A loopback address reaches each client's own host, so it is for local
	// development only: backends and proxies on one machine. An EndpointSet of an
	// Upstream without it that lists a loopback address is not accepted.
	// +optional
	AllowLoopback bool `json:"allowLoopback,omitempty"`
}

// EndpointsFrom names where an Upstream imports endpoints from.
type EndpointsFrom struct {
	// service imports the EndpointSlices of a Kubernetes Service in the same
	// namespace. An endpoint's locality comes from the topology.kubernetes.io/region
	// and topology.kubernetes.io/zone labels of its node; ready becomes Ready,
	// serving and terminating becomes Draining, anything else Unavailable. The
	// Service's trafficDistribution sets the Upstream's mode when
	// localityAffinity is absent (see localityAffinity).
	// +required
	Service ServiceReference `json:"service"`

	// clusters chooses the Kubernetes clusters the Service is imported from,
	// and gives each a priority and a locality weight. Absent, the Service is
	// imported from the home cluster and from every registered remote
	// cluster (a Secret labelled poise.dev/remote-cluster in Poise's
	// namespace), each at priority 0 and weight 1, with locality (region,
	// zone) from its Nodes and subZone the cluster's name. Present, only the
	// clusters listed are imported (name the home cluster, --cluster-name, to
	// include it). A Locality object for the same (priority, region, zone,
	// subZone) overrides the weight. See docs/multicluster.md.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Clusters []ClusterImport `json:"clusters,omitempty"`

	// hashKeyFrom names where an imported endpoint's hash key comes from.
	// PodName: the name of the Pod in the endpoint's targetRef, published as
	// its envoy.lb hash_key metadata, so a Pod of a StatefulSet that comes
	// back at a new IP keeps its keys on a hash ring. Absent: imported
	// endpoints carry no hash key, and rings place them by address. An
	// endpoint without a Pod targetRef carries none either way.
	// +optional
	HashKeyFrom HashKeySource `json:"hashKeyFrom,omitempty"`
}

// HashKeySource is where an imported endpoint's hash key comes from.
// +kubebuilder:validation:Enum=PodName
type HashKeySource string

// HashKeyFromPodName: the Pod name of the endpoint's targetRef.
const HashKeyFromPodName HashKeySource = "PodName"

// ClusterImport is one cluster an Upstream imports its Service from.
type ClusterImport struct {
	// name is the cluster's name: the home cluster's --cluster-name, or the
	// poise.dev/remote-cluster label of a remote cluster's Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// priority is the priority of this cluster's endpoints, 0 the most
	// preferred; a Locality object with its own priority does not move them.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=127
	Priority *int32 `json:"priority,omitempty"`

	// weight is the locality weight of each of this cluster's localities
	// (region, zone, subZone = the cluster's name) unless a Locality object
	// sets one, 1 to 4294967295.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	Weight *int64 `json:"weight,omitempty"`
}

// ServiceReference names a port of a Kubernetes Service in the same namespace.
type ServiceReference struct {
	// name is the Service's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// port is the Service port, by number (1-65535) or by name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (size(self) <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="port must be a number in 1-65535 or a port name (at most 15 lowercase letters, digits and single hyphens, with at least one letter)"
	Port intstr.IntOrString `json:"port"`
}

// PriorityStatus is the computed state of one priority of an Upstream. Every figure
// is in millionths: 1000000 is 100 %.
type PriorityStatus struct {
	// priority is the priority, 0 the most preferred.
	Priority int32 `json:"priority"`
	// health is the priority's health in millionths (the share of its configured
	// weight that is eligible, times the overprovisioning factor, capped at 1000000).
	Health int64 `json:"health"`
	// load is the share of the upstream's traffic sent to this priority, in millionths.
	Load int64 `json:"load"`
	// inPanic is true when the priority is in panic.
	InPanic bool `json:"inPanic"`
	// droppedMillionths is the share of the upstream's traffic this priority drops,
	// in millionths.
	// +optional
	DroppedMillionths int64 `json:"droppedMillionths,omitempty"`
}

// LocalityStatus is the computed state of one locality of an Upstream. Every figure
// is in millionths: 1000000 is 100 %.
type LocalityStatus struct {
	// priority is the locality's priority.
	Priority int32 `json:"priority"`

	LocalityID `json:",inline"`

	// localityWeight is the configured locality weight (not in millionths).
	LocalityWeight int64 `json:"localityWeight"`
	// availability is the share of the locality's configured weight that is
	// selectable, times the overprovisioning factor, capped at 1000000, in millionths.
	Availability int64 `json:"availability"`
	// effectiveWeight is localityWeight times availability (so its unit is
	// weight-millionths).
	EffectiveWeight int64 `json:"effectiveWeight"`
	// traffic is the share of the upstream's traffic sent to this locality, in
	// millionths.
	Traffic int64 `json:"traffic"`
}

// UpstreamStatus is the observed state of an Upstream.
type UpstreamStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// revision is the topology revision at which this status last changed (every
	// field but revision and the Programmed condition). It only grows: a change
	// to another upstream never moves it, and a new status-writing leader whose
	// revisions count lower continues from the stored value.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// conditions are Accepted, Programmed, Degraded and, with
	// endpointsFrom, ResolvedRefs.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// outcome is Routable, NoCapacity or PanicRejected.
	// +optional
	Outcome Outcome `json:"outcome,omitempty"`

	// droppedMillionths is the share of the upstream's traffic dropped, in millionths.
	// +optional
	DroppedMillionths int64 `json:"droppedMillionths,omitempty"`

	// priorities holds each priority's health and load, in ascending priority.
	// Figures are in millionths.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Priorities []PriorityStatus `json:"priorities,omitempty"`

	// localities holds each locality's availability, effective weight and traffic,
	// sorted by (priority, region, zone, subZone). Figures are in millionths.
	// +optional
	// +listType=atomic
	Localities []LocalityStatus `json:"localities,omitempty"`

	// clientZones summarizes localityAffinity: for each zone this Upstream has
	// endpoints in (at most 16, in (region, zone) order), the share of their
	// traffic that clients in that zone keep in their own zone, in millionths.
	// Under Balanced it follows the client demand the status-writing replica
	// applies. Absent without localityAffinity.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ClientZones []ClientZoneStatus `json:"clientZones,omitempty"`

	// moreClientZones counts the zones left out of clientZones.
	// +optional
	MoreClientZones int32 `json:"moreClientZones,omitempty"`

	// activeChecks is the verdict of spec.healthCheck, written by the leader,
	// which alone checks (docs/health.md). Every replica reads the endpoints
	// it lists as Unhealthy into their probe signal, so all replicas publish
	// the same eligibility and a new leader starts from it. Absent while no
	// endpoint is Unhealthy and every endpoint is checked.
	// +optional
	ActiveChecks *ActiveCheckStatus `json:"activeChecks,omitempty"`

	// outlierEjections is fleet outlier detection's decision
	// (spec.outlierDetection), written by the leader from every replica's
	// load reports (docs/health.md). Every replica reads the endpoints it
	// lists into their outlier signal, and a new leader continues from it.
	// Absent while nothing is ejected.
	// +optional
	OutlierEjections *OutlierEjectionStatus `json:"outlierEjections,omitempty"`

	// clientZonesDemand says, under Balanced, what clientZones[].demand
	// counts: Clients, the summed demand weights of each zone's connected
	// clients; LoadReports, each zone's per-mille share of the requests its
	// clients reported over the last window (spec.loadReporting). Absent
	// while no demand is applied.
	// +optional
	// +kubebuilder:validation:Enum=Clients;LoadReports
	ClientZonesDemand string `json:"clientZonesDemand,omitempty"`
}

// OutlierEjectionStatus is the state of an Upstream's fleet outlier detection.
type OutlierEjectionStatus struct {
	// ejected lists the endpoints ejected now, sorted by (address, port).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5000
	Ejected []EjectedEndpoint `json:"ejected,omitempty"`
}

// EjectedEndpoint is one endpoint fleet outlier detection ejected.
type EjectedEndpoint struct {
	// address is the endpoint's IP address.
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`

	// port is the endpoint's port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// origin is the evidence, e.g. "load reports: 7 clients, at least 3
	// failing, 1,240 requests, 48 % errors, window 30 s".
	// +kubebuilder:validation:MaxLength=256
	Origin string `json:"origin"`

	// until is when the ejection ends, unless new evidence renews it.
	Until metav1.Time `json:"until"`

	// count is the consecutive ejections, this one included: the ejection
	// lasts baseEjectionTime × count, at most maxEjectionTime.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`

	// generation is the endpoint generation that was ejected (an imported
	// Pod's uid, an EndpointSet endpoint's generation): a new backend at
	// the address is a new generation, and the ejection does not apply to it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Generation string `json:"generation,omitempty"`
}

// MaxCheckedEndpointsPerUpstream is how many endpoints of one Upstream are
// checked at most, and so listed in activeChecks at most.
const MaxCheckedEndpointsPerUpstream = 5000

// ActiveCheckStatus is the state of an Upstream's active health check.
type ActiveCheckStatus struct {
	// unhealthy lists the endpoints the check found Unhealthy, sorted by
	// (address, port), with who found it and since when.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5000
	Unhealthy []CheckedEndpoint `json:"unhealthy,omitempty"`

	// checked counts the endpoints the leader checks.
	// +optional
	Checked int32 `json:"checked,omitempty"`

	// unchecked counts the endpoints past the checker's bounds, which are not
	// checked (their active-check signal is Unknown).
	// +optional
	Unchecked int32 `json:"unchecked,omitempty"`
}

// CheckedEndpoint is one endpoint's active-check verdict.
type CheckedEndpoint struct {
	// address is the endpoint's IP address.
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`

	// port is the endpoint's port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// origin says who checked and what the last checks saw.
	// +kubebuilder:validation:MaxLength=256
	Origin string `json:"origin"`

	// since is when the verdict was reached.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// generation is the endpoint generation the verdict was reached on: a
	// new backend at the address is a new generation, checked afresh.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Generation string `json:"generation,omitempty"`
}

// Sources of status.clientZonesDemand.
const (
	DemandFromClients     = "Clients"
	DemandFromLoadReports = "LoadReports"
)

// ClientZoneStatus is what clients in one zone receive under localityAffinity.
type ClientZoneStatus struct {
	// zone is the clients' "region/zone".
	// +kubebuilder:validation:MaxLength=258
	Zone string `json:"zone"`

	// localMillionths is the share of these clients' traffic that stays in
	// their zone, in millionths.
	LocalMillionths int64 `json:"localMillionths"`

	// demand is the zone's client demand the Balanced split is divided by
	// (Balanced only).
	// +optional
	Demand int64 `json:"demand,omitempty"`

	// note says why these clients receive the split every client receives
	// (for example no demand counted yet), when they do.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Note string `json:"note,omitempty"`
}

// Upstream is one Envoy cluster: its load-balancing parameters and, optionally, a
// Kubernetes Service to import endpoints from. Locality and EndpointSet objects in
// the same namespace name it in spec.upstream.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ups,categories=poise
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="LB",type=string,JSONPath=`.spec.loadBalancing`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="ResolvedRefs",type=string,JSONPath=`.status.conditions[?(@.type=="ResolvedRefs")].status`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Upstream struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Upstream.
	// +optional
	// +kubebuilder:default={}
	Spec UpstreamSpec `json:"spec,omitempty"`

	// status is the observed state of the Upstream.
	// +optional
	Status UpstreamStatus `json:"status,omitempty"`
}

// UpstreamList is a list of Upstreams.
//
// +kubebuilder:object:root=true
type UpstreamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Upstream `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Upstream{}, &UpstreamList{})
}
