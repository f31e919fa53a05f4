package files

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"poise.dev/poise/pkg/topology"
)

// genDocument draws one object for file f of a small pool: each file has
// objects of its own, but now and then takes another's (a move, or a
// duplicate); sets of one upstream may share addresses (the Directory
// refuses) and Localities may contradict each other; now and then the
// document is invalid.
func genDocument(t *rapid.T, f int) string {
	// own picks an object of file f's, or now and then any of n.
	own := func(label string, mine, n int) int {
		if rapid.IntRange(0, 9).Draw(t, label+" elsewhere") == 0 {
			return rapid.IntRange(0, n-1).Draw(t, label)
		}
		return mine
	}
	switch k := rapid.IntRange(0, 19).Draw(t, "kind"); {
	case k < 5:
		return fmt.Sprintf("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u%d, namespace: p}\nspec: {protocol: %s}\n",
			own("upstream", f%2, 2), rapid.SampledFrom([]string{"HTTP2", "GRPC"}).Draw(t, "protocol"))
	case k < 8:
		return fmt.Sprintf("apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: l%d, namespace: p}\nspec: {upstream: u%d, region: r%d, priority: %d, weight: %d}\n",
			own("locality", f, 4), rapid.IntRange(0, 1).Draw(t, "upstream"), rapid.IntRange(0, 1).Draw(t, "region"),
			rapid.IntRange(0, 1).Draw(t, "priority"), rapid.IntRange(1, 3).Draw(t, "weight"))
	case k == 19:
		return rapid.SampledFrom([]string{
			"apiVersion: poise.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c, namespace: p}\n",
			"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s0, namespace: p}\nspec: {upstream: u0, endpoints: [{address: 10.0.0.1, port: 80, weight: 0}]}\n",
			"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u1, namespace: p}\nspec: [\n",
		}).Draw(t, "invalid")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s%d, namespace: p}\nspec:\n  upstream: u%d\n  locality: {region: r%d}\n  endpoints:\n",
		own("set", 2*f+rapid.IntRange(0, 1).Draw(t, "which"), 8), rapid.IntRange(0, 1).Draw(t, "upstream"), rapid.IntRange(0, 1).Draw(t, "region"))
	// distinct addresses within the set; sets of one upstream often share one
	n := rapid.IntRange(0, 3).Draw(t, "endpoints")
	first := rapid.IntRange(0, 3).Draw(t, "address")
	for i := range n {
		fmt.Fprintf(&b, "  - {address: 10.0.0.%d, port: 80, weight: %d}\n", (first+i)%4+1, i+1)
	}
	if n > 0 && rapid.Bool().Draw(t, "unhealthy") {
		fmt.Fprintf(&b, "status:\n  health:\n  - {address: 10.0.0.%d, port: 80, probe: Unhealthy}\n", first+1)
	}
	return b.String()
}

// TestIncrementalMatchesFullLoad: after any sequence of bursts of edits,
// renames and removals across a few files, the source accepts exactly the
// bursts a full load of the files at that point accepts, with the same
// message when it refuses, and its Directory then serves what a full load
// gives; a refused burst leaves the last good state.
func TestIncrementalMatchesFullLoad(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	n := 0
	stats := map[string]int{} // what the bursts came to, for -v
	defer func() { t.Logf("bursts: %v", stats) }()
	rapid.Check(t, func(rt *rapid.T) {
		n++
		dir := fmt.Sprintf("%s/%d", root, n)
		if err := os.Mkdir(dir, 0o755); err != nil {
			rt.Fatal(err)
		}
		h := newHarnessIn(rt, dir, nil)
		good := stateOf(h.src.Dir.Current())
		steps := rapid.IntRange(1, 12).Draw(rt, "bursts")
		for step := range steps {
			for range rapid.IntRange(1, 3).Draw(rt, "files in the burst") {
				f := rapid.IntRange(0, 3).Draw(rt, "file")
				name := fmt.Sprintf("%c.yaml", 'a'+f)
				var docs []string
				for range rapid.IntRange(0, 3).Draw(rt, "documents") {
					// mostly distinct objects: a file defining one twice is refused whatever else happens
					d := genDocument(rt, f)
					if id := strings.SplitN(d, "}", 2)[0]; !slices.ContainsFunc(docs, func(o string) bool { return strings.HasPrefix(o, id) }) ||
						rapid.IntRange(0, 9).Draw(rt, "twice") == 0 {
						docs = append(docs, d)
					}
				}
				_, err := os.Stat(h.path(name))
				switch exists := err == nil; rapid.IntRange(0, 3).Draw(rt, "operation") {
				case 0:
					if exists {
						h.remove(name)
						continue
					}
					h.write(name, strings.Join(docs, "---\n"))
				case 1:
					h.replace(name, strings.Join(docs, "---\n"))
				default:
					h.write(name, strings.Join(docs, "---\n"))
				}
			}
			_, err := h.sync()
			ref := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
			refSnap, refErr := ref.Load()
			got := stateOf(h.src.Dir.Current())
			switch {
			case refErr != nil && err == nil:
				rt.Fatalf("burst %d applied; a full load refuses it: %v", step+1, refErr)
			case refErr == nil && err != nil:
				rt.Fatalf("burst %d refused; a full load applies it: %v", step+1, err)
			case err != nil && err.Error() != refErr.Error():
				rt.Fatalf("burst %d refused with\n%v\na full load says\n%v", step+1, err, refErr)
			case err != nil && !got.equal(good):
				rt.Fatalf("burst %d refused, but the Directory changed:\n%s\nwant\n%s", step+1, got, good)
			case err == nil && !got.equal(stateOf(refSnap)):
				rt.Fatalf("burst %d: the Directory differs from a full load:\n%s\nwant\n%s", step+1, got, stateOf(refSnap))
			}
			if err == nil {
				good = got
				stats["applied"]++
			} else {
				switch {
				case strings.Contains(err.Error(), "also defined"):
					stats["duplicate"]++
				case strings.Contains(err.Error(), "batch rejected"):
					stats["batch"]++
				default:
					stats["other"]++
				}
			}
			stats[fmt.Sprintf("upstreams=%d", len(got.Upstreams))]++
		}
	})
}
