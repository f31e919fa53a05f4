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

	// conditions are Accepted and Programmed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
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
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
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
