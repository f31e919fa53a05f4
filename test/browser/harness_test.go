package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
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
// POISE_REQUIRE_CHROMIUM is set (make test sets it when hack/test-deps.sh
// installed chromium, or found it) and is skipped elsewhere, saying how to
// install it; make test then lists the skip and fails for it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium on PATH: install Debian's chromium (apt-get install chromium fonts-dejavu-core), as make test does where it can"
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
	var out testkit.Logs
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

// controlPlane runs `controlplane serve -f dir` and waits until it is ready.
type controlPlane struct {
	*cpbinary.Process
	adminURL string
}

func serve(t *testing.T, dir string) *controlPlane {
	t.Helper()
	admin := cpbinary.FreeAddr(t)
	cp := &controlPlane{adminURL: "http://" + admin}
	cp.Process = cpbinary.Start(t, binary, "serve", "-f", dir, "--xds-address", cpbinary.FreeAddr(t), "--admin-address", admin, "--debounce", "20ms")
	cp.WaitReady(t, cp.adminURL)
	return cp
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
