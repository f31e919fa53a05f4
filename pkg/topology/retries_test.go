package topology

import "testing"

// TestRetriesIsAnUpstreamChange: setting, changing or removing a retry
// policy is a change of the Upstream (its route carries the policy, its
// Cluster the budget), so the revision and ClusterRevision move; putting
// the same again changes nothing.
func TestRetriesIsAnUpstreamChange(t *testing.T) {
	d := NewDirectory()
	k := Key{"default", "api"}
	put := func(r *RetryPolicy) *Snapshot {
		t.Helper()
		u := upstream("api")
		if r != nil {
			c := *r // a new pointer each time: equality is by value
			u.Retries = &c
		}
		var b Batch
		b.PutUpstream(u)
		b.PutEndpointSet(set("a", "api", "r1", 2, 0))
		return mustApply(t, d, b)
	}
	base := RetryPolicy{On: RetryUnavailable, NumRetries: 1, BaseInterval: 25e6, MaxInterval: 250e6}
	budget := base
	budget.BudgetPercent, budget.BudgetMinConcurrency = 20, 3
	more := budget
	more.NumRetries = 2
	prev := put(nil)
	for _, tc := range []struct {
		name string
		r    *RetryPolicy
	}{{"set", &base}, {"a budget", &budget}, {"one more retry", &more}, {"removed", nil}} {
		cur := put(tc.r)
		u := cur.Upstream(k)
		switch {
		case cur.Revision == prev.Revision || u.ClusterRevision != cur.Revision:
			t.Fatalf("%s: revision %d (before %d), cluster revision %d", tc.name, cur.Revision, prev.Revision, u.ClusterRevision)
		case !u.Upstream.Retries.Equal(tc.r):
			t.Fatalf("%s: policy %+v, want %+v", tc.name, u.Upstream.Retries, tc.r)
		case put(tc.r) != cur:
			t.Fatalf("%s: putting it again made a new revision", tc.name)
		}
		prev = cur
	}
}
