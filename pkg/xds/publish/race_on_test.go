//go:build race

package publish_test

// raceEnabled: the race detector changes allocation counts (sync.Pool drops objects).
const raceEnabled = true
