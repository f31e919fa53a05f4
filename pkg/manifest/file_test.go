package manifest_test

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

// TestDecodeFileMatchesLoad: a file decoded alone gives Load's objects and
// Load's errors, message for message.
func TestDecodeFileMatchesLoad(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"valid": docs(upstreamX, localityX, setX, domainX, partitionX),
		"errors": docs(
			strings.Replace(upstreamX, "GRPC", "SPDY", 1)+"  overprovisioningFactor: 0\n",
			localityX,
			strings.Replace(setX, "port: 80, weight: 3", "port: 70000, weight: 0", 1),
			"kind: Locality\n",
			"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: y}\nspec: {protocol: GRPC, protocol: TCP}\n",
			"- just a list\n",
		),
		"unsplittable": docs(upstreamX, "--- not a separator\n"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"a.yaml": content})
			path := filepath.Join(dir, "a.yaml")
			set, loadErr := manifest.Load(path)
			f := manifest.DecodeFile(path, []byte(content), nil)
			if got, want := errString(f.Err()), errString(loadErr); got != want {
				t.Errorf("errors:\n got %s\nwant %s", got, want)
			}
			if f.Decoded != len(f.Documents)+countDocs(f.Errors) {
				t.Errorf("decoded %d documents, have %d objects and errors in %d", f.Decoded, len(f.Documents), countDocs(f.Errors))
			}
			if set == nil {
				return
			}
			var objects []manifest.Object
			var b topology.Batch
			for i := range f.Documents {
				objects = append(objects, f.Documents[i].Object)
				f.Documents[i].Put(&b)
			}
			if !slices.Equal(objects, set.Objects) {
				t.Errorf("objects:\n got %+v\nwant %+v", objects, set.Objects)
			}
			if !reflect.DeepEqual(b, set.Batch) {
				t.Error("the documents put a different batch from Load's")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// countDocs counts the documents errors are about (the split error is not
// about a decoded document).
func countDocs(errs manifest.Errors) int {
	seen := map[int]bool{}
	for _, e := range errs {
		if !strings.Contains(e.Detail, "cannot split") {
			seen[e.Document] = true
		}
	}
	return len(seen)
}

// TestDecodeFileReusesUnchangedDocuments: only a document whose text
// changed is decoded again, and every document is numbered where it is now.
func TestDecodeFileReusesUnchangedDocuments(t *testing.T) {
	t.Parallel()
	v1 := manifest.DecodeFile("a.yaml", []byte(docs(upstreamX, localityX, setX)), nil)
	if v1.Decoded != 3 || len(v1.Documents) != 3 || v1.Err() != nil {
		t.Fatalf("first version: decoded %d, %d objects, %v", v1.Decoded, len(v1.Documents), v1.Err())
	}
	edited := strings.Replace(setX, "weight: 3", "weight: 4", 1)
	broken := strings.Replace(localityX, "weight: 2", "weight: -2", 1)
	tests := []struct {
		name    string
		content string
		prev    *manifest.File
		decoded int
		errs    []string
	}{
		{"one document edited", docs(upstreamX, localityX, edited), v1, 1, nil},
		{"documents reordered", docs(setX, upstreamX, localityX), v1, 0, nil},
		{"a document added before the others", docs(domainX, upstreamX, localityX, setX), v1, 1, nil},
		{"identical", docs(upstreamX, localityX, setX), v1, 0, nil},
		{"no previous version", docs(upstreamX, localityX, setX), nil, 3, nil},
		{"a broken document is reported where it is", docs(broken, upstreamX), v1, 1, []string{"a.yaml: document 1 (Locality shop/x-eu): spec.weight"}},
		{"a broken document is decoded again", docs(upstreamX, broken), manifest.DecodeFile("a.yaml", []byte(docs(broken, upstreamX)), nil), 1,
			[]string{"a.yaml: document 2 (Locality shop/x-eu): spec.weight"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := manifest.DecodeFile("a.yaml", []byte(tc.content), tc.prev)
			if got.Decoded != tc.decoded {
				t.Errorf("decoded %d documents, want %d", got.Decoded, tc.decoded)
			}
			if len(got.Errors) != len(tc.errs) {
				t.Fatalf("errors %v, want %q", got.Err(), tc.errs)
			}
			for i, want := range tc.errs {
				if !strings.HasPrefix(got.Errors[i].Error(), want) {
					t.Errorf("error %d = %q, want %q…", i, got.Errors[i], want)
				}
			}
			// Whatever was reused, the file reads as if decoded afresh.
			fresh := manifest.DecodeFile("a.yaml", []byte(tc.content), nil)
			if !reflect.DeepEqual(got.Documents, fresh.Documents) || got.Sum != fresh.Sum {
				t.Errorf("documents differ from a fresh decode:\n got %+v\nwant %+v", got.Documents, fresh.Documents)
			}
		})
	}
}

// TestDuplicateNamesBoth: the message of an object defined twice names both
// places, as Load words it.
func TestDuplicateNamesBoth(t *testing.T) {
	t.Parallel()
	key := topology.Key{Namespace: "shop", Name: "x"}
	err := manifest.Duplicate(manifest.Object{File: "b.yaml", Document: 3, Kind: "Upstream", Key: key},
		manifest.Object{File: "a.yaml", Document: 1, Kind: "Upstream", Key: key})
	if want := "b.yaml: document 3 (Upstream shop/x): metadata.name: Upstream shop/x is also defined in a.yaml document 1"; err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}

// TestRelease: a released file's documents cannot be put, nor those taken
// from it; those decoded anew can.
func TestRelease(t *testing.T) {
	t.Parallel()
	v1 := manifest.DecodeFile("a.yaml", []byte(docs(upstreamX, localityX)), nil)
	v1.Release()
	var b topology.Batch
	if v1.Documents[0].Put(&b) || b.Len() != 0 {
		t.Error("a released document was put")
	}
	v2 := manifest.DecodeFile("a.yaml", []byte(docs(upstreamX, setX)), v1)
	if v2.Documents[0].Put(&b) {
		t.Error("a document taken from a released file was put")
	}
	if !v2.Documents[1].Put(&b) || b.Len() != 1 {
		t.Errorf("the document decoded anew was not put (batch of %d)", b.Len())
	}
}
