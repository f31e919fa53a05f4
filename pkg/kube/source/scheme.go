package source

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// +kubebuilder:rbac:groups=poise.dev,resources=upstreams;localities;endpointsets;spatialdomains;partitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Kind pairs an object of a kind with the kind's name.
type Kind struct {
	Object client.Object
	Name   string
}

// Kinds are the poise.dev kinds the source reads, each with an object of
// it: those whose status the status writer writes.
func Kinds() []Kind {
	return []Kind{
		{&v1alpha1.Upstream{}, topology.KindUpstream},
		{&v1alpha1.Locality{}, topology.KindLocality},
		{&v1alpha1.EndpointSet{}, topology.KindEndpointSet},
		{&v1alpha1.SpatialDomain{}, topology.KindSpatialDomain},
		{&v1alpha1.Partition{}, topology.KindPartition},
	}
}

// Scheme holds the kinds the source reads.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}
