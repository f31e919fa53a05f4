// Command controlplane is the Poise control plane: it explains, validates
// and (in later releases) serves a topology of Upstream, Locality and
// EndpointSet objects.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
