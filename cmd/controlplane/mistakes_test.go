package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"poise.dev/poise/test/golden"
)

// TestValidateMistakes: each one-character mistake of the walkthrough's
// manifests makes validate exit 1 naming the file, the document, the object
// and the field, and what was likely meant; the goldens hold the whole
// output, the test directory written DIR.
func TestValidateMistakes(t *testing.T) {
	t.Parallel()
	checkout, err := os.ReadFile(filepath.Join(examples, "checkout.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := os.ReadFile(filepath.Join(examples, "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string // replaced once in checkout.yaml
	}{
		{"endpointset-upstream-typo",
			"  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkout\n  locality",
			"  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkuot\n  locality"},
		{"locality-upstream-typo",
			"  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkout\n  priority",
			"  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkuot\n  priority"},
		{"upstream-lost-namespace", "kind: Upstream\nmetadata:\n  name: checkout\n  namespace: shop\n", "kind: Upstream\nmetadata:\n  name: checkout\n"},
		{"upstream-group-typo", "apiVersion: poise.dev/v1alpha1\nkind: Upstream\n", "apiVersion: poise.io/v1alpha1\nkind: Upstream\n"},
		{"locality-zone-typo", "  zone: eu-west-1a\n  weight: 3\n", "  zone: eu-west-la\n  weight: 3\n"},
		{"weight-quoted", "  zone: eu-west-1a\n  weight: 3\n", "  zone: eu-west-1a\n  weight: \"3\"\n"},
		{"field-typo", "  zone: eu-west-1a\n  weight: 3\n", "  zone: eu-west-1a\n  weigth: 3\n"},
		{"yaml-indent", "  zone: eu-west-1a\n  weight: 3\n", "  zone: eu-west-1a\n  weight: 3\n   bad: indent\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			edited := strings.Replace(string(checkout), tc.old, tc.new, 1)
			if edited == string(checkout) {
				t.Fatalf("%q is not in the example", tc.old)
			}
			write(t, dir, "checkout.yaml", edited)
			write(t, dir, "catalog.yaml", string(catalog))
			code, stdout, stderr := runCLI("validate", "-f", dir)
			if code != exitInvalid || stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, exitInvalid)
			}
			checkNoCrash(t, stderr)
			golden.Check(t, "validate-mistake-"+tc.name, fmt.Sprintf("exit %d\n%s", code, strings.ReplaceAll(stderr, dir, "DIR")))
		})
	}
}

// TestBundledManifestsValidate: the manifests the project ships — the
// examples, the fixtures of the translator, loads and CLI tests, and every
// YAML block of the docs that holds a Poise object — are complete: each
// validates as serve -f would hold it.
func TestBundledManifestsValidate(t *testing.T) {
	t.Parallel()
	paths := []string{examples, examples + "/kubernetes", examples + "/spatial", "../../pkg/signals/loadreport/testdata/spatial.yaml"}
	for _, pattern := range []string{"../../pkg/xds/translate/testdata/*/input.yaml", "testdata/*/*.yaml"} {
		found, err := filepath.Glob(pattern)
		if err != nil || len(found) == 0 {
			t.Fatalf("%s: %v, %d files", pattern, err, len(found))
		}
		paths = append(paths, found...)
	}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs: %v", err)
	}
	snippets := 0
	for _, doc := range append(docs, "../../README.md") {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(text), "```")[1:] {
			if i%2 == 1 || !strings.Contains(block, "apiVersion: poise.dev/") {
				continue // between blocks, or not a manifest
			}
			_, body, _ := strings.Cut(block, "\n") // after the block's language
			paths = append(paths, write(t, t.TempDir(), fmt.Sprintf("%s-%d.yaml", filepath.Base(doc), i/2+1), body))
			snippets++
		}
	}
	if snippets == 0 {
		t.Fatal("no manifest among the docs' blocks")
	}
	for _, p := range paths {
		if code, _, stderr := runCLI("validate", "-f", p); code != exitOK {
			t.Errorf("%s: exit %d\n%s", p, code, stderr)
		}
	}
}
