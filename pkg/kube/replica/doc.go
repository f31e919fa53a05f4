// Package replica assembles one replica's Kubernetes side: a manager
// whose informers feed the Directory through the source (package source) on
// every replica, and the leader's work (packages status, checks and
// outliers) run under the Lease election (package leader).
package replica
