// Package scale runs the real controlplane binary under simulated fleets
// (pkg/loadgen, `controlplane load`) and holds every simulated client to
// what the plane serves; cmd/benchscale measures it at scale, and
// cmd/gcpanchor is go-control-plane's LinearCache mirroring it, the anchor
// the same load is pointed at.
package scale
