package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Run is what one go test -json stream said of each test.
type Run struct {
	Tests map[TestID]*TestRun
	Order []TestID
}

// TestID names a test (or subtest) of a package by its import path.
type TestID struct{ Package, Test string }

// TestRun is one test's result (pass, fail or skip; "" if it never ended)
// and its output lines.
type TestRun struct {
	Result string
	Output []string
}

// ReadRun reads a go test -json stream, ignoring lines that are not events.
func ReadRun(r io.Reader) (Run, error) {
	run := Run{Tests: map[TestID]*TestRun{}}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		raw, err := br.ReadBytes('\n')
		if ev, ok := parseEvent(raw); ok && ev.Package != "" && ev.Test != "" {
			id := TestID{ev.Package, ev.Test}
			t := run.Tests[id]
			if t == nil {
				t = &TestRun{}
				run.Tests[id] = t
				run.Order = append(run.Order, id)
			}
			switch ev.Action {
			case "output":
				t.Output = append(t.Output, ev.Output)
			case "pass", "fail", "skip":
				t.Result = ev.Action
			}
		}
		if errors.Is(err, io.EOF) {
			return run, nil
		}
		if err != nil {
			return run, err
		}
	}
}

// Skip is a test that did not run in any of the runs.
type Skip struct {
	TestID
	Reason string // what the test said when it skipped
	How    string // the command that would run it
	// ByDesign, when set, says why make test never runs this test; such a
	// skip does not fail make test.
	ByDesign string
}

// Summary is what the runs together did: each test counts once, as failed
// if it failed in any run, else as passed if it passed in one, else as
// skipped.
type Summary struct {
	Passed, Failed int
	Skipped        []Skip // skips make test could have run, in the order they came
	ByDesign       []Skip // skips make test never runs
}

// Summarize merges the runs. module is the module path, written ./ in the
// commands.
func Summarize(runs []Run, module string) Summary {
	type merged struct {
		passed, failed, skipped bool
		skip                    *TestRun
	}
	all := map[TestID]*merged{}
	var order []TestID
	for _, r := range runs {
		for _, id := range r.Order {
			t := r.Tests[id]
			m := all[id]
			if m == nil {
				m = &merged{}
				all[id] = m
				order = append(order, id)
			}
			switch t.Result {
			case "pass":
				m.passed = true
			case "fail", "":
				m.failed = true
			case "skip":
				m.skipped = true
				if m.skip == nil {
					m.skip = t
				}
			}
		}
	}
	var s Summary
	for _, id := range order {
		m := all[id]
		switch {
		case m.failed:
			s.Failed++
		case m.passed:
			s.Passed++
		case m.skipped:
			sk := Skip{TestID: id, Reason: skipReason(m.skip.Output)}
			sk.How, sk.ByDesign = howToRun(sk, module)
			if sk.ByDesign != "" {
				s.ByDesign = append(s.ByDesign, sk)
			} else {
				s.Skipped = append(s.Skipped, sk)
			}
		}
	}
	return s
}

// logLine is the start of a t.Log, t.Skip or t.Fatal message in -v output:
// "    file_test.go:38: message".
var logLine = regexp.MustCompile(`^\s*[^\s:]+\.go:\d+: ?(.*)$`)

// skipReason is the last message the test logged before its --- SKIP line
// (t.Skip's own), continuation lines joined; "" if it logged none.
func skipReason(output []string) string {
	var msg []string
	for _, l := range output {
		l = strings.TrimRight(l, "\n")
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "--- SKIP"):
			return strings.Join(msg, " ")
		case strings.HasPrefix(trimmed, "=== "), strings.HasPrefix(trimmed, "--- "):
			// the framing of this test or of another's output
		default:
			if m := logLine.FindStringSubmatch(l); m != nil {
				msg = []string{strings.TrimSpace(m[1])}
			} else if msg != nil && trimmed != "" {
				msg = append(msg, trimmed)
			}
		}
	}
	return strings.Join(msg, " ")
}

var unsetVar = regexp.MustCompile(`^(POISE_[A-Z_]+)=1\b`)

// howToRun is the command that would run a skipped test, from what it is
// and the reason it gave, and, for a test make test never runs, why.
func howToRun(s Skip, module string) (how, byDesign string) {
	dir := "./" + strings.TrimPrefix(strings.TrimPrefix(s.Package, module), "/")
	if s.Package == module {
		dir = "."
	}
	goTest := fmt.Sprintf("go test -count=1 -run '%s' %s", runPattern(s.Test), dir)
	r := s.Reason
	switch {
	case s.Package == module+"/test/kind" && s.Test == "TestKindSuite":
		return "make e2e-kind (needs a Docker engine)",
			"it stands for the kind suite, which runs in Docker; make test checks that suite's inputs only"
	case unsetVar.MatchString(r):
		return "unset " + unsetVar.FindStringSubmatch(r)[1] + ", then make test", ""
	case strings.Contains(r, "-short"):
		return goTest + " (without -short)", ""
	case strings.Contains(r, "race detector"):
		return goTest + " (without -race)", ""
	case strings.Contains(strings.ToLower(r), "chromium"):
		return "apt-get install chromium fonts-dejavu-core (as root; make test does it itself when it can), then make test", ""
	case strings.Contains(strings.ToLower(r), "luajit"):
		return "apt-get install luajit (as root; make test does it itself when it can), then make test", ""
	case strings.Contains(r, "no go tool"):
		return "put the go tool on PATH, then make test", ""
	case strings.Contains(r, "non-loopback IPv4"):
		return "make test on a host with a non-loopback IPv4 address", ""
	}
	return goTest, ""
}

// runPattern is the -run pattern that selects exactly this test.
func runPattern(test string) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Print writes the summary: the skipped tests grouped by package, reason
// and command, then those make test never runs, then one line of counts.
func (s Summary) Print(w io.Writer, allowSkips bool) {
	if len(s.Skipped) > 0 {
		verdict := "make test fails for it; POISE_ALLOW_SKIPS=1 accepts it"
		if allowSkips {
			verdict = "accepted: POISE_ALLOW_SKIPS=1"
		}
		fmt.Fprintf(w, "\n== skipped: %s did not run (%s)\n", plural(len(s.Skipped), "test"), verdict)
		printGroups(w, s.Skipped)
	}
	if len(s.ByDesign) > 0 {
		fmt.Fprintf(w, "\n== not run by make test, by design: %s\n", plural(len(s.ByDesign), "test"))
		printGroups(w, s.ByDesign)
	}
	fmt.Fprintf(w, "\ntests: %d passed, %d failed, %d skipped\n", s.Passed, s.Failed, len(s.Skipped)+len(s.ByDesign))
}

func printGroups(w io.Writer, skips []Skip) {
	type key struct{ pkg, reason, how, byDesign string }
	groups := map[key][]string{}
	var order []key
	for _, sk := range skips {
		k := key{sk.Package, sk.Reason, sk.How, sk.ByDesign}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], sk.Test)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].pkg < order[j].pkg })
	for _, k := range order {
		tests := groups[k]
		count := ""
		if len(tests) > 1 {
			count = fmt.Sprintf(" (%d tests)", len(tests))
		}
		fmt.Fprintf(w, "%s: %s%s\n", k.pkg, strings.Join(tests, ", "), count)
		reason := k.reason
		if reason == "" {
			reason = "(the test gave no reason)"
		}
		fmt.Fprintf(w, "    why:    %s\n", reason)
		if k.byDesign != "" {
			fmt.Fprintf(w, "    and:    %s\n", k.byDesign)
		}
		fmt.Fprintf(w, "    to run: %s\n", k.how)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
