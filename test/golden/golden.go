package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the current output")

// Updating reports whether the test runs with -update, rewriting its golden
// files instead of comparing with them.
func Updating() bool { return *update }

// Check compares got with testdata/NAME.golden, or writes it there with -update.
func Check(t testing.TB, name, got string) {
	t.Helper()
	CheckFile(t, filepath.Join("testdata", name+".golden"), []byte(got))
}

// CheckFile compares got with the file at path, relative to the test's
// package directory, or writes it there with -update.
func CheckFile(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update in this package to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test with -update in this package after checking the change):\n%s", path, Diff(string(want), string(got)))
	}
}

// Diff shows the first line where two texts differ, after the three lines
// before it.
func Diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			var b strings.Builder
			for j := max(0, i-3); j < i; j++ {
				fmt.Fprintf(&b, "  %4d   %s\n", j+1, w[j])
			}
			fmt.Fprintf(&b, "  %4d - %s\n  %4d + %s\n", i+1, wl, i+1, gl)
			return b.String()
		}
	}
	return "(no line differs)"
}
