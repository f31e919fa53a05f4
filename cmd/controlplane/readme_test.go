package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestReadmeExcerptsAreTheOutput: the walkthrough's excerpts of `explain
// --upstream shop/checkout` are the command's output, each run of lines
// between "…" marks found whole and in order: a line changed, or elided
// without a mark, fails.
func TestReadmeExcerptsAreTheOutput(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const command = "bin/controlplane explain -f examples --upstream shop/checkout"
	_, after, ok := strings.Cut(string(text), "```sh\n"+command+"\n```\n")
	if !ok {
		t.Fatalf("README has no block running %q", command)
	}
	section, _, _ := strings.Cut(after, "\n## ")
	var excerpts []string
	for i, block := range strings.Split(section, "```")[1:] {
		if i%2 == 0 && strings.HasPrefix(block, "\n") {
			excerpts = append(excerpts, strings.TrimPrefix(block, "\n"))
		}
	}
	if len(excerpts) == 0 {
		t.Fatal("no excerpt follows the command in README")
	}
	code, stdout, stderr := runCLI("explain", "-f", examples, "--upstream", "shop/checkout")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out := strings.Split(stdout, "\n")
	at := 0
	runs := 0
	for _, ex := range excerpts {
		var run []string
		lines := append(strings.Split(strings.TrimSuffix(ex, "\n"), "\n"), "…")
		for _, line := range lines {
			if strings.TrimSpace(line) != "…" {
				run = append(run, line)
				continue
			}
			if len(run) == 0 {
				continue
			}
			runs++
			i := indexRun(out[at:], run)
			if i < 0 {
				t.Fatalf("README's excerpt is not the output from line %d on:\n%s\n\noutput:\n%s", at+1, strings.Join(run, "\n"), stdout)
			}
			at += i + len(run)
			run = nil
		}
	}
	if runs < 2 {
		t.Errorf("%d runs of lines checked, want the walkthrough's excerpts", runs)
	}
}

// indexRun is where lines run appear whole in out, or -1.
func indexRun(out, run []string) int {
	for i := 0; i+len(run) <= len(out); i++ {
		if slices.Equal(out[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}
