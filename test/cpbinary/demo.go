package cpbinary

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// DemoExamples copies the bundled manifests (examples/*.yaml, from the
// module root at root) into a directory of the test, each loopback port of
// the demo's upstream (examples/cart.yaml) replaced by a free one, so that
// a demo serving it binds nothing another test or a person's `make demo`
// holds. It returns the directory and the ports, by the example's.
func DemoExamples(t testing.TB, root string) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples under %s: %v", root, err)
	}
	ports := map[string]string{}
	loopbackPort := regexp.MustCompile(`address: 127\.0\.0\.1, port: ([0-9]+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := loopbackPort.ReplaceAllStringFunc(string(b), func(m string) string {
			old := loopbackPort.FindStringSubmatch(m)[1]
			if ports[old] == "" {
				ports[old] = FreePort(t)
			}
			return strings.Replace(m, old, ports[old], 1)
		})
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(ports) == 0 {
		t.Fatalf("no loopback endpoint in %s/examples: the demo has nothing to start", root)
	}
	return dir, ports
}

// Line is one line a process wrote and when it arrived.
type Line struct {
	At   time.Time
	Text string
}

// Lines keeps a process's output line by line, with the time each line
// arrived, for a test that waits for a line (StartTo writes to it).
type Lines struct {
	mu      sync.Mutex
	partial bytes.Buffer
	lines   []Line
	more    chan struct{} // closed and replaced when a line arrives
}

// NewLines is an empty Lines.
func NewLines() *Lines { return &Lines{more: make(chan struct{})} }

// Write keeps every whole line of p; a partial line waits for its end.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial.Write(p)
	now := time.Now()
	added := false
	for {
		i := bytes.IndexByte(l.partial.Bytes(), '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, Line{At: now, Text: string(l.partial.Next(i + 1)[:i])})
		added = true
	}
	if added {
		close(l.more)
		l.more = make(chan struct{})
	}
	return len(p), nil
}

// All is every line so far.
func (l *Lines) All() []Line {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Line(nil), l.lines...)
}

// String is every line so far, as written.
func (l *Lines) String() string {
	var b strings.Builder
	for _, x := range l.All() {
		b.WriteString(x.Text + "\n")
	}
	return b.String()
}

// Wait waits until a line from the from-th on matches re, and returns its
// index and the line; it fails the test with what when none has within
// the time given, or when done (the process's end, after which it has
// written everything) is closed first.
func (l *Lines) Wait(t testing.TB, within time.Duration, done <-chan struct{}, what string, from int, re *regexp.Regexp) (int, Line) {
	t.Helper()
	expired := time.NewTimer(within)
	defer expired.Stop()
	for {
		l.mu.Lock()
		more := l.more // taken first: a line after the search closes it
		l.mu.Unlock()
		if i, x, ok := l.find(from, re); ok {
			return i, x
		}
		select {
		case <-more:
		case <-done:
			if i, x, ok := l.find(from, re); ok {
				return i, x
			}
			t.Fatalf("%s: the process ended first; its output:\n%s", what, l.String())
		case <-expired.C:
			t.Fatalf("%s: no line matching %q within %v; the output:\n%s", what, re, within, l.String())
		}
	}
}

// find is the first line from the from-th on that matches re.
func (l *Lines) find(from int, re *regexp.Regexp) (int, Line, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; i < len(l.lines); i++ {
		if re.MatchString(l.lines[i].Text) {
			return i, l.lines[i], true
		}
	}
	return 0, Line{}, false
}

// Demo is the demo program (cmd/demo) running for a test, serving with a
// controlplane binary on free loopback addresses.
type Demo struct {
	*Process
	Out               *Lines
	XDSAddr, AdminURL string
	AdminAddr         string
}

// StartDemo runs demoBin -f dir with the controlplane binary cp, on free
// addresses, with args after those; its output is kept line by line. At
// the end of the test it is stopped (which stops its control plane); a
// data race either reports fails the test, and a failed test logs the
// output.
func StartDemo(t testing.TB, demoBin, cp, dir string, args ...string) *Demo {
	t.Helper()
	d := &Demo{Out: NewLines(), XDSAddr: FreeAddr(t), AdminAddr: FreeAddr(t)}
	d.AdminURL = "http://" + d.AdminAddr
	// registered before StartTo's Stop, so it runs after it: all the
	// output is in
	t.Cleanup(func() {
		if strings.Contains(d.Out.String(), raceReport) {
			t.Error("the demo or its control plane reported a data race")
		}
		if t.Failed() {
			t.Logf("demo output:\n%s", d.Out.String())
		}
	})
	d.Process = StartTo(t, d.Out, demoBin, append([]string{"-f", dir, "--controlplane", cp,
		"--xds-address", d.XDSAddr, "--admin-address", d.AdminAddr}, args...)...)
	return d
}
