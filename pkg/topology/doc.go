// Package topology is the single-writer reconciliation boundary of the
// control plane: sources hand a Directory batches of upstreams, localities
// and endpoint sets; it applies each batch atomically, validates and computes
// every affected upstream with pkg/weights, and publishes an immutable,
// revisioned Snapshot. An invalid batch is rejected whole and the last good
// Snapshot stays current.
package topology
