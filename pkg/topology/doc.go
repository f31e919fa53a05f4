// Package topology is the single-writer reconciliation boundary of the
// control plane: sources hand a Directory batches of upstreams, localities,
// endpoint sets, spatial domains and partitions, and signals hand it theirs
// (check verdicts, outlier ejections, the client classes and the demand
// applied to Balanced upstreams), kept as overlays of the objects. It applies
// each batch atomically, validates and computes every affected upstream with
// pkg/weights, resolves each affected spatial domain into a partition map with
// its replicas' health, and publishes an immutable, revisioned Snapshot that
// shares the tree nodes of unchanged upstreams with its predecessor and says which
// upstreams changed in its last revisions. An invalid batch is rejected whole
// and the last good Snapshot stays current; a spatial problem is reported on
// its object and never rejects a batch. A Directory may require a complete
// topology (RequireComplete), for a source that holds the whole truth at once:
// then a name no object defines, or a Locality matching nothing, rejects the
// batch too.
package topology
