// Package kube holds the envtest suites: the CRDs, the Kubernetes source, its
// leader-only status writer and whole control planes (controlplane.Run) run
// against a real kube-apiserver and etcd, and grpc-go's xDS client sends real
// RPCs through what they publish. KUBEBUILDER_ASSETS must name the directory
// that `hack/test-binaries.sh` prints (`make test` sets it).
package kube
