// Command kubefleet starts a real kube-apiserver and etcd (envtest, from
// KUBEBUILDER_ASSETS) holding the same topology as make bench-fleet's tree,
// but as Kubernetes objects: per upstream a Service, one EndpointSlice of 20
// endpoints over three zones' Nodes, and an Upstream importing the Service
// (spec.endpointsFrom.service). It writes a kubeconfig, prints "ready" and
// serves until interrupted: make bench-fleet-kube serves it with one replica
// and changes its EndpointSlices with controlplane load --churn kube.
package main
