// Package kubemanifests reads Kubernetes manifest directories for the chart
// and kind suites, the way `kubectl apply -f DIR` would.
package kubemanifests

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Read returns every object of the *.yaml files in dir, in file order (the
// order `kubectl apply -f dir` uses). Empty documents are skipped; an object
// without apiVersion, kind or name fails the test.
func Read(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(fh, 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				fh.Close()
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GroupVersionKind() == (schema.GroupVersionKind{}) || u.GetName() == "" {
				fh.Close()
				t.Fatalf("%s: an object without apiVersion, kind or name: %v", f, u.Object)
			}
			out = append(out, u)
		}
		fh.Close()
	}
	return out
}
