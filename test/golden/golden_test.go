package golden_test

import (
	"testing"

	"poise.dev/poise/test/golden"
)

func TestDiffShowsTheFirstDifferentLine(t *testing.T) {
	got := golden.Diff("a\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n")
	want := "     2   b\n     3   c\n     4   d\n     5 - e\n     5 + E\n"
	if got != want {
		t.Errorf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if got := golden.Diff("a\n", "a\n"); got != "(no line differs)" {
		t.Errorf("Diff of equal texts: %q", got)
	}
}
