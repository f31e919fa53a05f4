package manifest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// splitReference is how documents were split before splitDocuments: with
// Kubernetes' YAML reader, line by line.
func splitReference(file string, data []byte, fn func(doc int, raw []byte)) *Error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &Error{File: file, Document: doc, Detail: fmt.Sprintf("cannot split YAML documents: %v", err)}
		}
		if emptyReference(raw) {
			doc--
			continue
		}
		fn(doc, raw)
	}
}

func emptyReference(raw []byte) bool {
	for _, line := range bytes.Split(raw, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			return false
		}
	}
	return true
}

type split struct {
	Docs []string
	Err  *Error
}

func splitWith(f func(string, []byte, func(int, []byte)) *Error, data []byte) split {
	var s split
	s.Err = f("a.yaml", data, func(doc int, raw []byte) {
		if doc != len(s.Docs)+1 {
			panic(fmt.Sprintf("document %d after %d", doc, len(s.Docs)))
		}
		s.Docs = append(s.Docs, string(raw))
	})
	return s
}

// splitOnly is splitDocuments without warnings, as the reference splits. It
// checks that each document's text starts on the line of the file
// splitDocuments says.
func splitOnly(file string, data []byte, fn func(int, []byte)) *Error {
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	return splitDocuments(file, data, func(doc, line int, raw []byte) {
		first, _, _ := strings.Cut(string(raw), "\n")
		if line < 1 || line > len(lines) || lines[line-1] != first && lines[line-1] != first+"\r" {
			panic(fmt.Sprintf("document %d starts %q; line %d of the file is not that", doc, first, line))
		}
		fn(doc, raw)
	}, nil)
}

var splitSeeds = []string{
	"", "\n", "---", "---\n", "---\n---\n", "a: 1", "a: 1\n", "a: 1\n---\nb: 2\n", "---\na: 1\n---\n",
	"a: 1\r\n---\r\nb: 2\r\n", "a: 1\r\n---\r\nb: 2\r", "a: 1\r", "\r\n", "a: \r1\n", "a: 1\n--- # comment\nb: 2",
	"a: 1\n---x\nb: 2\n", "a: 1\n----\n", "a: 1\n--- b\n", "a: 1\n ---\nb: 2\n", "# c\n---\n# d\n---\na: 1\n",
	"---\n\n---\n  # x\n--- #\na: 1\n---\r\n", "a: 1\n---\t\n", "a: 1\n--- \u00a0\n", "a: 1\n---\v#\n",
	"a: " + strings.Repeat("x", 5000) + "\r\n---\nb: 1\n", strings.Repeat("y", 4095) + "\r\n---\n" + strings.Repeat("z", 4096) + "\r",
}

// TestSplitMatchesKubernetesReader: splitDocuments gives the documents, the
// numbers and the errors of the line-by-line reader it replaces.
func TestSplitMatchesKubernetesReader(t *testing.T) {
	t.Parallel()
	for _, s := range splitSeeds {
		got, want := splitWith(splitOnly, []byte(s)), splitWith(splitReference, []byte(s))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %q %v\nwant %q %v", s, got.Docs, got.Err, want.Docs, want.Err)
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := splitWith(splitOnly, data), splitWith(splitReference, data)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %q %v\nwant %q %v", data, got.Docs, got.Err, want.Docs, want.Err)
		}
	})
}

// Content after a document's "..." end marker, which a YAML decoder
// ignores, is warned of with its document and line, in both decoding paths;
// a marker followed only by blank lines, comments or the next "---" is not.
func TestContentAfterDocumentEndIsWarned(t *testing.T) {
	t.Parallel()
	up := "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: web, namespace: shop}\n"
	for _, tc := range []struct {
		data string
		want []string
	}{
		{up + "...\n# only a comment\n\n---\n" + up, nil},
		{up + "...\nspec: {panicThreshold: 40}\n", []string{"f.yaml: document 1: line 5 comes after the document end marker"}},
		{"# lead\n---\n" + up + "--- \n" + up + "... # end\n  extra: 1\n", []string{"f.yaml: document 2: line 11 comes after"}},
	} {
		var got []string
		_ = splitDocuments("f.yaml", []byte(tc.data), func(int, int, []byte) {}, func(doc, line int) {
			got = append(got, IgnoredAfterEnd("f.yaml", doc, line))
		})
		file := DecodeFile("f.yaml", []byte(tc.data), nil)
		if len(got) != len(tc.want) || len(file.Warnings) != len(tc.want) {
			t.Fatalf("%q: warnings %q (file %q), want %d", tc.data, got, file.Warnings, len(tc.want))
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(got[i], w) || file.Warnings[i] != got[i] {
				t.Errorf("%q: warning %q, want it to start %q", tc.data, got[i], w)
			}
		}
	}
}
