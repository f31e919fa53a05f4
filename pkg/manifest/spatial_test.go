package manifest_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
)

const (
	domainX = `apiVersion: poise.dev/v1alpha1
kind: SpatialDomain
metadata:
  name: cadastre
  namespace: shop
spec:
  gridDegrees: 10
  localityCapPercent: 50
  replicas:
  - {name: eu-1, upstream: x, region: eu}
  - {name: us-1, upstream: x-us, region: us-east}
  products:
  - {name: parcels, pathPrefix: /parcels, allowedRegions: [eu, us-east]}
  - {name: owners, pathPrefix: /owners, allowedRegions: [eu]}
`
	partitionX = `apiVersion: poise.dev/v1alpha1
kind: Partition
metadata:
  name: pacific
  namespace: shop
spec:
  domain: cadastre
  extent: {west: 170, south: -20.5, east: -170, north: 10}
  replicas: [us-1]
`
)

func TestLoadSpatial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": docs(upstreamX, domainX, partitionX, strings.Replace(partitionX, "pacific", "europe", 1)),
	})
	set, err := manifest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dir, "a.yaml")
	want := []manifest.Object{
		{File: a, Document: 1, Kind: "Upstream", Key: topology.Key{Namespace: "shop", Name: "x"}},
		{File: a, Document: 2, Kind: topology.KindSpatialDomain, Key: topology.Key{Namespace: "shop", Name: "cadastre"}},
		{File: a, Document: 3, Kind: topology.KindPartition, Key: topology.Key{Namespace: "shop", Name: "pacific"}},
		{File: a, Document: 4, Kind: topology.KindPartition, Key: topology.Key{Namespace: "shop", Name: "europe"}},
	}
	if !slices.Equal(set.Objects, want) {
		t.Errorf("objects:\n got %+v\nwant %+v", set.Objects, want)
	}
	if set.Batch.Len() != len(want) {
		t.Errorf("batch touches %d objects, want %d", set.Batch.Len(), len(want))
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.SpatialDomain(topology.Key{Namespace: "shop", Name: "cadastre"})
	if st == nil {
		t.Fatal("SpatialDomain shop/cadastre is not in the snapshot")
	}
	wantDomain := partitionmap.Domain{
		Name: "cadastre", GridDeg: 10, MaxCells: partitionmap.DefaultMaxCells, CapPercent: 50,
		Replicas: []partitionmap.Replica{{Name: "eu-1", Upstream: "x", Region: "eu"}, {Name: "us-1", Upstream: "x-us", Region: "us-east"}},
		Products: []partitionmap.Product{
			{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu", "us-east"}},
			{Name: "owners", PathPrefix: "/owners", AllowedRegions: []string{"eu"}},
		},
	}
	if !reflect.DeepEqual(st.Domain.Domain, wantDomain) {
		t.Errorf("domain:\n got %+v\nwant %+v", st.Domain.Domain, wantDomain)
	}
	var parts []string
	for _, p := range st.Partitions {
		parts = append(parts, fmt.Sprintf("%s %s %+v %v", p.Partition.Key, p.Partition.Domain, p.Partition.Extent, p.Partition.Replicas))
	}
	wantParts := []string{
		"shop/europe cadastre {West:170 South:-20.5 East:-170 North:10} [us-1]",
		"shop/pacific cadastre {West:170 South:-20.5 East:-170 North:10} [us-1]",
	}
	if !slices.Equal(parts, wantParts) {
		t.Errorf("partitions:\n got %q\nwant %q", parts, wantParts)
	}

	// A Partition and a SpatialDomain may share a name; two Partitions may not.
	_, err = manifest.Decode("b.yaml", []byte(docs(domainX, strings.Replace(partitionX, "pacific", "cadastre", 1), partitionX, partitionX)))
	if err == nil || !strings.Contains(err.Error(), "b.yaml: document 4 (Partition shop/pacific): metadata.name: Partition shop/pacific is also defined in b.yaml document 3") {
		t.Errorf("duplicate partition: %v", err)
	}
	var errs manifest.Errors
	if errors.As(err, &errs) && len(errs) != 1 {
		t.Errorf("want exactly the duplicate, got %v", err)
	}
}

// TestLocateSpatial: a topology problem naming spatial objects points at their
// files and documents.
func TestLocateSpatial(t *testing.T) {
	t.Parallel()
	set, err := manifest.Decode("a.yaml", []byte(docs(domainX, partitionX)))
	if err != nil {
		t.Fatal(err)
	}
	part := topology.ObjectRef{Kind: topology.KindPartition, Key: topology.Key{Namespace: "shop", Name: "pacific"}}
	dom := topology.ObjectRef{Kind: topology.KindSpatialDomain, Key: topology.Key{Namespace: "shop", Name: "cadastre"}}
	other := topology.ObjectRef{Kind: topology.KindPartition, Key: topology.Key{Namespace: "shop", Name: "elsewhere"}}
	located := set.Locate(&topology.BatchError{Problems: []topology.Problem{{
		Objects: []topology.ObjectRef{part, dom, other},
		Err:     errors.New("names a replica the domain does not have"),
	}}})
	var be *topology.BatchError
	if !errors.As(located, &be) {
		t.Fatalf("Locate returned %T %v", located, located)
	}
	if want := []string{"a.yaml document 2", "a.yaml document 1", ""}; !slices.Equal(be.Problems[0].Locations, want) {
		t.Errorf("locations = %q, want %q", be.Problems[0].Locations, want)
	}
	if msg := located.Error(); !strings.Contains(msg, "Partition shop/pacific (a.yaml document 2)") {
		t.Errorf("message %q does not locate the partition", msg)
	}
}
