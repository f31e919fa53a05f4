// Package metrics defines the Prometheus metrics of the control plane on a
// registry of its own (no global state), so every component records into
// the instance it was given and tests can read exact values.
package metrics
