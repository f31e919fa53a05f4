// Package loadreport keeps what xDS clients say in their load reports (LRS,
// envoy.service.load_stats.v3): per (published cluster, endpoint, reporter)
// the issued, successful and failed requests in a sliding window of fixed
// time buckets, with the reporter's locality class, in memory bounded by a
// hard cap of cells. It answers deterministic per-endpoint aggregates across
// reporters for the fleet outlier detector and the spatial metrics
// (docs/design/signals.md, "Load reports"). Reports for what Poise does not
// publish are dropped and counted, never stored.
package loadreport
