package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of SpatialDomainSpec. The kubebuilder:default markers must repeat them,
// and they equal partitionmap.DefaultGridDeg and partitionmap.DefaultMaxCells.
const (
	DefaultGridDegrees int32 = 5
	DefaultMaxCells    int32 = 256
)

// Limits of SpatialDomain and Partition. The markers must repeat these literals;
// crd_test.go checks they agree.
const (
	// MaxGridDegrees is the largest grid cell, in degrees; the grid size must divide it.
	MaxGridDegrees int32 = 180
	// MaxMaxCells is the highest maxCells.
	MaxMaxCells int32 = 65536
	// MaxLocalityCapPercent is the highest localityCapPercent (every request).
	MaxLocalityCapPercent int32 = 100
	// MaxSpatialReplicas is the most replicas a domain lists and the most replicas a
	// partition names.
	MaxSpatialReplicas = 64
	// MaxSpatialProducts is the most products a domain lists.
	MaxSpatialProducts = 64
	// MaxAllowedRegions is the most allowed regions of one product.
	MaxAllowedRegions = 32
	// MaxRegionLength is the longest region name.
	MaxRegionLength = 63
	// MaxPathPrefixLength is the longest product path prefix.
	MaxPathPrefixLength = 1024
)

// SpatialReplica is one copy of a domain's data: the Upstream that serves it and the
// region it lives in.
type SpatialReplica struct {
	// name identifies the replica inside the domain; Partitions name it in
	// spec.replicas.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// upstream is the name of the Upstream in the same namespace that serves the
	// replica.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Upstream string `json:"upstream"`

	// region is where the replica's data lives, matched against the products'
	// allowedRegions: letters, digits, '.', '_', ':' and '-'.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._:-]+$`
	Region string `json:"region"`
}

// SpatialProduct is one product of a domain: the requests under its path prefix,
// whose data may only be read from replicas in its allowed regions.
type SpatialProduct struct {
	// name identifies the product inside the domain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// pathPrefix is the request path prefix the product is served under. It starts
	// with '/' and holds only unreserved, sub-delim, ':', '@', '/' and '%'
	// characters; no two products of a domain share one.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*$`
	PathPrefix string `json:"pathPrefix"`

	// allowedRegions are the regions the product's data may be read from
	// (residency). A request is answered 451 when no replica is in one of them;
	// locality never overrides residency.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._:-]+$`
	AllowedRegions []string `json:"allowedRegions"`
}

// SpatialDomainSpec is the desired state of a SpatialDomain.
type SpatialDomainSpec struct {
	// gridDegrees is the size of a grid cell in degrees of longitude and latitude.
	// It must divide 180.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=180
	// +kubebuilder:validation:XValidation:rule="self > 0 && 180 % self == 0",message="gridDegrees must divide 180 (1, 2, 3, 4, 5, 6, 9, 10, 12, 15, 18, 20, 30, 36, 45, 60, 90 or 180)"
	GridDegrees *int32 `json:"gridDegrees,omitempty"`

	// maxCells is the most grid cells a request's box may touch and still take the
	// locality step; a larger box falls back to ordinary load balancing
	// (reason too_many_cells).
	// +optional
	// +kubebuilder:default=256
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxCells *int32 `json:"maxCells,omitempty"`

	// localityCapPercent is the share of requests, in percent, that may take the
	// locality choice: only requests whose hash(x-request-id) mod 100 is below it do;
	// the rest fall back to ordinary load balancing. Absent means no cap: every
	// request with a usable box takes the locality step. 0 turns locality off.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	LocalityCapPercent *int32 `json:"localityCapPercent,omitempty"`

	// replicas are the copies of the domain's data. Names are unique.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Replicas []SpatialReplica `json:"replicas"`

	// products are the domain's products. Names and path prefixes are unique.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(p, self.exists_one(q, q.pathPrefix == p.pathPrefix))",message="each product needs its own pathPrefix: two products have the same one"
	Products []SpatialProduct `json:"products"`

	// loadReporting, when set, asks the Envoys of the spatial listener to report the
	// load of this domain's replica and pool clusters to Poise (LRS on the xDS port):
	// those clusters name the control plane itself as their lrs_server, and the
	// control plane counts the reported requests by client region and replica region
	// (poise_spatial_requests_total, the cross-region share; docs/spatial.md). It is
	// the domain's own setting: a replica Upstream's loadReporting applies to that
	// Upstream's cluster, not to the domain's clusters.
	// +optional
	LoadReporting *LoadReporting `json:"loadReporting,omitempty"`

	// exportTo lists the namespaces whose xDS clients may read this domain:
	// its replica and pool clusters and its virtual host of the spatial
	// route. Items and default are an Upstream's spec.exportTo: "*" for
	// every namespace, "." for the domain's own, or a namespace name; "*"
	// stands alone; no item appears twice; without it the control plane's
	// default applies. Each replica's Upstream keeps its own exportTo.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|\.|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="!self.exists(x, x == '*') || self.size() == 1",message="'*' (every namespace) stands alone: it already holds every other item"
	ExportTo []string `json:"exportTo,omitempty"`
}

// SpatialReplicaStatus is the computed state of one replica of a SpatialDomain.
type SpatialReplicaStatus struct {
	// name is the replica's name, as in spec.replicas.
	Name string `json:"name"`
	// upstream is the replica's Upstream.
	Upstream string `json:"upstream"`
	// region is the replica's region.
	Region string `json:"region"`
	// healthy is true when the replica's Upstream routes and has eligible
	// capacity in the published snapshot; capacity that is only panic-eligible
	// does not count.
	Healthy bool `json:"healthy"`
	// partitions is the number of accepted Partitions that name the replica.
	Partitions int32 `json:"partitions"`
}

// SpatialDomainStatus is the observed state of a SpatialDomain.
type SpatialDomainStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// mapVersion is the version of the partition map published to the proxies; the
	// proxies record it with every decision.
	// +optional
	MapVersion string `json:"mapVersion,omitempty"`

	// revision is the topology revision at which this status last changed (every
	// field but revision and the Programmed condition). It only grows, as an
	// Upstream's does.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// cells is the number of grid cells holding at least one partition.
	// +optional
	Cells int32 `json:"cells,omitempty"`

	// partitions is the number of accepted Partitions of the domain.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// replicas holds each replica's health and partition count, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Replicas []SpatialReplicaStatus `json:"replicas,omitempty"`

	// conditions are Accepted, ResolvedRefs (every replica's Upstream exists) and
	// Programmed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// SpatialDomain is a spatial domain (matched on the x-spatial-domain header): its
// grid, its replicas (each an Upstream in the same namespace, in a region) and its
// products (each a path prefix with the regions its data may be read from).
// Partition objects in the same namespace name it in spec.domain.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=sdom,categories=poise
// +kubebuilder:printcolumn:name="Grid",type=integer,JSONPath=`.spec.gridDegrees`
// +kubebuilder:printcolumn:name="Cap",type=integer,JSONPath=`.spec.localityCapPercent`,priority=1
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.status.partitions`
// +kubebuilder:printcolumn:name="Cells",type=integer,JSONPath=`.status.cells`
// +kubebuilder:printcolumn:name="Map",type=string,JSONPath=`.status.mapVersion`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="ResolvedRefs",type=string,JSONPath=`.status.conditions[?(@.type=="ResolvedRefs")].status`,priority=1
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SpatialDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the SpatialDomain.
	// +required
	Spec SpatialDomainSpec `json:"spec"`

	// status is the observed state of the SpatialDomain.
	// +optional
	Status SpatialDomainStatus `json:"status,omitempty"`
}

// SpatialDomainList is a list of SpatialDomains.
//
// +kubebuilder:object:root=true
type SpatialDomainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SpatialDomain `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SpatialDomain{}, &SpatialDomainList{})
}
