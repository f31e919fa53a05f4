// Package cpbinary serves the test packages that run the controlplane as a
// process: it builds the binary once per package and finds free loopback
// addresses for it to listen on.
package cpbinary

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds poise.dev/poise/cmd/controlplane into a temporary directory,
// sets *path to it, runs the package's tests and removes the directory. Its
// result is TestMain's exit code.
func Main(m *testing.M, path *string) int {
	dir, err := os.MkdirTemp("", "poise-controlplane-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*path = filepath.Join(dir, "controlplane")
	build := exec.Command("go", "build", "-o", *path, "poise.dev/poise/cmd/controlplane")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build controlplane:", err)
		return 1
	}
	return m.Run()
}

// Build builds the controlplane into the test's temporary directory and
// returns its path, for one test of a package whose TestMain already does
// other work (test/kube's starts an apiserver).
func Build(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "controlplane")
	if out, err := exec.Command("go", "build", "-o", path, "poise.dev/poise/cmd/controlplane").CombinedOutput(); err != nil {
		t.Fatalf("build controlplane: %v\n%s", err, out)
	}
	return path
}

// FreeAddr is a loopback address no one listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}
