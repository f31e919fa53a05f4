// Package e2e holds end-to-end suites that run the real controlplane binary
// against real clients: here, grpc-go's own xDS client sending real RPCs to
// real gRPC backends on 127.0.0.1, whose observed split is compared with the
// explain output.
package e2e
