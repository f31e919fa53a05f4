package topology

import (
	"testing"

	"poise.dev/poise/pkg/weights"

	"poise.dev/poise/pkg/partitionmap"
)

func cadastre(ns string) SpatialDomain {
	return SpatialDomain{Key: Key{ns, "cadastre"}, Domain: partitionmap.Domain{Name: "cadastre", GridDeg: 5, MaxCells: 256, CapPercent: partitionmap.NoCap,
		Replicas: []partitionmap.Replica{{Name: "eu-west", Upstream: "west", Region: "eu-west"}, {Name: "us-east", Upstream: "east", Region: "us-east"}},
		Products: []partitionmap.Product{{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu-west"}}}}}
}

func partition(name string, ext partitionmap.BBox, replicas ...string) Partition {
	return Partition{Key: Key{"default", name}, Domain: "cadastre", Extent: ext, Replicas: replicas}
}

func TestSpatialDomainLifecycle(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("west"))
	b.PutEndpointSet(set("w", "west", "eu-west", 2, 0))
	b.PutSpatialDomain(cadastre("default"))
	b.PutPartition(partition("fr", partitionmap.BBox{West: -5, South: 40, East: 10, North: 50}, "eu-west"))
	b.PutPartition(partition("ny", partitionmap.BBox{West: -75, South: 40, East: -70, North: 45}, "us-east"))
	b.PutPartition(partition("bad", partitionmap.BBox{West: 0, South: 0, East: 1, North: 1}, "eu-south"))
	b.PutPartition(Partition{Key: Key{"default", "stray"}, Domain: "nowhere", Replicas: []string{"x"}})
	s := mustApply(t, d, b)
	sp := s.SpatialDomain(Key{"default", "cadastre"})
	if sp == nil || !sp.Serving() {
		t.Fatalf("domain not serving: %+v", sp)
	}
	if got := sp.Map.Partitions(); len(got) != 2 {
		t.Fatalf("partitions in the map %v, want fr and ny", got)
	}
	var bad *PartitionState
	for i := range sp.Partitions {
		if sp.Partitions[i].Partition.Key.Name == "bad" {
			bad = &sp.Partitions[i]
		}
	}
	if bad == nil || bad.Problem == nil || bad.Problem.Reason != partitionmap.ProblemUnknownReplica {
		t.Fatalf("bad partition state %+v", bad)
	}
	// east does not exist: us-east is reported and has no capacity.
	if sp.Health[0] != true || sp.Health[1] != false || sp.Replicas[1].Found {
		t.Fatalf("health %v replicas %+v", sp.Health, sp.Replicas)
	}
	found := false
	for _, p := range sp.Problems {
		found = found || p.Reason == SpatialUpstreamNotFound
	}
	if !found {
		t.Fatalf("problems %+v: want UpstreamNotFound", sp.Problems)
	}
	orphan := false
	for _, o := range s.Orphans() {
		orphan = orphan || (o.Kind == KindPartition && o.Key.Name == "stray")
	}
	if !orphan {
		t.Fatalf("orphans %v: want Partition stray", s.Orphans())
	}

	// An endpoint change inside a healthy replica leaves the domain state as it was.
	b = Batch{}
	b.PutEndpointSet(set("w", "west", "eu-west", 3, 0))
	s2 := mustApply(t, d, b)
	if s2.SpatialDomain(sp.Domain.Key) != sp {
		t.Fatal("an endpoint change in a healthy replica rebuilt the domain state")
	}
	// Every probe failing puts the upstream in UseAll panic: it still routes its own
	// traffic, but the replica has no eligible capacity, so it is not healthy for
	// spatial routing. That changes health but not the map.
	b = Batch{}
	b.PutEndpointSet(set("w", "west", "eu-west", 3, 3))
	s3 := mustApply(t, d, b)
	if u := s3.Upstream(Key{"default", "west"}); u.Result.Outcome != weights.Routable || !u.Result.TotalPanic {
		t.Fatalf("an upstream whose probes all fail: %v, total panic %v; want it routing in panic", u.Result.Outcome, u.Result.TotalPanic)
	}
	sp3 := s3.SpatialDomain(sp.Domain.Key)
	if sp3 == sp || sp3.Health[0] || sp3.Map != sp.Map || sp3.MapRevision != sp.MapRevision || sp3.Revision != s3.Revision {
		t.Fatalf("after the probes fail: health %v, same map %v, revisions %d/%d", sp3.Health, sp3.Map == sp.Map, sp3.MapRevision, sp3.Revision)
	}
	// One probe passing again brings eligible capacity back.
	b = Batch{}
	b.PutEndpointSet(set("w", "west", "eu-west", 3, 2))
	if sp := mustApply(t, d, b).SpatialDomain(sp.Domain.Key); !sp.Health[0] {
		t.Fatal("a replica with one eligible endpoint is not healthy")
	}
	// The replica losing all capacity (every endpoint taken out of service) is not healthy either.
	b = Batch{}
	gone := set("w", "west", "eu-west", 3, 0)
	for i := range gone.Endpoints {
		gone.Endpoints[i].Admin = weights.Unavailable
	}
	b.PutEndpointSet(gone)
	if sp := mustApply(t, d, b).SpatialDomain(sp.Domain.Key); sp.Health[0] {
		t.Fatal("a replica with no capacity is healthy")
	}
	// The missing upstream appearing resolves the replica.
	b = Batch{}
	b.PutUpstream(upstream("east"))
	b.PutEndpointSet(set("e", "east", "us-east", 1, 0))
	sp4 := mustApply(t, d, b).SpatialDomain(sp.Domain.Key)
	if !sp4.Replicas[1].Found || !sp4.Health[1] {
		t.Fatalf("replicas %+v", sp4.Replicas)
	}
	for _, p := range sp4.Problems {
		if p.Reason == SpatialUpstreamNotFound {
			t.Fatalf("stale problem %+v", p)
		}
	}
	// Another partition the map leaves out keeps the same map and map revision.
	b = Batch{}
	b.PutPartition(partition("bad2", partitionmap.BBox{West: 0, South: 0, East: 1, North: 1}, "eu-south"))
	spBad := mustApply(t, d, b).SpatialDomain(sp.Domain.Key)
	if spBad.Map != sp4.Map || spBad.MapRevision != sp4.MapRevision || len(spBad.Partitions) != len(sp4.Partitions)+1 {
		t.Fatalf("a left-out partition changed the map: same %v, revisions %d/%d", spBad.Map == sp4.Map, spBad.MapRevision, sp4.MapRevision)
	}
	// Fixing the bad partition adds it to the map.
	b = Batch{}
	b.PutPartition(partition("bad", partitionmap.BBox{West: 0, South: 0, East: 1, North: 1}, "eu-west"))
	sp5 := mustApply(t, d, b).SpatialDomain(sp.Domain.Key)
	if len(sp5.Map.Partitions()) != 3 || sp5.MapRevision == sp.MapRevision {
		t.Fatalf("partitions %v", sp5.Map.Partitions())
	}
	// Deleting the domain removes it; its partitions become orphans.
	b = Batch{}
	b.DeleteSpatialDomain(sp.Domain.Key)
	s6 := mustApply(t, d, b)
	if s6.SpatialDomain(sp.Domain.Key) != nil || len(s6.Spatial()) != 0 {
		t.Fatal("the deleted domain is still there")
	}
	if n := len(s6.Orphans()); n != 5 {
		t.Fatalf("orphans %v", s6.Orphans())
	}
}

func TestSpatialDomainNameConflict(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutSpatialDomain(cadastre("zeta"))
	s := mustApply(t, d, b)
	if !s.SpatialDomain(Key{"zeta", "cadastre"}).Serving() {
		t.Fatal("the only domain is not serving")
	}
	b = Batch{}
	b.PutSpatialDomain(cadastre("alpha"))
	s = mustApply(t, d, b)
	z, a := s.SpatialDomain(Key{"zeta", "cadastre"}), s.SpatialDomain(Key{"alpha", "cadastre"})
	if !a.Serving() || z.Serving() || z.Problems[0].Reason != SpatialDomainConflict {
		t.Fatalf("alpha serving %v, zeta serving %v (%+v)", a.Serving(), z.Serving(), z.Problems)
	}
	b = Batch{}
	b.DeleteSpatialDomain(Key{"alpha", "cadastre"})
	if !mustApply(t, d, b).SpatialDomain(Key{"zeta", "cadastre"}).Serving() {
		t.Fatal("zeta does not take over the name")
	}
}
