package manifest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"poise.dev/poise/pkg/manifest"
)

const (
	namespaceShop = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
	serviceWeb    = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {ports: [{port: 80}]}\n"
	deployment    = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec: {replicas: 1, template: {}}\n"
	// another project's kind named as one of ours, in its own group
	glooUpstream = "apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: x, namespace: shop}\nspec: {static: {}}\n"
)

// TestLoadSkipsOtherKinds: the kinds kubectl applies from the same directory
// are counted and skipped; they neither fail the load nor add objects.
func TestLoadSkipsOtherKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		objects int
		others  string
	}{
		{"none", map[string]string{"a.yaml": docs(upstreamX, localityX, setX)}, 3, ""},
		{"namespace first", map[string]string{"a.yaml": docs(namespaceShop, upstreamX, localityX, setX)}, 3, "1 object of other kinds (Namespace 1)"},
		{
			"several files, one of only other kinds",
			map[string]string{"a.yaml": docs(namespaceShop, serviceWeb, deployment, deployment), "b.yaml": docs(upstreamX, glooUpstream, serviceWeb)},
			1, "6 objects of other kinds (Deployment 2, Service 2, Namespace 1, Upstream 1)",
		},
		{"only other kinds", map[string]string{"a.yaml": docs(namespaceShop, serviceWeb)}, 0, "2 objects of other kinds (Namespace 1, Service 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			set, err := manifest.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Objects) != tc.objects {
				t.Errorf("%d objects, want %d", len(set.Objects), tc.objects)
			}
			got := ""
			if set.Others.Total() > 0 {
				got = set.Others.String()
			}
			if got != tc.others {
				t.Errorf("others %q, want %q", got, tc.others)
			}
			// DecodeFile, the files source's decoder, skips the same documents
			// and keeps them out of the file's Documents.
			for name, content := range tc.files {
				f := manifest.DecodeFile(filepath.Join(dir, name), []byte(content), nil)
				if f.Err() != nil {
					t.Fatal(f.Err())
				}
				want := strings.Count(content, "apiVersion:") - len(f.Documents)
				if f.Others.Total() != want {
					t.Errorf("%s: DecodeFile skipped %d documents, want %d", name, f.Others.Total(), want)
				}
			}
		})
	}
}

// TestOthersStringBounded: the line names at most ten kinds, then counts the rest.
func TestOthersStringBounded(t *testing.T) {
	t.Parallel()
	var ds []string
	for i := range 14 {
		for range i + 1 {
			ds = append(ds, fmt.Sprintf("apiVersion: example.com/v1\nkind: K%02d\nmetadata: {name: a}\n", i))
		}
	}
	set, err := manifest.Decode("a.yaml", []byte(docs(ds...)))
	if err != nil {
		t.Fatal(err)
	}
	const want = "105 objects of other kinds (K13 14, K12 13, K11 12, K10 11, K09 10, K08 9, K07 8, K06 7, K05 6, K04 5, and 4 more kinds)"
	if got := set.Others.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestProblemsPerDocumentBounded: a document with many problems reports the
// first MaxProblemsPerDocument and counts the rest.
func TestProblemsPerDocumentBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: x-eu, namespace: shop}\nspec:\n  upstream: x\n  locality: {region: eu}\n  endpoints:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  - {address: 10.0.0.%d, port: 0}\n", i+1)
	}
	_, err := manifest.Decode("a.yaml", []byte(b.String()))
	var errs manifest.Errors
	if !asErrors(err, &errs) {
		t.Fatalf("error %v, want manifest.Errors", err)
	}
	if len(errs) != manifest.MaxProblemsPerDocument+1 {
		t.Fatalf("%d problems, want %d:\n%v", len(errs), manifest.MaxProblemsPerDocument+1, err)
	}
	for i, e := range errs[:manifest.MaxProblemsPerDocument] {
		if want := fmt.Sprintf("spec.endpoints[%d].port", i); e.Field != want || e.Object != "EndpointSet shop/x-eu" {
			t.Errorf("problem %d: %v, want field %s", i, e, want)
		}
	}
	if last := errs[len(errs)-1].Error(); last != "a.yaml: document 1 (EndpointSet shop/x-eu): and 10 more problems in this document" {
		t.Errorf("last line %q", last)
	}
}

func asErrors(err error, into *manifest.Errors) bool {
	es, ok := err.(manifest.Errors)
	*into = es
	return ok
}

// TestNoNamespace: an object without metadata.namespace is read in namespace
// default, and says so, on the fast path and the general one alike.
func TestNoNamespace(t *testing.T) {
	t.Parallel()
	bare := strings.Replace(upstreamX, "  namespace: shop\n", "", 1)
	for name, doc := range map[string]string{
		"fast":    bare,
		"general": bare + "  connectTimeout: \"1s\"\n", // a quoted duration: the general path
	} {
		t.Run(name, func(t *testing.T) {
			set, err := manifest.Decode("a.yaml", []byte(docs(doc, upstreamX)))
			if err != nil {
				t.Fatal(err)
			}
			if o := set.Objects[0]; !o.NoNamespace || o.Key.Namespace != "default" {
				t.Errorf("%+v: want NoNamespace in namespace default", o)
			}
			if o := set.Objects[1]; o.NoNamespace {
				t.Errorf("%+v: NoNamespace, but the namespace is set", o)
			}
		})
	}
}
