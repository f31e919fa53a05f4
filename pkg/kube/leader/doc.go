// Package leader elects the replica that writes status, through a
// coordination.k8s.io Lease, and runs the leader's work while it holds it.
// Every replica serves xDS whether it leads or not.
package leader
