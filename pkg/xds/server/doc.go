// Package server serves the published resources over gRPC: ADS in SotW and
// Delta, and the per-type discovery services, with keepalive and optional
// TLS or mTLS. It speaks the protocol itself over the cache's streams
// (nonces, ACK/NACK, ordered ADS, wildcard, removals), reading a SotW
// request's repeated resource names by hash rather than decoding them. It
// keeps a registry of connected clients — kind, features, what was sent,
// ACKed and NACKed per type, what each asked for and may not read — for
// metrics, logs and /debug/clients. Given a
// loadreport.Store it also serves LRS on the same port and stream bounds,
// feeding clients' load reports into the store. Each stream and Fetch is
// of the audience Config.Audience resolves from the call, and is sent only
// what that audience may read.
package server
