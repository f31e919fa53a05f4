// Package luatest runs a generated spatial routing chunk under the real LuaJIT
// interpreter with a stub Envoy request handle (harness.lua), for the differential test
// of pkg/partitionmap and for checking the chunk a control plane serves.
package luatest

import (
	"bufio"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

//go:embed harness.lua
var harness []byte

// Required is the environment variable that makes a missing interpreter a failure
// rather than a skip; make test sets it when hack/test-deps.sh installed Debian's
// luajit, or found it.
const Required = "POISE_REQUIRE_LUAJIT"

// Find returns the LuaJIT interpreter's path, or "" and why there is none. With
// POISE_REQUIRE_LUAJIT set, a missing interpreter fails the test.
func Find(t testing.TB) (path, missing string) {
	t.Helper()
	p, err := exec.LookPath("luajit")
	if err != nil {
		if os.Getenv(Required) != "" {
			t.Fatalf("luajit is required (%s is set) but not found: %v", Required, err)
		}
		return "", fmt.Sprintf("the LuaJIT interpreter is not installed (Debian package luajit; make test installs it where it can): %v", err)
	}
	return p, ""
}

// Need returns the interpreter's path or skips the test, saying why.
func Need(t testing.TB) string {
	t.Helper()
	p, missing := Find(t)
	if p == "" {
		t.Skip("skipping: " + missing)
	}
	return p
}

// Request is what the script reads from one request; NoBBox and NoCRS make those
// headers absent rather than empty, and an empty RequestID is an absent x-request-id.
type Request struct {
	Product, BBox, CRS, Path, RequestID string
	NoBBox, NoCRS                       bool
}

// Run runs chunk (DATA followed by the logic) under the interpreter bin for each request
// and returns one "status\treason\tcluster" line per request, as Envoy would act on it.
// Extra arguments go to the harness (a round count makes it print the decision cost).
func Run(t testing.TB, bin, chunk string, reqs []Request, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	field := func(s string, absent bool) string {
		if absent {
			return "-"
		}
		return hex.EncodeToString([]byte(s))
	}
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\n", field(r.Product, false), field(r.BBox, r.NoBBox),
			field(r.CRS, r.NoCRS), field(r.Path, false), field(r.RequestID, r.RequestID == ""))
	}
	files := map[string][]byte{"harness.lua": harness, "chunk.lua": []byte(chunk), "requests.txt": []byte(b.String())}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{filepath.Join(dir, "harness.lua"), filepath.Join(dir, "chunk.lua"), filepath.Join(dir, "requests.txt")}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
