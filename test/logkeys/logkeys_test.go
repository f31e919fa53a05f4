package logkeys

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// logMethods are the slog calls whose arguments after the message are
// alternating keys and values.
var logMethods = map[string]bool{"Debug": true, "Info": true, "Warn": true, "Error": true}

// plainKey is what a key may be: a word, camelCase, digits after the first letter.
var plainKey = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)

func TestLogKeysArePlain(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	calls := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "bin" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !logMethods[sel.Sel.Name] || len(call.Args) < 3 || call.Ellipsis.IsValid() {
				return true
			}
			if msg, ok := call.Args[0].(*ast.BasicLit); !ok || msg.Kind != token.STRING {
				return true // not a log call: slog's first argument is the message
			}
			calls++
			for i := 1; i < len(call.Args); i += 2 {
				lit, ok := call.Args[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue // an slog.Attr or a computed key
				}
				key, _ := strconv.Unquote(lit.Value)
				if !plainKey.MatchString(key) {
					t.Errorf("%s: log key %q: a key is one camelCase word, so that --log-format json gives a plain field", fset.Position(lit.Pos()), key)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 50 {
		t.Fatalf("found only %d structured log calls: the walk no longer reaches the sources", calls)
	}
	t.Logf("%d structured log calls checked", calls)
}
