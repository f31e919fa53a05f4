package server

import (
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"poise.dev/poise/test/testkit"
)

// A stream's hold on the large-response budget goes back when its client
// answers (release), and at the latest after its bound, so a client that
// never answers cannot keep the budget from the others.
func TestLargeHoldIsGivenBack(t *testing.T) {
	t.Parallel()
	x := &xdsServer{large: semaphore.NewWeighted(maxLargeInFlight)}
	h := &largeHold{x: x, max: 50 * time.Millisecond}
	take := func(w int64) {
		if !x.large.TryAcquire(w) {
			t.Fatal("the budget is held")
		}
		h.add(w)
	}
	take(maxLargeInFlight)
	if x.large.TryAcquire(1) {
		t.Fatal("a full budget gave more")
	}
	h.release() // the client's next request
	take(maxLargeInFlight / 2)
	take(maxLargeInFlight / 2)
	testkit.Eventually(t, 5*time.Second, "the budget of a client that never answered given back", func() (bool, string) {
		return x.large.TryAcquire(maxLargeInFlight), "the client keeps it"
	})
	x.large.Release(maxLargeInFlight)
	h.release() // after the timer: gives back nothing twice
	if !x.large.TryAcquire(maxLargeInFlight) {
		t.Fatal("the budget is short after a second release")
	}
}
