// Package hashring reproduces, exactly, how each client builds its
// consistent-hash structure — Envoy's ring hash and Maglev table, grpc-go's
// and grpc-js's ring_hash — from the endpoints Poise publishes, and which
// endpoint a given request hash picks in each, so the plane can say offline
// where a request key goes. The clients differ (weights, order, keys), so
// every table names the client it stands for; docs/keys.md cites the sources.
package hashring
