// Package kind holds the end-to-end suite that runs Poise as users do, on a
// host with Docker: a kind cluster whose workers carry region and zone
// labels, the image from the repository's Dockerfile, `helm install` of
// charts/poise, the walkthrough of examples/kubernetes (echo backends in
// three zones, an Upstream importing a Service, an Upstream with
// EndpointSets, an Envoy on ADS), requests through Envoy counted per zone
// against /debug/explain, the spill when a zone goes unready, and spatial
// routing: requests through Envoy's spatial listener (LDS, RDS and the Lua
// Poise publishes for a SpatialDomain), each answer compared with
// /debug/explain-route, before and after a replica is scaled to 0.
//
// The suite is behind the build tag kind: `make e2e-kind` runs it. Without
// the tag, `go test ./test/kind` checks the suite's inputs statically (the
// kind config against the walkthrough, the Envoy bootstrap against Envoy's
// own protos, the spatial replicas' objects against each other, and what
// the suite expects of each spatial request against the Go reference on the
// walkthrough's map) and says, in a skipped test, why the suite did not run.
// The walkthrough's objects and the kind values of the chart are validated
// by the real kube-apiserver in test/chart.
package kind
