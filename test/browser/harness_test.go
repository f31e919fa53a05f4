package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// binary is the controlplane built once for the whole package.
var binary string

func TestMain(m *testing.M) { os.Exit(cpbinary.Main(m, &binary)) }

// chromiumPath finds Debian's chromium. Without it the test fails where
// POISE_REQUIRE_CHROMIUM is set (CI installs it) and is skipped elsewhere,
// saying how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium on PATH: install Debian's chromium (apt-get install chromium fonts-dejavu-core), as .ci/run does"
	if os.Getenv("POISE_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why + " (POISE_REQUIRE_CHROMIUM is set)")
	}
	t.Skip(why)
	return ""
}

// browser starts headless chromium with the flags this machine needs (no
// sandbox as root, no GPU, no network but loopback: background fetches of
// Google's hosts are refused here) and a fresh profile, and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	var out syncBuffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
		chromedp.CombinedOutput(&out),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%s", out.String())
		}
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout (see chromedp.Run)
		t.Fatalf("start chromium: %v\n%s", err, out.String())
	}
	return ctx
}

// run runs one browser action with a timeout.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// controlPlane runs `controlplane serve -f dir` and waits until it is ready.
type controlPlane struct {
	adminURL string
	out      syncBuffer
}

func serve(t *testing.T, dir string) *controlPlane {
	t.Helper()
	admin := cpbinary.FreeAddr(t)
	cp := &controlPlane{adminURL: "http://" + admin}
	cmd := exec.Command(binary, "serve", "-f", dir, "--xds-address", cpbinary.FreeAddr(t), "--admin-address", admin, "--debounce", "20ms")
	cmd.Stdout, cmd.Stderr = &cp.out, &cp.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("controlplane output:\n%s", cp.out.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(cp.adminURL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cp
			}
		}
		select {
		case <-exited:
			t.Fatalf("controlplane exited before it was ready:\n%s", cp.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("controlplane not ready after 20s:\n%s", cp.out.String())
		}
	}
}

// liveRevision is the revision /debug/explain serves now.
func (cp *controlPlane) liveRevision(t *testing.T) uint64 {
	t.Helper()
	var rep explain.Report
	testkit.MustGetJSON(t, cp.adminURL+"/debug/explain", &rep)
	return rep.Revision
}

// explainJSON runs `controlplane explain -f dir -o json [args]`: the figures
// the page must draw, computed offline by the command people read.
func explainJSON(t *testing.T, dir string, args ...string) explain.Report {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"explain", "-f", dir, "-o", "json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("controlplane explain %v: %v\n%s", args, err, stderr.String())
	}
	var rep explain.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
