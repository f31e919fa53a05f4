package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdminState is the operator's intent for an endpoint. Health from probes never
// changes it.
// +kubebuilder:validation:Enum=Ready;Draining;Unavailable
type AdminState string

const (
	// AdminStateReady: the endpoint may take traffic.
	AdminStateReady AdminState = "Ready"
	// AdminStateDraining: the endpoint takes no new traffic; it counts as configured
	// capacity only when the Upstream's drainingCapacity is Include.
	AdminStateDraining AdminState = "Draining"
	// AdminStateUnavailable: the endpoint takes no traffic and is not capacity.
	AdminStateUnavailable AdminState = "Unavailable"
)

// ProbeState is the result of active health checking.
// +kubebuilder:validation:Enum=Healthy;Unhealthy;Unknown
type ProbeState string

const (
	ProbeHealthy   ProbeState = "Healthy"
	ProbeUnhealthy ProbeState = "Unhealthy"
	// ProbeUnknown counts as eligible, as in Envoy.
	ProbeUnknown ProbeState = "Unknown"
)

// CircuitState is the state of an endpoint's circuit breaker.
// +kubebuilder:validation:Enum=Closed;Open
type CircuitState string

const (
	CircuitClosed CircuitState = "Closed"
	CircuitOpen   CircuitState = "Open"
)

// Defaults of Endpoint and EndpointHealth. The kubebuilder:default markers must
// repeat them.
const (
	DefaultEndpointWeight int64 = 1
	DefaultAdminState           = AdminStateReady
	DefaultProbeState           = ProbeUnknown
	DefaultCircuitState         = CircuitClosed
)

// Endpoint is one address:port of an upstream.
type Endpoint struct {
	// address is an IPv4 or IPv6 address (no zone, not IPv4-mapped): EDS carries
	// IP addresses only, so a DNS name is refused. Unspecified (0.0.0.0, ::),
	// link-local (169.254.0.0/16, fe80::/10), multicast and broadcast addresses are
	// refused; a loopback address (127.0.0.0/8, ::1) is accepted here but
	// published only when the Upstream sets spec.addressPolicy.allowLoopback.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address: EDS carries IP addresses only, and Envoy rejects a DNS name in a ClusterLoadAssignment"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast() || ip(self).isLoopback()",message="address must not be unspecified (0.0.0.0, ::), link-local (169.254.0.0/16, fe80::/10, cloud metadata), multicast or broadcast"
	Address string `json:"address"`

	// port is the endpoint's port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// weight is the endpoint's capacity inside its locality, 1 to 4294967295.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	Weight *int64 `json:"weight,omitempty"`

	// adminState is the operator's intent: Ready, Draining or Unavailable.
	// +optional
	// +kubebuilder:default=Ready
	AdminState AdminState `json:"adminState,omitempty"`

	// hashKey is the endpoint's stable name for keyed load balancing: it is
	// published as the endpoint's envoy.lb hash_key metadata, which Envoy and
	// gRPC place on a hash ring instead of the address, so an endpoint that
	// comes back at a new address keeps its keys. Absent, the address is used.
	// At most 253 letters, digits and the characters - _ . : /, starting and
	// ending with a letter or digit.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.:/]*[A-Za-z0-9])?$`
	HashKey string `json:"hashKey,omitempty"`

	// generation names the backend now at this address: a change of it (or
	// its first appearance) starts a new generation, whose outlier, active
	// health-check and load-report state start empty, so a new backend at a
	// reused address does not inherit the previous one's history (see
	// docs/health.md, "Endpoint generations"). Absent, an address keeps one
	// generation for as long as it is listed. At most 128 letters, digits
	// and the characters - _ . :, starting and ending with a letter or digit.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.:]*[A-Za-z0-9])?$`
	Generation string `json:"generation,omitempty"`
}

// MaxHashKeyLength and MaxGenerationLength bound an endpoint's hashKey and
// generation.
const (
	MaxHashKeyLength    = 253
	MaxGenerationLength = 128
)

// EndpointSetSpec is the desired state of an EndpointSet: endpoints of one upstream
// in one locality.
type EndpointSetSpec struct {
	// upstream is the name of an Upstream in the same namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Upstream string `json:"upstream"`

	// locality is the locality of every endpoint in the set.
	// +optional
	// +kubebuilder:default={}
	Locality LocalityID `json:"locality,omitempty"`

	// priority overrides the priority of the endpoints. When absent, the priority
	// comes from the Locality object of the same upstream and locality, or is 0 when
	// there is none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=127
	Priority *int32 `json:"priority,omitempty"`

	// endpoints are the set's endpoints. An address:port may appear only once.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +listMapKey=port
	// +kubebuilder:validation:MinItems=0
	// +kubebuilder:validation:MaxItems=5000
	Endpoints []Endpoint `json:"endpoints,omitempty"`
}

// EndpointHealth is the health of one endpoint as observed by whoever probes it.
type EndpointHealth struct {
	// address is the endpoint's address, as in spec.endpoints.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Address string `json:"address"`

	// port is the endpoint's port, as in spec.endpoints.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// probe is the result of active health checking.
	// +optional
	// +kubebuilder:default=Unknown
	Probe ProbeState `json:"probe,omitempty"`

	// circuit is the state of the endpoint's circuit breaker.
	// +optional
	// +kubebuilder:default=Closed
	Circuit CircuitState `json:"circuit,omitempty"`

	// outlierEjected is true while outlier detection ejects the endpoint.
	// +optional
	OutlierEjected bool `json:"outlierEjected,omitempty"`
}

// EndpointSetStatus is the observed state of an EndpointSet.
type EndpointSetStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Accepted and Programmed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// health is written by whoever probes the endpoints; it never changes
	// spec.endpoints[].adminState. An endpoint with no entry is Unknown, Closed and
	// not ejected.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +listMapKey=port
	// +kubebuilder:validation:MaxItems=5000
	Health []EndpointHealth `json:"health,omitempty"`

	// total is the number of endpoints in spec.endpoints, as the control
	// plane last read them. Absent while the set is not in the topology.
	// +optional
	Total *int32 `json:"total,omitempty"`
	// ready is how many of them have adminState Ready.
	// +optional
	Ready *int32 `json:"ready,omitempty"`
	// eligible is how many of them may take traffic: Ready, not Unhealthy,
	// circuit Closed and not ejected (docs/weights.md).
	// +optional
	Eligible *int32 `json:"eligible,omitempty"`
}

// EndpointSet lists endpoints of one Upstream in one locality, with their weights
// and admin states. Probers write health to its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=eps,categories=poise
// +kubebuilder:printcolumn:name="Upstream",type=string,JSONPath=`.spec.upstream`
// +kubebuilder:printcolumn:name="Region",type=string,JSONPath=`.spec.locality.region`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.locality.zone`
// +kubebuilder:printcolumn:name="SubZone",type=string,JSONPath=`.spec.locality.subZone`,priority=1
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Eligible",type=integer,JSONPath=`.status.eligible`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`,priority=1
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EndpointSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the EndpointSet.
	// +required
	Spec EndpointSetSpec `json:"spec"`

	// status is the observed state of the EndpointSet.
	// +optional
	Status EndpointSetStatus `json:"status,omitempty"`
}

// EndpointSetList is a list of EndpointSets.
//
// +kubebuilder:object:root=true
type EndpointSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EndpointSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EndpointSet{}, &EndpointSetList{})
}
