package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of LocalitySpec. The kubebuilder:default markers must repeat them.
const (
	DefaultLocalityPriority int32 = 0
	DefaultLocalityWeight   int64 = 1
)

// LocalitySpec is the desired state of a Locality: one (upstream, priority, region,
// zone, subZone) group and its weight.
type LocalitySpec struct {
	// upstream is the name of an Upstream in the same namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Upstream string `json:"upstream"`

	// priority is the group's priority, 0 the most preferred.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=127
	Priority *int32 `json:"priority,omitempty"`

	// region, zone and subZone identify the locality.
	LocalityID `json:",inline"`

	// weight is the locality weight: the desired share between the localities of one
	// priority, 1 to 4294967295.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	Weight *int64 `json:"weight,omitempty"`
}

// LocalityObjectStatus is the observed state of a Locality object. (LocalityStatus
// is the per-locality entry of UpstreamStatus.)
type LocalityObjectStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Accepted (False with Conflicted when an older Locality
	// of the same upstream, priority and locality sets another weight) and,
	// while it is in the topology, ResolvedRefs (False with
	// MatchesNoEndpoints while no endpoints of its Upstream are in its
	// priority and locality).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// What the (priority, locality) group this Locality places receives, as
	// in its Upstream's status.localities. Absent while the Locality is not
	// in the topology (not accepted, or its Upstream does not exist).

	// traffic is the share of the upstream's traffic sent to this locality,
	// in millionths.
	// +optional
	Traffic *int64 `json:"traffic,omitempty"`
	// availability is the share of the locality's configured weight that is
	// selectable, times the overprovisioning factor, capped at 1000000, in
	// millionths.
	// +optional
	Availability *int64 `json:"availability,omitempty"`
	// effectiveWeight is the locality weight times availability
	// (weight-millionths).
	// +optional
	EffectiveWeight *int64 `json:"effectiveWeight,omitempty"`
	// shareInPriority is the share of its priority's traffic this locality
	// receives, in millionths.
	// +optional
	ShareInPriority *int64 `json:"shareInPriority,omitempty"`
	// trafficPercent is traffic as a percent with one decimal ("42.9%"),
	// for kubectl get.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	TrafficPercent string `json:"trafficPercent,omitempty"`
	// availabilityPercent is availability as a percent with one decimal
	// ("71.4%"), for kubectl get.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	AvailabilityPercent string `json:"availabilityPercent,omitempty"`
}

// Locality gives one locality of an Upstream its priority and weight. EndpointSets
// of the same upstream and locality take their priority from it; a group of
// endpoints with no matching Locality gets priority 0 and weight 1.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=loc,categories=poise
// +kubebuilder:printcolumn:name="Upstream",type=string,JSONPath=`.spec.upstream`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Region",type=string,JSONPath=`.spec.region`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="SubZone",type=string,JSONPath=`.spec.subZone`,priority=1
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Traffic",type=string,JSONPath=`.status.trafficPercent`
// +kubebuilder:printcolumn:name="Availability",type=string,JSONPath=`.status.availabilityPercent`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="ResolvedRefs",type=string,JSONPath=`.status.conditions[?(@.type=="ResolvedRefs")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Locality struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Locality.
	// +required
	Spec LocalitySpec `json:"spec"`

	// status is the observed state of the Locality.
	// +optional
	Status LocalityObjectStatus `json:"status,omitempty"`
}

// LocalityList is a list of Localities.
//
// +kubebuilder:object:root=true
type LocalityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Locality `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Locality{}, &LocalityList{})
}
