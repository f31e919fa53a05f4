package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures in testdata are recorded go test -json streams: *.jsonl but
// poise-* from the module in testdata/src (testdata/src/record.sh), poise-*
// from make test's own packages with luajit and chromium hidden (the race
// run of a fresh clone's first make test, cut down to test/kind,
// test/browser, pkg/partitionmap's LuaJIT tests and a passing one, pkg/weights'
// timing test and test/kube's TestSpatialPublishing, and the run of
// TestComputeScalesNLogN without -race). Each rendering and summary is
// compared with its golden file, testdata/*.render or *.summary;
// -update rewrites them.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./hack/testsummary -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// contains wants each of must in out and none of mustNot.
func contains(t *testing.T, what, out string, must, mustNot []string) {
	t.Helper()
	for _, s := range must {
		if !strings.Contains(out, s) {
			t.Errorf("%s lacks %q", what, s)
		}
	}
	for _, s := range mustNot {
		if strings.Contains(out, s) {
			t.Errorf("%s shows %q", what, s)
		}
	}
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		// must and mustNot are what the golden file shows, said plainly.
		must, mustNot []string
	}{{
		fixture: "passing",
		must: []string{
			"ok  \texample.com/fix/pass\t", "ok  \texample.com/fix/skipper\t",
			"?   \texample.com/fix/nofiles\t[no test files]", "ok  \texample.com/fix/mainout\t",
		},
		// A passing package shows its result line alone, as go test does
		// without -v: no skip, no log, no output of its TestMain.
		mustNot: []string{"SKIP", "=== RUN", "subtest", "mainout: built", "PASS"},
	}, {
		fixture: "failing",
		must: []string{
			// the build failure, as go test prints it
			"broken/broken_test.go:5:33: undefined: undefined", "FAIL\texample.com/fix/broken [build failed]",
			// what the failing package's binary printed outside its tests
			"TestMain: set-up printed outside any test",
			// every line of a failing test, the continuation lines too
			"first line of the failing test", "got 1, want 2", "        second line of the error", "--- FAIL: TestBad",
			// a failing subtest, its passing sibling's log and its parent
			"the subtest failed", "--- FAIL: TestParent/broken", "sibling of a failing subtest", "--- FAIL: TestParent ",
			"FAIL\texample.com/fix/failer\t",
		},
		mustNot: []string{"not printed: this test passed", "TestSkippedInFailingPackage", "not printed without -v"},
	}, {
		fixture: "timeout",
		must:    []string{"waiting for something that never comes", "panic: test timed out after 3s", "hang_test.go:12", "FAIL\texample.com/fix/hang\t"},
		mustNot: []string{"passes before the hang"},
	}, {
		// The stream stops in the middle of a package (go test killed):
		// what came of it is printed, the unfinished test's lines included.
		fixture: "truncated",
		must:    []string{"FAIL\texample.com/fix/broken [build failed]", "TestMain: set-up", "got 1, want 2"},
		mustNot: []string{"not printed: this test passed"},
	}, {
		fixture: "poise-race",
		must: []string{
			"ok  \tpoise.dev/poise/test/kind\t", "ok  \tpoise.dev/poise/test/browser\t",
			"ok  \tpoise.dev/poise/pkg/partitionmap\t", "ok  \tpoise.dev/poise/pkg/weights\t",
		},
		mustNot: []string{"SKIP", "luajit", "chromium"},
	}} {
		t.Run(tc.fixture, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.fixture+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			var out, copied bytes.Buffer
			if err := Render(bytes.NewReader(in), &out, &copied); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(copied.Bytes(), in) {
				t.Error("the events copied differ from the events read")
			}
			contains(t, "the rendering", out.String(), tc.must, tc.mustNot)
			golden(t, tc.fixture+".render", out.String())
		})
	}
}

// TestRenderPassesOtherLines: a line that is not an event (go test's own
// message, a line cut short) is printed as it came.
func TestRenderPassesOtherLines(t *testing.T) {
	in := "go: downloading example.com/x v1.0.0\n{\"Action\":\"output\",\"Package\":\"p\",\"Output\":\"ok  \\tp\\t0.1s\\n\"}\n{\"Action\":\"pass\",\"Package\":\"p\"}\n{\"Action\":\"outp"
	var out bytes.Buffer
	if err := Render(strings.NewReader(in), &out, nil); err != nil {
		t.Fatal(err)
	}
	if want := "go: downloading example.com/x v1.0.0\nok  \tp\t0.1s\n{\"Action\":\"outp\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name     string
		golden   string // testdata/GOLDEN.summary
		fixtures []string
		module   string
		allow    bool
		code     int
		must     []string
		mustNot  []string
	}{{
		name:     "skips fail the run",
		golden:   "skips",
		fixtures: []string{"passing"},
		module:   "example.com/fix",
		code:     1,
		must: []string{
			"== skipped: 4 tests did not run (make test fails for it; POISE_ALLOW_SKIPS=1 accepts it)",
			// package, test, the reason in one line, the command
			"example.com/fix/skipper: TestNeedsTool\n    why:    no-such-tool-here is not installed: the Debian package no-such-tool provides it\n    to run: go test -count=1 -run '^TestNeedsTool$' ./skipper\n",
			"TestRaceOnly\n    why:    race detector instruments memory accesses unevenly; timing ratios are meaningless under -race\n    to run: go test -count=1 -run '^TestRaceOnly$' ./skipper (without -race)",
			"TestSubtests/skips\n    why:    POISE_SKIP_ENVTEST=1: the envtest suites are switched off\n    to run: unset POISE_SKIP_ENVTEST, then make test",
			"TestSkipNow\n    why:    (the test gave no reason)",
			"tests: 8 passed, 0 failed, 4 skipped\n",
		},
	}, {
		name:     "a test skipped in one run and passed in another ran",
		golden:   "merged",
		fixtures: []string{"passing", "norace"},
		module:   "example.com/fix",
		code:     1,
		must:     []string{"== skipped: 3 tests did not run", "tests: 9 passed, 0 failed, 3 skipped\n"},
		mustNot:  []string{"TestRaceOnly"},
	}, {
		name:     "POISE_ALLOW_SKIPS=1 lists them and passes",
		golden:   "allowed",
		fixtures: []string{"passing", "norace"},
		module:   "example.com/fix",
		allow:    true,
		code:     0,
		must:     []string{"== skipped: 3 tests did not run (accepted: POISE_ALLOW_SKIPS=1)", "TestNeedsTool"},
	}, {
		name:     "failures are counted, skips in a failing package listed",
		golden:   "failures",
		fixtures: []string{"failing", "timeout"},
		module:   "example.com/fix",
		code:     1,
		must:     []string{"example.com/fix/failer: TestSkippedInFailingPackage", "tests: 3 passed, 4 failed, 1 skipped\n"},
	}, {
		name:     "an unfinished test counts as failed",
		golden:   "unfinished",
		fixtures: []string{"truncated"},
		module:   "example.com/fix",
		code:     0,
		must:     []string{"tests: 1 passed, 1 failed, 0 skipped\n"},
		mustNot:  []string{"== skipped"},
	}, {
		// make test on a machine where luajit and chromium could not be
		// installed: each is named, with how to install it; the kind
		// suite's notice is apart and does not fail the run; the timing
		// test skipped under -race ran without it.
		name:     "poise without luajit and chromium",
		golden:   "poise-missing",
		fixtures: []string{"poise-race", "poise-norace"},
		module:   "poise.dev/poise",
		code:     1,
		must: []string{
			"== skipped: 7 tests did not run",
			"poise.dev/poise/pkg/partitionmap: TestLuaMatchesGo, TestLuaDecisionCost, TestLuaLoadsTheLargestMap (3 tests)\n    why:    skipping: the LuaJIT interpreter is not installed",
			"    to run: apt-get install luajit (as root; make test does it itself when it can), then make test\n",
			"poise.dev/poise/test/browser: TestTrafficMapDrawsExplainLive, TestTrafficMapMarksTrouble (2 tests)\n    why:    no chromium on PATH",
			"    to run: apt-get install chromium fonts-dejavu-core (as root; make test does it itself when it can), then make test\n",
			"poise.dev/poise/test/kube: TestSpatialPublishing/published_Lua_under_LuaJIT, TestSpatialPublishing/published_Lua_under_LuaJIT_after_the_health_change (2 tests)\n",
			"== not run by make test, by design: 1 test\npoise.dev/poise/test/kind: TestKindSuite\n",
			"    to run: make e2e-kind (needs a Docker engine)\n",
		},
		mustNot: []string{"TestComputeScalesNLogN"},
	}, {
		name:     "poise with only the kind suite's notice skipped passes",
		golden:   "poise-norace",
		fixtures: []string{"poise-norace"},
		module:   "poise.dev/poise",
		code:     0,
		must:     []string{"tests: 1 passed, 0 failed, 0 skipped\n"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.allow {
				t.Setenv(AllowSkips, "1")
			} else {
				t.Setenv(AllowSkips, "")
			}
			args := []string{"summary", "-module", tc.module}
			for _, f := range tc.fixtures {
				args = append(args, filepath.Join("testdata", f+".jsonl"))
			}
			var stdout, stderr bytes.Buffer
			code := run(args, nil, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			contains(t, "the summary", stdout.String(), tc.must, tc.mustNot)
			if t.Failed() {
				t.Logf("summary:\n%s", stdout.String())
			}
			golden(t, tc.golden+".summary", stdout.String())
		})
	}
}

func TestSkipReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output []string
		want   string
	}{
		{"one line", []string{"=== RUN   TestX\n", "    x_test.go:9: no tool\n", "--- SKIP: TestX (0.00s)\n"}, "no tool"},
		{"the last message, not an earlier log", []string{"    x_test.go:8: looking\n", "    x_test.go:9: no tool\n", "--- SKIP: TestX (0.00s)\n"}, "no tool"},
		{"continuation lines joined", []string{"    x_test.go:9: no tool:\n", "        install it\n", "--- SKIP: TestX (0.00s)\n"}, "no tool: install it"},
		{"a subtest's deeper indent", []string{"=== RUN   TestX/y\n", "    x_test.go:9: off\n", "    --- SKIP: TestX/y (0.00s)\n"}, "off"},
		{"framing between", []string{"=== PAUSE TestX\n", "=== CONT  TestX\n", "    x_test.go:9: later\n", "=== NAME  TestX\n", "--- SKIP: TestX (0.00s)\n"}, "later"},
		{"no message", []string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := skipReason(tc.output); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHowToRun(t *testing.T) {
	const mod = "poise.dev/poise"
	for _, tc := range []struct {
		pkg, test, reason string
		how               string
		byDesign          bool
	}{
		{mod + "/test/kind", "TestKindSuite", "the kind suite did not run", "make e2e-kind (needs a Docker engine)", true},
		{mod + "/test/browser", "TestMap", "no chromium on PATH", "apt-get install chromium fonts-dejavu-core (as root; make test does it itself when it can), then make test", false},
		{mod + "/pkg/partitionmap", "TestLua", "skipping: the LuaJIT interpreter is not installed", "apt-get install luajit (as root; make test does it itself when it can), then make test", false},
		{mod + "/test/chart", "TestInstall", "POISE_SKIP_ENVTEST=1: helm install into a real kube-apiserver is not tested", "unset POISE_SKIP_ENVTEST, then make test", false},
		{mod + "/pkg/weights", "TestBig", "-short: skipping allocation counts", "go test -count=1 -run '^TestBig$' ./pkg/weights (without -short)", false},
		{mod + "/pkg/partitionmap", "TestLuaDecisionCost", "skipping the LuaJIT timing in -short mode", "go test -count=1 -run '^TestLuaDecisionCost$' ./pkg/partitionmap (without -short)", false},
		{mod + "/pkg/weights", "TestComputeScalesNLogN", "race detector instruments memory accesses unevenly", "go test -count=1 -run '^TestComputeScalesNLogN$' ./pkg/weights (without -race)", false},
		{mod + "/test/kube", "TestMulti/zone_a", "no non-loopback IPv4 address: EndpointSlices cannot point at local backends", "make test on a host with a non-loopback IPv4 address", false},
		{mod + "/cmd/controlplane", "TestVersion", "no go tool in PATH", "put the go tool on PATH, then make test", false},
		{mod + "/pkg/x", "TestA/b.c", "whatever", `go test -count=1 -run '^TestA$/^b\.c$' ./pkg/x`, false},
		{mod, "TestRoot", "whatever", "go test -count=1 -run '^TestRoot$' .", false},
	} {
		how, byDesign := howToRun(Skip{TestID: TestID{tc.pkg, tc.test}, Reason: tc.reason}, mod)
		if how != tc.how || (byDesign != "") != tc.byDesign {
			t.Errorf("%s %s (%q): got %q (by design %q), want %q (by design: %v)", tc.pkg, tc.test, tc.reason, how, byDesign, tc.how, tc.byDesign)
		}
	}
}
