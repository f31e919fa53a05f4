package files

import (
	"testing"

	"poise.dev/poise/pkg/topology"
)

// FuzzFileSource writes arbitrary bytes over one manifest file of a valid
// directory and applies the burst: the source never panics, a refused burst
// leaves the Directory exactly as it was (no partial publication), and an
// applied one leaves it as a full load of the files gives.
func FuzzFileSource(f *testing.F) {
	base := "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u0, namespace: p}\nspec: {protocol: HTTP2}\n"
	set := "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s0, namespace: p}\nspec:\n  upstream: u0\n  locality: {region: r0}\n  endpoints:\n  - {address: 10.0.0.1, port: 80, weight: 1}\n"
	f.Add([]byte(set))
	f.Add([]byte(set[:len(set)/2]))
	f.Add([]byte(""))
	f.Add([]byte(set + "---\n" + set))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("\x00\xff---\n...\n" + set))
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		h := newHarnessIn(t, dir, map[string]string{"a.yaml": base, "b.yaml": set})
		before := stateOf(h.src.Dir.Current())
		h.write("b.yaml", string(content))
		_, err := h.sync()
		got := stateOf(h.src.Dir.Current())
		ref := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
		refSnap, refErr := ref.Load()
		switch {
		case err != nil && !got.equal(before):
			t.Fatalf("a refused burst changed the Directory:\n%s\nwant\n%s", got, before)
		case err == nil && refErr != nil:
			t.Fatalf("applied what a full load refuses: %v", refErr)
		case err == nil && !got.equal(stateOf(refSnap)):
			t.Fatalf("the Directory differs from a full load:\n%s\nwant\n%s", got, stateOf(refSnap))
		}
	})
}
