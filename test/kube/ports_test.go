package kube_test

import (
	"testing"

	"poise.dev/poise/test/cpbinary"
)

// restartPort is a free loopback port below the kernel's ephemeral range,
// for an apiserver that a test stops and starts again at the same address:
// no listener on port 0 and no outgoing connection of another test is given
// a port there, so a test that keeps its apiserver down for seconds can run
// in parallel with the others and still find its port free.
func restartPort(t *testing.T) string {
	t.Helper()
	return cpbinary.FreePort(t)
}
