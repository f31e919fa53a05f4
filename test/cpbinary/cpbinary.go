// Package cpbinary serves the test packages that run the controlplane as a
// process: it builds the binary once per package, finds free loopback
// addresses for it to listen on, and runs it for a test.
package cpbinary

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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

// Process is a controlplane running for one test, its output kept.
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// Start runs bin with args; at the end of the test it is interrupted and
// waited for (killed, and the test failed, if it has not stopped within
// 15 s), and its output is logged if the test failed.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = (*output)(p), (*output)(p)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("controlplane did not stop within 15 s of SIGINT")
		}
		if t.Failed() {
			t.Logf("controlplane output:\n%s", p.Logs())
		}
	})
	return p
}

// output is a Process's writer for the child's stdout and stderr.
type output Process

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.Write(b)
}

// Logs is what the process wrote so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Signal sends sig to the process: syscall.SIGTERM is what the kubelet
// sends a pod's container when the pod is deleted or replaced.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed once the process has ended; ExitCode is then its exit
// code.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode is the exit code of an ended process (-1 when a signal ended
// it, or before it has ended).
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
