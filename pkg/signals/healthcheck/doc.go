// Package healthcheck runs an Upstream's active health checks
// (spec.healthCheck, docs/health.md): gRPC health v1, HTTP GET and TCP
// connect probes of the Upstream's own endpoints, each endpoint's verdict kept
// by a threshold state machine, scheduled with deterministic jitter and at most
// a bounded number in flight. Verdict changes leave as probe signals with their
// origin; the package never reads or writes the topology itself.
package healthcheck
