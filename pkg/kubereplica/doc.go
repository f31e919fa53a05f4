// Package kubereplica assembles one replica's Kubernetes side: a manager
// whose informers feed the Directory through the source (package kube) on
// every replica, and the leader's work (package kubestatus) run under the
// Lease election (package leader).
package kubereplica
