package topology

import (
	"testing"
	"time"
)

// TestLoadReportingIsAnUpstreamChange: turning load reporting on or off, or
// changing its interval, is a change of the Upstream (its Cluster carries
// lrs_server, and LRS answers with the interval), so the revision and
// ClusterRevision move; putting the same again changes nothing.
func TestLoadReportingIsAnUpstreamChange(t *testing.T) {
	d := NewDirectory()
	k := Key{"default", "api"}
	put := func(interval time.Duration) *Snapshot {
		t.Helper()
		u := upstream("api")
		u.LoadReportInterval = interval
		var b Batch
		b.PutUpstream(u)
		b.PutEndpointSet(set("a", "api", "r1", 2, 0))
		return mustApply(t, d, b)
	}
	prev := put(0)
	for _, interval := range []time.Duration{10 * time.Second, 5 * time.Second, 0} {
		cur := put(interval)
		if cur.Revision == prev.Revision {
			t.Fatalf("interval %v: revision stayed %d", interval, cur.Revision)
		}
		if u := cur.Upstream(k); u.ClusterRevision != cur.Revision || u.Upstream.LoadReportInterval != interval {
			t.Fatalf("interval %v: cluster revision %d at revision %d, interval %v", interval, u.ClusterRevision, cur.Revision, u.Upstream.LoadReportInterval)
		}
		if again := put(interval); again != cur {
			t.Fatalf("interval %v: putting it again made revision %d", interval, again.Revision)
		}
		prev = cur
	}
}
