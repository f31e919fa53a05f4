package topology_test

import (
	"slices"
	"testing"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
)

// The demand applied to an upstream is an overlay: it reaches the state of
// a Balanced upstream only, as a revision that resolves that upstream and
// keeps its cluster revision; it outlives changes of the upstream's objects
// and waits, without effect, while the upstream is not Balanced.
func TestDemandIsAnOverlayOfBalancedUpstreams(t *testing.T) {
	web := topology.Key{Namespace: "shop", Name: "web"}
	d := topology.NewDirectory()
	apply := func(b topology.Batch) *topology.Snapshot {
		t.Helper()
		s, err := d.Apply(b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	demand := func(w uint64) topology.Batch {
		var b topology.Batch
		b.PutDemand(web, topology.AppliedDemand{Zones: []affinity.Demand{{Zone: topologytest.Zones[0], Weight: w}}})
		return b
	}
	s0 := apply(topologytest.Zoned(web, affinity.PreferSameZone))
	if s := apply(demand(3)); s != s0 {
		t.Fatalf("demand on an upstream that is not Balanced made revision %d", s.Revision)
	}
	s1 := apply(topologytest.Zoned(web, affinity.Balanced))
	if got := s1.Upstream(web).Demand.Zones; len(got) != 1 || got[0].Weight != 3 {
		t.Fatalf("Balanced now: demand %v, want the one kept (3)", got)
	}
	s2 := apply(demand(5))
	keys, _ := s2.ChangedSince(s1.Revision)
	if s2.Revision != s1.Revision+1 || !slices.Equal(keys, []topology.Key{web}) ||
		s2.Upstream(web).ClusterRevision != s1.Upstream(web).ClusterRevision || s2.Upstream(web).Demand.Zones[0].Weight != 5 {
		t.Fatalf("a demand change: revision %d, changed %v, cluster revision %d → %d", s2.Revision, keys,
			s1.Upstream(web).ClusterRevision, s2.Upstream(web).ClusterRevision)
	}
	if s := apply(demand(5)); s != s2 {
		t.Fatal("the same demand again made a revision")
	}
	b := topologytest.Zoned(web, affinity.Balanced)
	es := topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: "web-a"}, Upstream: "web",
		Locality: weights.Locality{Region: "eu", Zone: "a"}, Endpoints: []topology.Endpoint{{Address: "10.0.0.9", Port: 80, Weight: 1}}}
	b.PutEndpointSet(es)
	if s := apply(b); s.Upstream(web).Demand.Zones[0].Weight != 5 {
		t.Fatalf("an endpoint change dropped the demand: %v", s.Upstream(web).Demand)
	}
	var none topology.Batch
	none.PutDemand(web, topology.AppliedDemand{})
	if s := apply(none); !s.Upstream(web).Demand.None() {
		t.Fatalf("withdrawn, yet %v", s.Upstream(web).Demand)
	}
}

// The client classes are part of the snapshot: a change is a revision that
// resolves no upstream, the same classes again are none.
func TestClientClassesAreARevision(t *testing.T) {
	d := topology.NewDirectory()
	s0, err := d.Apply(topologytest.Zoned(topology.Key{Namespace: "shop", Name: "web"}, affinity.PreferSameZone))
	if err != nil {
		t.Fatal(err)
	}
	if s0.ClientClasses().Len() != 0 {
		t.Fatalf("classes before any were set: %d", s0.ClientClasses().Len())
	}
	var b topology.Batch
	b.SetClientClasses(topology.NewClientClasses([][]string{{"eu/b", "eu/a", "eu/a"}, nil}))
	s1, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := s1.ChangedSince(s0.Revision)
	if s1.Revision != s0.Revision+1 || len(keys) != 0 || !slices.Equal(s1.ClientClasses().Of(0), []string{"eu/a", "eu/b"}) ||
		!s1.ClientClasses().Has("eu/b") || s1.ClientClasses().Has("us/c") {
		t.Fatalf("revision %d, changed %v, classes %v", s1.Revision, keys, s1.ClientClasses().Of(0))
	}
	b.SetClientClasses(topology.NewClientClasses([][]string{{"eu/a", "eu/b"}}))
	if s2, _ := d.Apply(b); s2 != s1 {
		t.Fatal("the same classes again made a revision")
	}
}
