// Package publish turns topology snapshots into xDS publications: it
// translates only the upstreams that changed since the last publication
// (only their ClusterLoadAssignments when only endpoints changed), checks
// that the result is coherent, and applies it to the cache at a version that
// never repeats across restarts.
package publish
