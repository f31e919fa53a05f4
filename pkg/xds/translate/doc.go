// Package translate turns a topology snapshot into Envoy resources: per upstream its
// Cluster, its ClusterLoadAssignment in each client rendering, and the API listener and
// route configuration that proxyless gRPC clients dial; per spatial domain its replica
// and pool clusters, the Lua chunk of its VirtualHost, and the spatial listener and
// routes. It is pure: the same input gives the same resources, and every resource
// passes its generated Validate before it is returned. ClusterLoadAssignments can
// also be encoded straight to their deterministic wire bytes, with no message per
// endpoint and the same validation rules, for the publication's hot path.
package translate
