// Package identity resolves who an xDS or LRS client is from what the
// connection proves — the SPIFFE ID of a verified client certificate, or a
// Kubernetes service-account token checked with TokenReview — never from the
// node message, and checks the node's namespace and service-account claims
// against it. The server calls it at the start of every RPC.
package identity
