package topology

import (
	"slices"
	"testing"

	"poise.dev/poise/pkg/affinity"
)

// TestAffinityChangeIsAnUpstreamChange: every change of the affinity, its
// origin alone included, is a change of the Upstream (a new revision and
// ClusterRevision, so the publisher translates it again); putting the same
// affinity again changes nothing.
func TestAffinityChangeIsAnUpstreamChange(t *testing.T) {
	d := NewDirectory()
	k := Key{"default", "api"}
	put := func(a *Affinity) *Snapshot {
		t.Helper()
		u := upstream("api")
		u.Affinity = a
		var b Batch
		b.PutUpstream(u)
		b.PutEndpointSet(set("a", "api", "r1", 2, 0))
		return mustApply(t, d, b)
	}
	prev := put(nil)
	for _, step := range []struct {
		name string
		a    *Affinity
	}{
		{"a Service prefers the same zone", &Affinity{Mode: affinity.PreferSameZone, Origin: "Service default/api trafficDistribution PreferClose"}},
		{"the same mode under the Service's other name", &Affinity{Mode: affinity.PreferSameZone, Origin: "Service default/api trafficDistribution PreferSameZone"}},
		{"the Upstream sets None", &Affinity{Mode: affinity.None, Origin: OriginLocalityAffinity}},
		{"failover regions", &Affinity{Mode: affinity.PreferSameRegion, FailoverRegions: []string{"us"}, Origin: OriginLocalityAffinity}},
		{"other failover regions", &Affinity{Mode: affinity.PreferSameRegion, FailoverRegions: []string{"ap"}, Origin: OriginLocalityAffinity}},
		{"nothing sets it", nil},
	} {
		cur := put(step.a)
		if cur.Revision == prev.Revision {
			t.Fatalf("%s: revision stayed %d", step.name, cur.Revision)
		}
		if u := cur.Upstream(k); u.ClusterRevision != cur.Revision || !u.Upstream.Affinity.equal(step.a) {
			t.Fatalf("%s: cluster revision %d at revision %d, affinity %+v", step.name, u.ClusterRevision, cur.Revision, u.Upstream.Affinity)
		}
		if again := put(step.a); again != cur {
			t.Fatalf("%s: putting it again made revision %d", step.name, again.Revision)
		}
		prev = cur
	}
}

// TestExplicitNoneIsTheBaseSplit: an Upstream that sets None keeps a
// non-nil Affinity, and every class still receives the one None split.
func TestExplicitNoneIsTheBaseSplit(t *testing.T) {
	d := NewDirectory()
	u := upstream("api")
	u.Affinity = &Affinity{Mode: affinity.None, Origin: OriginLocalityAffinity}
	var b Batch
	b.PutUpstream(u)
	b.PutEndpointSet(set("a", "api", "r1", 2, 0))
	b.PutEndpointSet(set("b", "api", "r2", 2, 1))
	st := mustApply(t, d, b).Upstream(Key{"default", "api"})
	if st.Upstream.ModeOf() != affinity.None {
		t.Fatalf("mode %v", st.Upstream.ModeOf())
	}
	for _, from := range []affinity.Zone{{Region: "r1"}, {Region: "r2", Zone: "z"}, {}} {
		c, err := st.ForClass(from, []affinity.Demand{{Zone: affinity.Zone{Region: "r1"}, Weight: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Base(st) || c.Mode != affinity.None || c.Effective != nil || c.Balanced != nil {
			t.Errorf("clients in %s: %+v, want the base state", from, c)
		}
	}
}

// zoneSet is set() in region/zone.
func zoneSet(name, up, region, zone string, n, unhealthy int) EndpointSet {
	s := set(name, up, region, n, unhealthy)
	s.Locality.Zone = zone
	return s
}

// TestLocalShares holds status.clientZones to the worked examples 5 and 6
// of docs/weights.md: the share of each zone's clients kept in their zone.
func TestLocalShares(t *testing.T) {
	a, b, c := affinity.Zone{Region: "eu", Zone: "a"}, affinity.Zone{Region: "eu", Zone: "b"}, affinity.Zone{Region: "us", Zone: "c"}
	example := func(mode affinity.Mode, sets ...EndpointSet) *UpstreamState {
		u := upstream("api")
		u.Affinity = &Affinity{Mode: mode, Origin: OriginLocalityAffinity}
		var batch Batch
		batch.PutUpstream(u)
		for _, s := range sets {
			batch.PutEndpointSet(s)
		}
		return mustApply(t, NewDirectory(), batch).Upstream(Key{"default", "api"})
	}
	spill := example(affinity.PreferSameZone, zoneSet("a", "api", "eu", "a", 2, 1), zoneSet("b", "api", "eu", "b", 2, 0), zoneSet("c", "api", "us", "c", 2, 0))
	balanced := example(affinity.Balanced, zoneSet("a", "api", "eu", "a", 2, 0), zoneSet("b", "api", "eu", "b", 2, 0))
	demand := []affinity.Demand{{Zone: a, Weight: 3}, {Zone: b, Weight: 1}}
	for _, tc := range []struct {
		name   string
		u      *UpstreamState
		demand []affinity.Demand
		limit  int
		want   []ZoneLocal
		more   int
	}{
		{"example 5", spill, nil, 16, []ZoneLocal{{Zone: a, Local: 700_000}, {Zone: b, Local: 1_000_000}, {Zone: c, Local: 1_000_000}}, 0},
		{"example 5, two zones shown", spill, nil, 2, []ZoneLocal{{Zone: a, Local: 700_000}, {Zone: b, Local: 1_000_000}}, 1},
		{"example 6", balanced, demand, 16, []ZoneLocal{{Zone: a, Local: 666_667, Demand: 3}, {Zone: b, Local: 1_000_000, Demand: 1}}, 0},
		{"example 6 before any demand", balanced, nil, 16, []ZoneLocal{
			{Zone: a, Local: 500_000, Note: "no client declares demand"}, {Zone: b, Local: 500_000, Note: "no client declares demand"}}, 0},
	} {
		got, more := tc.u.LocalShares(tc.demand, tc.limit)
		if !slices.Equal(got, tc.want) || more != tc.more {
			t.Errorf("%s: %+v (%d more), want %+v (%d more)", tc.name, got, more, tc.want, tc.more)
		}
	}
	if got, _ := example(affinity.None, zoneSet("a", "api", "eu", "a", 2, 0)).LocalShares(nil, 16); got != nil {
		t.Errorf("mode None: %+v", got)
	}
}
