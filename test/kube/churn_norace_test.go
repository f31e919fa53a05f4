//go:build !race

package kube_test

const raceEnabled = false
