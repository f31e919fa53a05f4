// Package admin serves the control plane's admin HTTP port: liveness and
// readiness, Prometheus metrics, the explain reports of the current snapshot
// (upstreams and spatial routes), the traffic map drawn from them, the
// connected xDS clients, and pprof.
package admin
