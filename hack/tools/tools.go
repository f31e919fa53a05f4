//go:build tools

// Package tools pins the versions of modules the control plane is built on
// before every one of them is imported by code, so go.mod names them
// exactly (go-control-plane envoy v1.40.0 / root v0.14.0, grpc, protobuf,
// client-go and controller-runtime).
package tools

import (
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/controller-runtime"
)
