package skipper

import (
	"os"
	"os/exec"
	"testing"
)

func TestNeedsTool(t *testing.T) {
	t.Log("looking for the tool first")
	if _, err := exec.LookPath("no-such-tool-here"); err != nil {
		t.Skip("no-such-tool-here is not installed:\nthe Debian package no-such-tool provides it")
	}
}

// TestRaceOnly skips where FIXTURE_RACE is set, as a timing test does under -race.
func TestRaceOnly(t *testing.T) {
	if os.Getenv("FIXTURE_RACE") == "" {
		return
	}
	t.Skip("race detector instruments memory accesses unevenly; timing ratios are meaningless under -race")
}

func TestSubtests(t *testing.T) {
	t.Run("runs", func(t *testing.T) {})
	t.Run("skips", func(t *testing.T) { t.Parallel(); t.Skip("POISE_SKIP_ENVTEST=1: the envtest suites are switched off") })
}

func TestSkipNow(t *testing.T) { t.SkipNow() }

func TestPasses(t *testing.T) {}
