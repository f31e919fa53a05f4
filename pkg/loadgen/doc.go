// Package loadgen simulates an xDS fleet against a running control plane:
// Envoy-like and gRPC-like ADS clients with the node shapes, credentials and
// subscriptions real ones have, churn generators that change endpoints in
// manifest files or through the apiserver, and a report of how fast each
// change reached each subscriber and what it cost the plane.
package loadgen
