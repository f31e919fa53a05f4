// Command controlplane is the Poise control plane: serve publishes the
// topology of manifest files or of a cluster to Envoy and gRPC over xDS;
// explain prints the derivation of that topology (from manifests, offline,
// or from a cluster), explain-route a spatial request's routing, and
// validate checks manifests as serve would; status and proxy-config ask
// running replicas whom and what they serve; create-remote-secret registers
// a remote cluster; load simulates a fleet of clients against a plane and
// measures it. Each command parses its flags and hands the work to pkg/.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
