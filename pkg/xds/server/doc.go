// Package server serves the published resources over gRPC: ADS in SotW and
// Delta, and the per-type discovery services, with keepalive and optional
// TLS or mTLS. It keeps a registry of connected clients — kind, features,
// what was sent, ACKed and NACKed per type — for metrics, logs and
// /debug/clients.
package server
