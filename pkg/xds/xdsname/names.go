package xdsname

import "poise.dev/poise/pkg/topology"

// Cluster is the CDS and EDS name of an upstream: "namespace/name".
func Cluster(k topology.Key) string { return k.Namespace + "/" + k.Name }

// EndpointSuffix separates a sub_zone from the endpoint address in the
// per-endpoint rendering: "<subZone>~ep~<address>:<port>".
const EndpointSuffix = "~ep~"

// ReplicaCluster is the cluster of one replica of a spatial domain.
// Kubernetes names never contain ':', so the parts cannot run into each
// other, and every character is one the generated Lua may carry.
func ReplicaCluster(domain topology.Key, replica string) string {
	return "spatial:" + domain.Namespace + ":" + domain.Name + ":" + replica
}

// PoolCluster is the fallback pool of one product of a spatial domain.
func PoolCluster(domain topology.Key, product string) string {
	return "spatial-pool:" + domain.Namespace + ":" + domain.Name + ":" + product
}
