package publish

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// wokeCache is a cache whose Apply says it woke as many streams as the
// test sets, and reports each Apply's version.
type wokeCache struct {
	*xdscache.Cache
	woken   chan int
	applied chan string
}

func (c *wokeCache) Apply(u xdscache.Update) int {
	c.Cache.Apply(u)
	c.applied <- u.Version
	return <-c.woken
}

// TestRunPacesByFanOut: after a publication that woke many streams, Run
// holds the next for PacePerStream each (here an hour each, at most an
// hour: the test's timer, not the clock, ends the wait) and publishes what
// arrived meanwhile as one; after one that woke none, the next change is
// published at once, without a timer.
func TestRunPacesByFanOut(t *testing.T) {
	c := &wokeCache{Cache: xdscache.New(int(translate.NumRenderings), func(*core.Node) int { return int(translate.Weighted) }),
		woken: make(chan int, 1), applied: make(chan string, 1)}
	p := New(c, "inst", nil)
	p.pacePerStream, p.maxPace = time.Hour, time.Hour
	waits, fire := make(chan time.Duration, 1), make(chan time.Time)
	p.after = func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}
	d := topology.NewDirectory()
	apply := func(b topology.Batch) uint64 {
		t.Helper()
		s, err := d.Apply(b)
		if err != nil {
			t.Fatal(err)
		}
		return s.Revision
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	first := apply(zoned(affinity.PreferSameZone))
	go func() { done <- p.Run(ctx, d) }()
	if v := <-c.applied; v != p.Version(first) {
		t.Fatalf("first publication %s, want %s", v, p.Version(first))
	}
	c.woken <- 3 // the first publication woke 3 streams: the next waits 3 h, at most 1 h

	apply(withClasses("eu/a"))
	if w := <-waits; w <= 59*time.Minute || w > time.Hour {
		t.Fatalf("Run waits %v after a publication that woke 3 streams, want just under an hour", w)
	}
	last := apply(withClasses("eu/a", "us/c")) // arrives while Run waits
	select {
	case v := <-c.applied:
		t.Fatalf("published %s while paced", v)
	default:
	}
	fire <- time.Now()
	if v := <-c.applied; v != p.Version(last) {
		t.Fatalf("after the pause, published %s; want the two changes of the pause as one, %s", v, p.Version(last))
	}
	c.woken <- 0 // it woke no stream: the next is not paced

	after := apply(withClasses("us/c"))
	if v := <-c.applied; v != p.Version(after) {
		t.Fatalf("published %s, want %s", v, p.Version(after))
	}
	// Run asks for a timer before it publishes: none was asked for.
	select {
	case w := <-waits:
		t.Fatalf("Run waited %v after a publication that woke no stream", w)
	default:
	}
	c.woken <- 0
}

func TestPace(t *testing.T) {
	p := New(nil, "inst", nil)
	for _, tc := range []struct {
		woken int
		want  time.Duration
	}{
		{0, 0},
		{1, PacePerStream},
		{1000, 1000 * PacePerStream},
		{25000, MaxPace},
		{1 << 40, MaxPace},
	} {
		if got := p.pace(tc.woken); got != tc.want {
			t.Errorf("pace(%d) = %v, want %v", tc.woken, got, tc.want)
		}
	}
}
