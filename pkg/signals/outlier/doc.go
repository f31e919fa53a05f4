// Package outlier is fleet outlier detection (docs/health.md): it sums
// clients' load reports per endpoint into a compact, mergeable Aggregate,
// leaving out the clients that are themselves the failing party and
// keeping the failing ones as bounded sets of instance hashes, so that the
// replicas' aggregates merge into a count of distinct workload instances;
// a Decider turns the merged aggregate into ejections with their origin,
// time and cap. It is pure and deterministic, with integer math only.
package outlier
