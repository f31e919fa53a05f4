// Package v1alpha1 holds the poise.dev/v1alpha1 API: the Upstream, Locality and
// EndpointSet custom resources that describe an Envoy cluster, its weighted
// localities and its endpoints, and the SpatialDomain and Partition custom resources
// that route spatial queries to the replicas holding the requested area. The types
// carry kubebuilder markers and CEL rules, so config/crd is generated from them and a
// bad object is rejected before it reaches etcd.
//
// +kubebuilder:object:generate=true
// +groupName=poise.dev
package v1alpha1
