// Command demo is `make demo`: it serves the examples with the real
// controlplane binary, starts a small gRPC backend on every loopback
// endpoint they name and a few of grpc-go's own xDS clients in two zones,
// each sending a steady trickle of calls, and prints, live, each endpoint's
// observed share of the last calls of each client zone beside the share
// /debug/explain computes for that zone, with the deviation in standard
// deviations. An edit of a served file moves both. With --check it runs
// until every client zone's observed split agrees with explain's (within
// 4.5 σ) and exits 0, or 1 when one does not or time runs out
// (docs/demo.md).
package main
