package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PartitionExtent is a box in CRS84 longitude/latitude degrees. west may be greater
// than east: the extent then crosses the antimeridian (lon ±180) and covers west..180
// and -180..east. south is never greater than north.
// +kubebuilder:validation:XValidation:rule="self.south <= self.north",message="south must not be greater than north (west may be greater than east: the extent then crosses the antimeridian)",fieldPath=".south"
type PartitionExtent struct {
	// west is the western edge, longitude -180 to 180. Greater than east means the
	// extent crosses the antimeridian.
	// +required
	// +kubebuilder:validation:Minimum=-180
	// +kubebuilder:validation:Maximum=180
	West float64 `json:"west"`

	// south is the southern edge, latitude -90 to 90, at most north.
	// +required
	// +kubebuilder:validation:Minimum=-90
	// +kubebuilder:validation:Maximum=90
	South float64 `json:"south"`

	// east is the eastern edge, longitude -180 to 180. Less than west means the
	// extent crosses the antimeridian.
	// +required
	// +kubebuilder:validation:Minimum=-180
	// +kubebuilder:validation:Maximum=180
	East float64 `json:"east"`

	// north is the northern edge, latitude -90 to 90, at least south.
	// +required
	// +kubebuilder:validation:Minimum=-90
	// +kubebuilder:validation:Maximum=90
	North float64 `json:"north"`
}

// PartitionSpec is the desired state of a Partition.
type PartitionSpec struct {
	// domain is the name of the SpatialDomain in the same namespace the partition
	// belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Domain string `json:"domain"`

	// extent is the area the partition covers, in CRS84 (west, south, east, north).
	// west greater than east crosses the antimeridian.
	// +required
	Extent PartitionExtent `json:"extent"`

	// replicas are the names of the domain's replicas (its spec.replicas[].name)
	// that hold the partition.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Replicas []string `json:"replicas"`
}

// PartitionStatus is the observed state of a Partition.
type PartitionStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// cells is the number of grid cells of the domain the extent touches.
	// +optional
	Cells int32 `json:"cells,omitempty"`

	// conditions are Accepted (False with UnknownDomain or UnknownReplica when a
	// reference does not resolve) and Programmed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// Partition is one partition of a SpatialDomain: the area it covers and the
// replicas that hold it. Requests whose box touches the partition's cells prefer
// those replicas.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=part,categories=poise
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.spec.domain`
// +kubebuilder:printcolumn:name="West",type=number,JSONPath=`.spec.extent.west`
// +kubebuilder:printcolumn:name="South",type=number,JSONPath=`.spec.extent.south`
// +kubebuilder:printcolumn:name="East",type=number,JSONPath=`.spec.extent.east`
// +kubebuilder:printcolumn:name="North",type=number,JSONPath=`.spec.extent.north`
// +kubebuilder:printcolumn:name="Replicas",type=string,JSONPath=`.spec.replicas`,priority=1
// +kubebuilder:printcolumn:name="Cells",type=integer,JSONPath=`.status.cells`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Partition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Partition.
	// +required
	Spec PartitionSpec `json:"spec"`

	// status is the observed state of the Partition.
	// +optional
	Status PartitionStatus `json:"status,omitempty"`
}

// PartitionList is a list of Partitions.
//
// +kubebuilder:object:root=true
type PartitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Partition `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Partition{}, &PartitionList{})
}
