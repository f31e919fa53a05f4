// Command benchscale measures the real controlplane binary at scale. It writes
// a manifest directory of synthetic upstreams (20 endpoints each, one file per
// upstream), serves it with `controlplane serve`, connects raw ADS clients over
// gRPC and reports startup time, memory, server CPU per flip and the latency
// from a manifest change to the last client's receipt, for single flips and for
// sustained churn. `make bench-scale` runs it; docs/performance.md says what
// it prints.
package main
