// Package status writes what the leader computes back to the cluster: the
// status of every Upstream, Locality, EndpointSet, SpatialDomain and
// Partition, with the Events of each condition's change and of the CRDs'
// schema. It reads what the source found (package source) and the
// snapshot, and never feeds the topology itself.
package status
