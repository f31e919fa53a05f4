// Package admin serves the control plane's admin HTTP port: liveness and
// readiness, Prometheus metrics, the explain report of the current snapshot,
// the connected xDS clients, and pprof.
package admin
