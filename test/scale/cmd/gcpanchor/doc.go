// Command gcpanchor is the go-control-plane anchor of `controlplane load`:
// go-control-plane's own ADS server (SotW and Delta) over two LinearCaches,
// one of Clusters and one of ClusterLoadAssignments, joined by a MuxCache.
// It computes nothing: it mirrors a running Poise replica as one wildcard
// Envoy-like client and puts every resource it receives into its caches, so
// that a load run against it and against the replica share one fixture.
package main
