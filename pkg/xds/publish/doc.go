// Package publish turns topology snapshots into xDS publications: it
// translates only the upstreams and spatial domains that changed since the last
// publication, found from the snapshot's record of what changed rather than by
// comparing every upstream (only their ClusterLoadAssignments, encoded straight
// to the wire, when only endpoints changed),
// checks that the result is coherent — including every cluster the spatial Lua
// names — and applies it to the cache at a version that never repeats across restarts.
package publish
