package testkit

import (
	"testing"
	"time"
)

// Every is how often Eventually asks again.
const Every = 10 * time.Millisecond

// Eventually asks f every Every until it reports done, and returns how long
// that took. When within has passed, the test fails with what and f's last
// detail, which should say what was seen instead.
func Eventually(t testing.TB, within time.Duration, what string, f func() (done bool, detail string)) time.Duration {
	t.Helper()
	return EventuallyEvery(t, within, Every, what, f)
}

// EventuallyEvery is Eventually asking every interval: for conditions that
// cost a real cluster a request each time.
func EventuallyEvery(t testing.TB, within, interval time.Duration, what string, f func() (done bool, detail string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		done, detail := f()
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			if detail == "" {
				t.Fatalf("%s: not within %v", what, within)
			}
			t.Fatalf("%s: not within %v: %s", what, within, detail)
		}
		time.Sleep(interval)
	}
}
