package topology

import (
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
