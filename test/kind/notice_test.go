//go:build !kind

package kind_test

import "testing"

// TestKindSuite is never silent about the suite it stands for.
func TestKindSuite(t *testing.T) {
	t.Log("test/kind: the end-to-end suite (kind cluster, image, helm install, Envoy, per-zone split and spill, spatial routing) " +
		"is built with -tags kind and needs a Docker engine; this run checked its inputs statically only")
	t.Skip("the kind suite did not run: it needs Docker (and kind, helm, make); run `make e2e-kind` on a host with a Docker engine")
}
