package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent, and the
// build-output events go test adds).
type Event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
}

// line is one output line of a package, and the test it belongs to ("" for
// the package's own: its binary's output outside tests and go test's result
// line).
type line struct{ test, text string }

// pkgRun is what Render holds of a package until its result arrives.
type pkgRun struct {
	lines   []line
	results map[string]string // test → pass, fail or skip
}

// Render reads go test -json events from r and writes to w what go test
// prints without -v: each package's result line and, for a package that
// failed, the output of each failing test (its subtests' included) and of
// each test that never finished, and what the test binary printed outside
// its tests. A package is printed when
// its result arrives, so packages appear as they finish. Lines that are not
// JSON events are printed as they are. Every line read is copied to copyTo
// when it is not nil.
func Render(r io.Reader, w io.Writer, copyTo io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	pkgs := map[string]*pkgRun{}
	var order []string
	get := func(name string) *pkgRun {
		p := pkgs[name]
		if p == nil {
			p = &pkgRun{results: map[string]string{}}
			pkgs[name] = p
			order = append(order, name)
		}
		return p
	}
	for {
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 {
			if copyTo != nil {
				if _, werr := copyTo.Write(raw); werr != nil {
					return werr
				}
			}
			if werr := renderLine(raw, w, get, pkgs); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	// The stream ended before these packages did (go test was killed, or
	// the pipe broke): everything that did not pass or skip is printed.
	for _, name := range order {
		if p := pkgs[name]; p != nil {
			if err := flush(w, p, "fail"); err != nil {
				return err
			}
		}
	}
	return nil
}

func renderLine(raw []byte, w io.Writer, get func(string) *pkgRun, pkgs map[string]*pkgRun) error {
	ev, ok := parseEvent(raw)
	if !ok {
		if !bytes.HasSuffix(raw, []byte("\n")) {
			raw = append(raw, '\n')
		}
		_, err := w.Write(raw)
		return err
	}
	switch ev.Action {
	case "build-output":
		_, err := io.WriteString(w, ev.Output)
		return err
	case "output":
		if ev.Package == "" {
			_, err := io.WriteString(w, ev.Output)
			return err
		}
		p := get(ev.Package)
		p.lines = append(p.lines, line{ev.Test, ev.Output})
	case "pass", "fail", "skip":
		if ev.Package == "" {
			return nil
		}
		p := get(ev.Package)
		if ev.Test != "" {
			p.results[ev.Test] = ev.Action
			return nil
		}
		err := flush(w, p, ev.Action)
		pkgs[ev.Package] = nil
		return err
	}
	return nil
}

// parseEvent decodes one line of go test -json; ok is false for a line
// that is not an event (go test's own messages, a broken line).
func parseEvent(raw []byte) (Event, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return Event{}, false
	}
	var ev Event
	if err := json.Unmarshal(t, &ev); err != nil || ev.Action == "" {
		return Event{}, false
	}
	return ev, true
}

// flush prints a finished package as go test does without -v: a package
// that passed (or has no tests) by its result line alone; one that failed
// by its own lines (what its binary printed outside its tests, the bare
// PASS left out) and the lines of every test that failed or did not finish,
// in the order they came.
func flush(w io.Writer, p *pkgRun, result string) error {
	var b strings.Builder
	for _, l := range p.lines {
		switch {
		case result != "fail":
			if l.test == "" && (strings.HasPrefix(l.text, "ok  \t") || strings.HasPrefix(l.text, "?   \t")) {
				b.WriteString(l.text)
			}
		case l.test == "":
			if l.text != "PASS\n" {
				b.WriteString(l.text)
			}
		case failedOrUnfinished(p.results, l.test):
			b.WriteString(l.text)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// failedOrUnfinished: the test, or a test it is a subtest of, failed, or
// the test has no result.
func failedOrUnfinished(results map[string]string, test string) bool {
	r, ok := results[test]
	if !ok || r == "fail" {
		return true
	}
	for i := strings.LastIndexByte(test, '/'); i > 0; i = strings.LastIndexByte(test[:i], '/') {
		if results[test[:i]] == "fail" {
			return true
		}
	}
	return false
}
