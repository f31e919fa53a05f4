// Package kubestatus writes what the leader computes back to the cluster:
// the status of every Upstream, Locality, EndpointSet, SpatialDomain and
// Partition with its Events, the active checks' and fleet outlier
// detection's verdicts, and the load aggregates the replicas share. It reads
// what package kube (the source) found and never feeds the topology itself.
package kubestatus
