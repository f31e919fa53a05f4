// Package checks runs the active health checks of spec.healthCheck while
// this replica leads and writes each Upstream's verdicts to its
// status.activeChecks, where every replica's source reads them back into
// the topology.
package checks
