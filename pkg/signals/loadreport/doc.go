// Package loadreport keeps what xDS clients say in their load reports (LRS,
// envoy.service.load_stats.v3): per (published cluster, endpoint, reporter)
// the issued, successful and failed requests in a sliding window of fixed
// time buckets, with the reporter's locality class, in memory bounded by a
// hard cap of cells; one reporter's counts weigh at most a cap of requests
// per cluster and window, a report past it kept scaled down with its
// ratios (docs/health.md, "One client's weight is bounded"). It answers
// deterministic per-endpoint aggregates across reporters for the fleet
// outlier detector, the Balanced demand from load reports and the spatial
// metrics (docs/design/signals.md, "Load reports"). Reports for what Poise
// does not publish are dropped and counted, never stored.
package loadreport
