package files

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fsnotify/fsnotify"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
)

// harness drives a Source without a watcher: file operations record the
// events fsnotify would deliver for them, and sync applies them as one
// burst, so a test decides exactly what falls in which window.
type harness struct {
	t     tester
	dir   string
	src   *Source
	watch *watchSet
	ch    *changes
}

// tester is what both *testing.T and *rapid.T provide.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newHarness writes files (name → content) into a fresh directory and
// loads it.
func newHarness(t *testing.T, files map[string]string) *harness {
	t.Helper()
	return newHarnessIn(t, t.TempDir(), files)
}

func newHarnessIn(t tester, dir string, files map[string]string) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir, ch: newChanges()}
	for name, content := range files {
		if err := os.WriteFile(h.path(name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// the settle rule is a matter of time, which a harness burst does not
	// pass: each burst is applied as a full load would be
	h.src = &Source{Paths: []string{h.dir}, Dir: topology.NewDirectory(), Settle: -1}
	if _, err := h.src.Load(); err != nil {
		t.Fatal(err)
	}
	h.watch = h.src.newWatchSet()
	return h
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

func (h *harness) event(op fsnotify.Op, name string) {
	h.watch.noteEvent(h.ch, fsnotify.Event{Name: h.path(name), Op: op})
}

// write writes a file in place, as `echo > file` does.
func (h *harness) write(name, content string) {
	h.t.Helper()
	_, err := os.Stat(h.path(name))
	isNew := err != nil
	if err := os.WriteFile(h.path(name), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if isNew {
		h.event(fsnotify.Create, name)
	}
	h.event(fsnotify.Write, name)
}

// replace writes a temporary file and renames it over the file, as many
// editors save.
func (h *harness) replace(name, content string) {
	h.t.Helper()
	tmp := "." + name + ".swp"
	if err := os.WriteFile(h.path(tmp), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.event(fsnotify.Create, tmp)
	h.event(fsnotify.Write, tmp)
	if err := os.Rename(h.path(tmp), h.path(name)); err != nil {
		h.t.Fatal(err)
	}
	h.event(fsnotify.Rename, tmp)
	h.event(fsnotify.Create, name)
}

func (h *harness) remove(name string) {
	h.t.Helper()
	if err := os.Remove(h.path(name)); err != nil {
		h.t.Fatal(err)
	}
	h.event(fsnotify.Remove, name)
}

// sync applies the burst recorded so far.
func (h *harness) sync() (outcome, error) {
	h.src.mu.Lock()
	defer h.src.mu.Unlock()
	ch := h.ch
	h.ch = newChanges()
	return h.src.sync(ch, false)
}

// counters returns the files read and decoded so far.
func (h *harness) counters() (reads, decodes int) {
	h.src.mu.Lock()
	defer h.src.mu.Unlock()
	return h.src.reads, h.src.decodes
}

// upstreamDoc and setDoc write the manifests of topologytest's synthetic
// upstreams: Upstream u, and its EndpointSet in region r with 7, 7 or 6
// endpoints; the endpoints in unhealthy report probe Unhealthy.
func upstreamDoc(u int) string {
	return fmt.Sprintf("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata:\n  name: %s\n  namespace: bench\nspec:\n  protocol: HTTP2\n",
		topologytest.UpstreamName(u))
}

func setDoc(u, r int, unhealthy map[int]bool) string {
	s := topologytest.Set(u, r, unhealthy)
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata:\n  name: %s\n  namespace: bench\nspec:\n  upstream: %s\n  locality: {region: %s}\n  endpoints:\n",
		s.Key.Name, s.Upstream, s.Locality.Region)
	for _, e := range s.Endpoints {
		fmt.Fprintf(&b, "  - {address: %s, port: %d, weight: %d}\n", e.Address, e.Port, e.Weight)
	}
	if len(unhealthy) > 0 {
		b.WriteString("status:\n  health:\n")
		for i, e := range s.Endpoints {
			if unhealthy[i] {
				fmt.Fprintf(&b, "  - {address: %s, port: %d, probe: Unhealthy}\n", e.Address, e.Port)
			}
		}
	}
	return b.String()
}

// syntheticFile is upstreams first..first+n-1 with their three endpoint
// sets; upstream first's first set has the endpoints in unhealthy
// probe-Unhealthy.
func syntheticFile(first, n int, unhealthy map[int]bool) string {
	var docs []string
	for u := first; u < first+n; u++ {
		docs = append(docs, upstreamDoc(u))
		for r := range topologytest.Regions {
			var bad map[int]bool
			if u == first && r == 0 {
				bad = unhealthy
			}
			docs = append(docs, setDoc(u, r, bad))
		}
	}
	return strings.Join(docs, "---\n")
}

// state is what a snapshot serves, without its revisions: two Directories
// fed the same objects in any order of batches have equal states.
type state struct {
	Upstreams []topology.UpstreamState
	Orphans   []topology.ObjectRef
	Spatial   []topology.SpatialState
}

func stateOf(s *topology.Snapshot) state {
	var st state
	for _, u := range s.Upstreams() {
		c := *u
		c.Revision, c.ClusterRevision = 0, 0
		st.Upstreams = append(st.Upstreams, c)
	}
	st.Orphans = s.Orphans()
	for _, sp := range s.Spatial() {
		c := *sp
		c.Revision, c.MapRevision = 0, 0
		st.Spatial = append(st.Spatial, c)
	}
	return st
}

func (a state) equal(b state) bool { return reflect.DeepEqual(a, b) }

func (a state) String() string {
	var b strings.Builder
	for _, u := range a.Upstreams {
		fmt.Fprintf(&b, "%s: %d endpoints, %+v\n", u.Upstream.Key, len(u.Endpoints), *u.Result)
	}
	fmt.Fprintf(&b, "orphans %v\n", a.Orphans)
	for _, s := range a.Spatial {
		fmt.Fprintf(&b, "domain %s: %d partitions\n", s.Domain.Key, len(s.Partitions))
	}
	return b.String()
}
