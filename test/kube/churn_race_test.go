//go:build race

package kube_test

// raceEnabled: TestChurn says when its figures were taken under the race
// detector, which slows the plane several times over.
const raceEnabled = true
