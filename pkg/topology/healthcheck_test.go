package topology

import (
	"testing"
	"time"
)

func TestHealthCheckMovesTheRevision(t *testing.T) {
	d := NewDirectory()
	u := Upstream{Key: Key{"shop", "checkout"}, HealthAdjustment: ControlPlane}
	u.Policy.OverprovisioningFactor = 140
	apply := func(u Upstream) uint64 {
		t.Helper()
		var b Batch
		b.PutUpstream(u)
		if _, err := d.Apply(b); err != nil {
			t.Fatal(err)
		}
		return d.Current().Revision
	}
	r0 := apply(u)
	hc := &HealthCheck{Type: "HTTP", HTTPPath: "/", ExpectedStatuses: []StatusRange{{200, 200}}, Interval: time.Second, Timeout: time.Millisecond}
	u.HealthCheck = hc
	r1 := apply(u)
	if r1 == r0 {
		t.Fatalf("adding a health check kept revision %d", r0)
	}
	same := *hc
	same.ExpectedStatuses = []StatusRange{{200, 200}}
	u.HealthCheck = &same
	if r := apply(u); r != r1 {
		t.Fatalf("an equal health check moved the revision from %d to %d", r1, r)
	}
	other := same
	other.ExpectedStatuses = []StatusRange{{200, 299}}
	u.HealthCheck = &other
	if r := apply(u); r == r1 {
		t.Fatalf("a changed expected status kept revision %d", r1)
	}
}
