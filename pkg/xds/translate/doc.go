// Package translate turns one computed upstream of a topology snapshot into
// Envoy resources: its Cluster, its ClusterLoadAssignment in each client
// rendering, and the API listener and route configuration that proxyless
// gRPC clients dial. It is pure: the same upstream gives the same resources,
// and every resource passes its generated Validate before it is returned.
package translate
