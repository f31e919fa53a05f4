//go:build !race

package publish_test

const raceEnabled = false
