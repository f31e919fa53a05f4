package healthcheck

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// A new generation at a checked address is a new target: the old one's
// verdict is withdrawn, the new one is judged from Unknown (one pass makes
// it Healthy, not healthyThreshold), and a result of the old one's check
// still in flight when the generation changed is dropped.
func TestNewGenerationIsCheckedAfresh(t *testing.T) {
	t.Parallel()
	hc := fast("TCP")
	release := make(chan struct{})
	started := make(chan Target, 16)
	var blockOld, released atomic.Bool
	failedAfterRelease := make(chan struct{}, 16)
	probe := func(ctx context.Context, _ *topology.HealthCheck, tg Target) error {
		if tg.Generation == "old" {
			if blockOld.Load() {
				started <- tg
				<-release
			}
			return errors.New("old backend down")
		}
		return nil
	}
	observe := func(passed bool, _ time.Duration) {
		if !passed && released.Load() {
			failedAfterRelease <- struct{}{}
		}
	}
	c := New(Config{Name: "poise-0", Probe: probe, Observe: observe})
	out := run(t, c)
	old := Target{Address: "10.0.0.7", Port: 8080, Generation: "old"}
	c.Set(up, hc, []Target{old})
	v := await(t, out, weights.ProbeUnhealthy, bound(hc))
	if v.Target != old {
		t.Fatalf("verdict %+v, want the old generation's", v)
	}

	// the next check of the old generation hangs; the generation changes
	// meanwhile, then the old check fails
	blockOld.Store(true)
	select {
	case <-started:
	case <-time.After(bound(hc)):
		t.Fatal("no check of the old generation started")
	}
	nw := Target{Address: "10.0.0.7", Port: 8080, Generation: "new"}
	c.Set(up, hc, []Target{nw})
	w := await(t, out, weights.ProbeUnknown, time.Second)
	if w.Target != old || w.Origin != "" {
		t.Fatalf("withdrawal %+v, want the old generation's", w)
	}
	released.Store(true)
	close(release)
	v = await(t, out, weights.ProbeHealthy, bound(hc))
	if v.Target != nw || v.Origin != "active check by poise-0: 1 pass" {
		t.Fatalf("verdict %+v, want the new generation Healthy on its first pass", v)
	}
	// the old check's late failure has been recorded: it was dropped, and
	// the new generation's state holds no failure
	select {
	case <-failedAfterRelease:
	case <-time.After(bound(hc)):
		t.Fatal("the old generation's hanging check never finished")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[targetKey{up, old}]; ok {
		t.Error("the old generation is still checked")
	}
	e := c.entries[targetKey{up, nw}]
	if e == nil || e.st.verdict != weights.ProbeHealthy || e.st.failures != 0 {
		t.Errorf("the new generation's state %+v, want Healthy with no failure", e)
	}
}
