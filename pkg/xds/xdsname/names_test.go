package xdsname

import (
	"testing"

	"poise.dev/poise/pkg/topology"
)

func TestNames(t *testing.T) {
	k := topology.Key{Namespace: "ns", Name: "a"}
	for got, want := range map[string]string{
		Cluster(k):             "ns/a",
		ReplicaCluster(k, "r"): "spatial:ns:a:r",
		PoolCluster(k, "p"):    "spatial-pool:ns:a:p",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
