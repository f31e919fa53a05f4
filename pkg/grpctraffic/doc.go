// Package grpctraffic is real gRPC traffic through grpc-go's own xDS client,
// for the demo and the end-to-end suites: backends that answer with their
// own address, clients placed in a locality by their bootstrap, the count of
// who served each call, and how far those counts are from the shares explain
// computes. The controlplane binary never links it.
package grpctraffic
