// Package source is the Kubernetes source: informers on Upstream, Locality,
// EndpointSet, SpatialDomain and Partition objects, and on the Services,
// EndpointSlices and Nodes that an Upstream imports (from the home cluster
// and the registered remote ones), feed the topology Directory in coalesced
// batches. An object that contradicts the rest is set aside with its reason
// while every other change goes on; the source only reads the cluster, and
// what it found (rejections, import conditions) is for package status to
// write.
package source
