package failer

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	fmt.Fprintln(os.Stderr, "TestMain: set-up printed outside any test")
	os.Exit(m.Run())
}

func TestGood(t *testing.T) { t.Log("not printed: this test passed") }

func TestBad(t *testing.T) {
	t.Log("first line of the failing test")
	t.Errorf("got %d, want %d\nsecond line of the error", 1, 2)
}

func TestParent(t *testing.T) {
	t.Run("ok", func(t *testing.T) { t.Log("sibling of a failing subtest") })
	t.Run("broken", func(t *testing.T) { t.Fatal("the subtest failed") })
}

func TestSkippedInFailingPackage(t *testing.T) { t.Skip("not printed without -v") }
