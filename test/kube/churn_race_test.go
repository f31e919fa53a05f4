//go:build race

package kube_test

// raceEnabled: the race detector slows the plane several times over, so
// TestChurn's latency bound is wider under it.
const raceEnabled = true
