// Package kube is the Kubernetes source: informers on Upstream, Locality,
// EndpointSet, SpatialDomain and Partition objects, and on the Services,
// EndpointSlices and Nodes that an Upstream imports, feed the topology Directory
// in coalesced batches. An object that contradicts the rest is set aside with its
// reason while every other change goes on; a leader-only status writer shows a
// person what was computed and why an object was not accepted.
package kube
