package files

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/weights"
)

// tenFiles is the fixture of the incremental tests: f0.yaml … f9.yaml, file
// i holding upstream i and its three endpoint sets (4 documents).
func tenFiles() map[string]string {
	files := map[string]string{}
	for i := range 10 {
		files[fileName(i)] = fileOf(i, nil)
	}
	return files
}

// fileOf is file i with the endpoints in unhealthy of its first upstream's
// first set probe-Unhealthy.
func fileOf(i int, unhealthy map[int]bool) string { return syntheticFile(i, 1, unhealthy) }

func fileName(i int) string { return fmt.Sprintf("f%d.yaml", i) }

// docsOf returns file i's documents, upstream by upstream.
func docsOf(i int) []string {
	return strings.Split(fileOf(i, nil), "---\n")
}

func join(docs ...string) string { return strings.Join(docs, "---\n") }

func upstreamKey(u int) topology.Key {
	return topology.Key{Namespace: "bench", Name: topologytest.UpstreamName(u)}
}

func setRef(u, r int) topology.ObjectRef {
	return topology.ObjectRef{Kind: topology.KindEndpointSet, Key: topologytest.Set(u, r, nil).Key}
}

// probe returns the probe state of endpoint i of upstream u's first set.
func probe(s *topology.Snapshot, u, i int) weights.ProbeHealth {
	st := s.Upstream(upstreamKey(u))
	if st == nil {
		return weights.ProbeUnknown
	}
	want := topologytest.Set(u, 0, nil).Endpoints[i].Address
	for _, e := range st.Endpoints {
		if e.Address == want {
			return e.Probe
		}
	}
	return weights.ProbeUnknown
}

// step is one burst: file operations, then one sync.
type step struct {
	do func(h *harness)
	// err lists what the refusal must say; nil: the burst is applied.
	err []string
	// check looks at the result; before and after are the Directory's
	// snapshots around the step, reads and decodes the files read and
	// decoded in it.
	check func(t *testing.T, h *harness, r result)
}

type result struct {
	before, after  *topology.Snapshot
	out            outcome
	reads, decodes int
}

// unchanged: the Directory was not touched.
func unchanged(t *testing.T, _ *harness, r result) {
	t.Helper()
	if r.after != r.before {
		t.Errorf("revision %d → %d, want the Directory untouched", r.before.Revision, r.after.Revision)
	}
}

func TestIncremental(t *testing.T) {
	t.Parallel()
	moved := docsOf(0)[1] // upstream 0's set in region 0
	f0without := join(slices.Delete(docsOf(0), 1, 2)...)
	f1with := join(append(docsOf(1), moved)...)
	invalid := strings.Replace(fileOf(2, nil), "weight: 1}", "weight: 0}", 1)
	// upstream 4's second set takes an address of its first: the Directory refuses it
	clash := strings.Replace(fileOf(4, nil), "address: 10.0.4.10,", "address: 10.0.4.0,", 1)

	tests := []struct {
		name  string
		steps []step
	}{
		{"edit one file among many: only it is read and decoded, only its changed object is put", []step{{
			do: func(h *harness) { h.write("f3.yaml", fileOf(3, map[int]bool{3: true})) },
			check: func(t *testing.T, h *harness, r result) {
				if r.reads != 1 || r.decodes != 1 {
					t.Errorf("read %d files and decoded %d, want 1 and 1", r.reads, r.decodes)
				}
				if r.out.decoded != 1 || r.out.batch != 1 {
					t.Errorf("decoded %d documents into a batch of %d objects, want 1 and 1", r.out.decoded, r.out.batch)
				}
				if got := probe(r.after, 3, 3); got != weights.ProbeUnhealthy {
					t.Errorf("endpoint 3 of upstream 3 is %v, want Unhealthy", got)
				}
				if changed, _ := r.after.ChangedSince(r.before.Revision); !slices.Equal(changed, []topology.Key{upstreamKey(3)}) {
					t.Errorf("upstreams changed: %v, want only upstream 3", changed)
				}
			},
		}}},
		{"an editor replaces the file by renaming", []step{{
			do: func(h *harness) { h.replace("f3.yaml", fileOf(3, map[int]bool{2: true})) },
			check: func(t *testing.T, h *harness, r result) {
				if r.reads != 1 || r.decodes != 1 || r.out.batch != 1 {
					t.Errorf("read %d, decoded %d, batch of %d; want 1, 1, 1", r.reads, r.decodes, r.out.batch)
				}
				if got := probe(r.after, 3, 2); got != weights.ProbeUnhealthy {
					t.Errorf("endpoint 2 of upstream 3 is %v, want Unhealthy", got)
				}
			},
		}}},
		{"a new file is read and applied", []step{{
			do: func(h *harness) { h.write("new.yaml", syntheticFile(50, 1, nil)) },
			check: func(t *testing.T, h *harness, r result) {
				if r.reads != 1 || r.out.batch != 4 {
					t.Errorf("read %d files, batch of %d; want 1 and 4", r.reads, r.out.batch)
				}
				if u := r.after.Upstream(upstreamKey(50)); u == nil || len(u.Endpoints) != 20 {
					t.Errorf("upstream 50: %+v", u)
				}
			},
		}}},
		{"a removed file's objects are deleted", []step{{
			do: func(h *harness) { h.remove("f9.yaml") },
			check: func(t *testing.T, h *harness, r result) {
				if r.reads != 0 || r.out.batch != 4 {
					t.Errorf("read %d files, batch of %d; want 0 and 4 deletions", r.reads, r.out.batch)
				}
				if n := r.after.NumUpstreams(); n != 9 || len(r.after.Orphans()) != 0 {
					t.Errorf("%d upstreams and orphans %v, want 9 and none", n, r.after.Orphans())
				}
			},
		}}},
		{"an identical rewrite applies nothing", []step{{
			do: func(h *harness) { h.write("f5.yaml", fileOf(5, nil)) },
			check: func(t *testing.T, h *harness, r result) {
				unchanged(t, h, r)
				if r.decodes != 0 || r.out.snap != nil {
					t.Errorf("decoded %d files, applied %v; want nothing", r.decodes, r.out.snap != nil)
				}
			},
		}}},
		{"reordered documents decode nothing and change nothing", []step{{
			do: func(h *harness) {
				docs := docsOf(4)
				slices.Reverse(docs)
				h.write("f4.yaml", join(docs...))
			},
			check: func(t *testing.T, h *harness, r result) {
				unchanged(t, h, r)
				if r.out.decoded != 0 {
					t.Errorf("decoded %d documents, want none", r.out.decoded)
				}
				if got := h.src.definedAt(setRef(4, 2)); got != filepath.Join(h.dir, "f4.yaml")+" document 1" {
					t.Errorf("where = %q, want f4.yaml document 1", got)
				}
			},
		}}},
		{"an object moved between files in one burst", []step{{
			do: func(h *harness) {
				h.write("f0.yaml", f0without)
				h.write("f1.yaml", f1with)
			},
			check: func(t *testing.T, h *harness, r result) {
				unchanged(t, h, r)
				if got := h.src.definedAt(setRef(0, 0)); !strings.Contains(got, "f1.yaml document 5") {
					t.Errorf("the set is now at %q, want f1.yaml document 5", got)
				}
			},
		}}},
		{"an object added to B, then removed from A: a duplicate, then clean", []step{
			{
				do: func(h *harness) { h.write("f1.yaml", f1with) },
				err: []string{"f1.yaml: document 5 (EndpointSet bench/svc-0000-eu-west): metadata.name: EndpointSet bench/svc-0000-eu-west is also defined in ",
					"f0.yaml document 2"},
				check: unchanged,
			},
			{
				do:    func(h *harness) { h.write("f0.yaml", f0without) },
				check: unchanged,
			},
			{
				// the next edit of the set is applied from its new file
				do: func(h *harness) { h.write("f1.yaml", join(append(docsOf(1), setDoc(0, 0, map[int]bool{1: true}))...)) },
				check: func(t *testing.T, h *harness, r result) {
					if got := probe(r.after, 0, 1); got != weights.ProbeUnhealthy {
						t.Errorf("endpoint 1 of upstream 0 is %v, want Unhealthy", got)
					}
				},
			},
		}},
		{"a duplicate in an unchanged later file is reported there, naming the new earlier file", []step{{
			do:    func(h *harness) { h.write("a.yaml", moved) },
			err:   []string{"f0.yaml: document 2 (EndpointSet bench/svc-0000-eu-west): metadata.name: EndpointSet bench/svc-0000-eu-west is also defined in ", "a.yaml document 1"},
			check: unchanged,
		}}},
		{"a refused edit keeps the last good state; a fix applies", []step{
			{do: func(h *harness) { h.write("f2.yaml", invalid) }, err: []string{"f2.yaml: document 2 (EndpointSet bench/svc-0002-eu-west): spec.endpoints[0].weight"}, check: unchanged},
			{
				do: func(h *harness) { h.write("f2.yaml", fileOf(2, map[int]bool{0: true})) },
				check: func(t *testing.T, h *harness, r result) {
					if got := probe(r.after, 2, 0); got != weights.ProbeUnhealthy {
						t.Errorf("endpoint 0 of upstream 2 is %v, want Unhealthy", got)
					}
				},
			},
		}},
		{"a refused file refuses every later change until it is fixed", []step{
			{do: func(h *harness) { h.write("f2.yaml", invalid) }, err: []string{"f2.yaml: document 2"}, check: unchanged},
			{do: func(h *harness) { h.write("f3.yaml", fileOf(3, map[int]bool{1: true})) }, err: []string{"f2.yaml: document 2"},
				check: func(t *testing.T, h *harness, r result) {
					unchanged(t, h, r)
					if r.reads != 1 || r.decodes != 1 {
						t.Errorf("read %d and decoded %d files, want only f3.yaml", r.reads, r.decodes)
					}
				}},
			{
				do: func(h *harness) { h.write("f2.yaml", fileOf(2, nil)) },
				check: func(t *testing.T, h *harness, r result) {
					if probe(r.after, 3, 1) != weights.ProbeUnhealthy || r.out.batch != 1 {
						t.Errorf("f3.yaml's edit was not applied with the fix (batch of %d)", r.out.batch)
					}
				},
			},
		}},
		{"a refused edit reverted applies nothing, and the next edit works", []step{
			{do: func(h *harness) { h.replace("f2.yaml", invalid) }, err: []string{"spec.endpoints[0].weight"}, check: unchanged},
			{do: func(h *harness) { h.replace("f2.yaml", fileOf(2, nil)) }, check: func(t *testing.T, h *harness, r result) {
				unchanged(t, h, r)
				if r.decodes != 0 || r.out.snap != nil {
					t.Errorf("decoded %d files, applied %v; want the applied content recognised", r.decodes, r.out.snap != nil)
				}
			}},
			{do: func(h *harness) { h.write("f3.yaml", fileOf(3, map[int]bool{6: true})) }, check: func(t *testing.T, h *harness, r result) {
				if probe(r.after, 3, 6) != weights.ProbeUnhealthy || r.out.batch != 1 {
					t.Errorf("the next edit: batch of %d", r.out.batch)
				}
			}},
		}},
		{"a change the Directory refuses applies nothing, located; a fix applies", []step{
			{do: func(h *harness) { h.write("f4.yaml", clash) }, err: []string{"upstream bench/svc-0004", "f4.yaml document 2)", "f4.yaml document 3)"}, check: unchanged},
			{do: func(h *harness) { h.write("f4.yaml", fileOf(4, map[int]bool{4: true})) }, check: func(t *testing.T, h *harness, r result) {
				if probe(r.after, 4, 4) != weights.ProbeUnhealthy {
					t.Error("the fix was not applied")
				}
			}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tenFiles())
			for i, st := range tc.steps {
				before := h.src.Dir.Current()
				reads, decodes := h.counters()
				st.do(h)
				out, err := h.sync()
				r := result{before: before, after: h.src.Dir.Current(), out: out}
				r.reads, r.decodes = h.counters()
				r.reads -= reads
				r.decodes -= decodes
				switch {
				case st.err == nil && err != nil:
					t.Fatalf("step %d refused: %v", i+1, err)
				case st.err != nil && err == nil:
					t.Fatalf("step %d applied, want it refused", i+1)
				}
				for _, want := range st.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("step %d: refusal lacks %q:\n%v", i+1, want, err)
					}
				}
				if st.check != nil {
					t.Run(fmt.Sprintf("step %d", i+1), func(t *testing.T) { st.check(t, h, r) })
				}
			}
			// Whatever the steps, the Directory holds what a full load of the files gives.
			want := fullLoad(t, h.dir)
			if got := stateOf(h.src.Dir.Current()); want != nil && !got.equal(*want) {
				t.Errorf("the Directory differs from a full load:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// fullLoad loads dir into a fresh Directory and returns its state, or nil
// when the files are refused.
func fullLoad(t *testing.T, dir string) *state {
	t.Helper()
	src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
	snap, err := src.Load()
	if err != nil {
		return nil
	}
	st := stateOf(snap)
	return &st
}

// TestReleasedDocumentsAreDecodedAgain: should a document to be put come
// from content whose decoded objects were released, its file is decoded
// afresh and the change is applied all the same.
func TestReleasedDocumentsAreDecodedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenFiles())
	h.write("f3.yaml", fileOf(3, map[int]bool{3: true}))
	h.src.mu.Lock()
	f := h.src.files[h.path("f3.yaml")]
	h.src.readFiles([]*file{f}, true, false)
	f.disk.Release()
	h.src.mu.Unlock()
	_, decodes := h.counters()
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if got := probe(h.src.Dir.Current(), 3, 3); got != weights.ProbeUnhealthy {
		t.Errorf("endpoint 3 of upstream 3 is %v, want Unhealthy", got)
	}
	if _, after := h.counters(); after-decodes != 1 {
		t.Errorf("decoded %d files, want f3.yaml afresh", after-decodes)
	}
}

// TestRevertAfterRefusalIsLogged: a refused edit put back as it was is
// logged once as such; it applies nothing.
func TestRevertAfterRefusalIsLogged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenFiles())
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	burst := func() {
		ch := h.ch
		h.ch = newChanges()
		h.src.applyBurst(ch, log)
	}
	before := h.src.Dir.Current()
	h.write("f2.yaml", strings.Replace(fileOf(2, nil), "weight: 1}", "weight: 0}", 1))
	burst()
	h.write("f2.yaml", fileOf(2, nil))
	burst()
	h.write("f2.yaml", fileOf(2, nil))
	burst()
	out := logs.String()
	if n := strings.Count(out, "manifest change refused"); n != 1 {
		t.Errorf("%d refusals logged, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "manifest files are back to the applied topology"); n != 1 {
		t.Errorf("the revert was logged %d times, want once:\n%s", n, out)
	}
	if h.src.Dir.Current() != before {
		t.Error("the Directory changed")
	}
}
