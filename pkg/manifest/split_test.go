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
	for _, s := range splitSeeds {
		got, want := splitWith(splitDocuments, []byte(s)), splitWith(splitReference, []byte(s))
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
		got, want := splitWith(splitDocuments, data), splitWith(splitReference, data)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %q %v\nwant %q %v", data, got.Docs, got.Err, want.Docs, want.Err)
		}
	})
}
