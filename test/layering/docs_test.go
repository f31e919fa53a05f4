package layering

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the layer table of docs/architecture.md from the layers of this test")

// The markers around what the architecture page takes from this test: the
// layer table, written here, and the package map, written by hand and held
// to the tree here.
const (
	layersBegin   = "<!-- BEGIN layers: written from test/layering's table by `go test ./test/layering -update`; do not edit -->"
	layersEnd     = "<!-- END layers -->"
	packagesBegin = "<!-- BEGIN packages: test/layering holds this map to the packages of the tree -->"
	packagesEnd   = "<!-- END packages -->"
)

// layerTable is the architecture page's layer table: each layer's number,
// what it is and its packages (those of pkg/ without the prefix).
func layerTable() string {
	var b strings.Builder
	b.WriteString("| # | layer | packages |\n|---|---|---|\n")
	for i, l := range layers {
		names := make([]string, len(l.packages))
		for j, p := range l.packages {
			names[j] = "`" + strings.TrimPrefix(p, "pkg/") + "`"
		}
		fmt.Fprintf(&b, "| %d | %s | %s |\n", i, l.about, strings.Join(names, ", "))
	}
	return b.String()
}

// between is the text of doc between the lines begin and end, and where it
// starts and ends.
func between(t *testing.T, doc, begin, end string) (text string, from, to int) {
	t.Helper()
	i := strings.Index(doc, begin+"\n")
	j := strings.Index(doc, "\n"+end)
	if i < 0 || j < i {
		t.Fatalf("docs/architecture.md has no %q … %q", begin, end)
	}
	from, to = i+len(begin)+1, j+1
	return doc[from:to], from, to
}

// TestArchitecturePage holds docs/architecture.md to this test's layers:
// its layer table is written from them (-update rewrites it), and its
// package map names every package of the tree, and no other.
func TestArchitecturePage(t *testing.T) {
	root, _ := moduleRoot(t)
	path := filepath.Join(root, "docs", "architecture.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	got, from, to := between(t, doc, layersBegin, layersEnd)
	if want := layerTable(); got != want {
		if *update {
			doc = doc[:from] + want + doc[to:]
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("docs/architecture.md's layer table differs from test/layering's layers: run go test ./test/layering -update\nit says:\n%s\nthe layers are:\n%s", got, want)
		}
	}

	listed := map[string]bool{}
	for _, l := range layers {
		for _, p := range l.packages {
			listed[p] = true
		}
	}
	mapped := map[string]bool{}
	section, _, _ := between(t, doc, packagesBegin, packagesEnd)
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p := m[1]
		if !listed[p] && listed["pkg/"+p] {
			p = "pkg/" + p
		}
		if mapped[p] {
			t.Errorf("docs/architecture.md's package map names %s twice", m[1])
		}
		mapped[p] = true
	}
	for _, p := range slices.Sorted(maps.Keys(listed)) {
		if !mapped[p] {
			t.Errorf("docs/architecture.md's package map does not name %s: add its one job there", p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(mapped)) {
		if !listed[p] {
			t.Errorf("docs/architecture.md's package map names %s, which is no package of the tree", p)
		}
	}
}

// TestDocsNameTestsThatExist: every test and benchmark the user docs and
// the README name by its function name exists, so a reader who looks for
// it finds it.
func TestDocsNameTestsThatExist(t *testing.T) {
	root, _ := moduleRoot(t)
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*)\(`)
	cited := map[string][]string{}
	name := regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z]\w*`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (n == "bin" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, "_test.go"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				funcs[m[1]] = true
			}
		case strings.HasSuffix(path, ".md") && (rel == "README.md" || strings.HasPrefix(filepath.ToSlash(rel), "docs/")):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, n := range name.FindAllString(string(b), -1) {
				cited[n] = append(cited[n], filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range slices.Sorted(maps.Keys(cited)) {
		if !funcs[n] {
			t.Errorf("%s names %s, which no _test.go file declares", strings.Join(slices.Compact(cited[n]), ", "), n)
		}
	}
	t.Logf("%d tests and benchmarks named in the docs, all declared", len(cited))
}
