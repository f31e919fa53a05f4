// Package cpbinary serves the test packages that run the controlplane as a
// process: it builds the binary once per package, finds free loopback
// addresses for it to listen on, and runs it for a test.
package cpbinary

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	build := buildCommand(*path)
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
	return BuildCommand(t, "controlplane")
}

// BuildCommand builds poise.dev/poise/cmd/NAME (controlplane, demo) into
// the test's temporary directory, with the race detector under RaceEnv,
// and returns its path.
func BuildCommand(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if out, err := commandBuild(path, name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return path
}

// RaceEnv, set to 1, has the controlplane (and any command BuildCommand
// builds) built with the race detector:
// make test sets it for test/e2e, whose own process holds only gRPC
// clients and backends, so that the race detector watches the plane those
// clients talk to. A race the binary reports fails the test that ran it.
const RaceEnv = "POISE_CONTROLPLANE_RACE"

// raceReport is what a binary built with -race writes when it sees one.
const raceReport = "WARNING: DATA RACE"

func buildCommand(path string) *exec.Cmd { return commandBuild(path, "controlplane") }

// commandBuild is `go build -o path poise.dev/poise/cmd/NAME`.
func commandBuild(path, name string) *exec.Cmd {
	args := []string{"build"}
	if os.Getenv(RaceEnv) == "1" {
		args = append(args, "-race")
	}
	return exec.Command("go", append(args, "-o", path, "poise.dev/poise/cmd/"+name)...)
}

// FreeAddr is a loopback address no one listens on now, for a process a
// test starts a moment later. Its port is below the kernel's ephemeral
// range (FreePort): a port the kernel handed to a listener on port 0 and
// took back would be handed again to the next outgoing connection or
// listener of any test running meanwhile, and the process would then find
// it taken.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", FreePort(t))
}

// ports are the ports FreePort handed out in this process.
var ports = struct {
	sync.Mutex
	taken map[int]bool
}{taken: map[int]bool{}}

// FreePort is a loopback port no one listens on now, below the kernel's
// ephemeral range, where no listener on port 0 and no outgoing connection
// is given one; it is handed out once per process.
func FreePort(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const floor = 10000
	if low <= floor+1000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for the ports of the processes tests start", low)
	}
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		p := floor + rand.IntN(low-floor)
		if ports.taken[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports.taken[p] = true
		return strconv.Itoa(p)
	}
	t.Fatalf("no free port in [%d, %d)", floor, low)
	return ""
}

// Process is a controlplane running for one test, its output kept (or
// sent where StartTo says).
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	// raceChecked: the output was searched for a race report once.
	raceChecked bool
}

// stopWithin is how long an interrupted process may take to drain and end
// before it is killed and the test failed.
const stopWithin = 20 * time.Second

// Start runs bin with args; at the end of the test it is stopped (see
// Stop), and its output is logged if the test failed.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	// Clean-ups run last first: this one, registered before start's Stop,
	// logs the output once the process has ended and written all of it.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controlplane output:\n%s", p.Logs())
		}
	})
	p.start(t, (*output)(p), bin, args)
	return p
}

// StartTo is Start with the child's stdout and stderr written to out, which
// must take concurrent writes, instead of kept: for a test that bounds or
// counts the output itself. Logs is then empty.
func StartTo(t testing.TB, out io.Writer, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	p.start(t, out, bin, args)
	return p
}

func (p *Process) start(t testing.TB, out io.Writer, bin string, args []string) {
	t.Helper()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Stop(t) })
}

// Stop interrupts the process and waits for it to end; one that has not
// ended within 20 s is killed and the test failed. Stopping an ended
// process does nothing.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	defer p.checkRaces(t)
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(stopWithin):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("controlplane did not stop within %v of SIGINT", stopWithin)
	}
}

// checkRaces fails the test, once, if the process (built with RaceEnv)
// reported a data race in the output it kept.
func (p *Process) checkRaces(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.raceChecked {
		return
	}
	p.raceChecked = true
	if out := p.out.String(); strings.Contains(out, raceReport) {
		t.Errorf("the controlplane reported a data race:\n%s", out)
	}
}

// WaitReady waits up to 20 s for adminURL/readyz to answer 200, and fails
// the test if it does not or the process ends first. Readiness (the first
// snapshot published) is seen only on /readyz, so it is asked every 20 ms;
// the end of the process is seen at once. (A helper package, cpbinary does
// not import testkit: packages of one layer do not import each other.)
func (p *Process) WaitReady(t testing.TB, adminURL string) {
	t.Helper()
	const within = 20 * time.Second
	client := &http.Client{Timeout: 2 * time.Second}
	expired := time.NewTimer(within)
	defer expired.Stop()
	ask := time.NewTicker(20 * time.Millisecond)
	defer ask.Stop()
	for {
		if resp, err := client.Get(adminURL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("controlplane exited (code %d) before it was ready:\n%s", p.ExitCode(), p.Logs())
		case <-expired.C:
			t.Fatalf("controlplane not ready after %v:\n%s", within, p.Logs())
		case <-ask.C:
		}
	}
}

// Pid is the process's ID, for reading its /proc entries.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

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
