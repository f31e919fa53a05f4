package files

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

// upstreamsOf returns which of upstreams 0..n-1 a snapshot serves.
func upstreamsOf(s *topology.Snapshot, n int) map[int]bool {
	have := map[int]bool{}
	for u := range n {
		if s.Upstream(upstreamKey(u)) != nil {
			have[u] = true
		}
	}
	return have
}

// upstreamsFile is a file of the given upstreams, each with its endpoint
// sets; upstream u's first set has endpoint flip probe-Unhealthy, so
// every write is a change.
func upstreamsFile(ups []int, flip int) string {
	var docs []string
	for _, u := range ups {
		docs = append(docs, syntheticFile(u, 1, map[int]bool{flip % 7: true}))
	}
	return strings.Join(docs, "---\n")
}

// subscriber records every snapshot a Directory publishes, as the xDS
// publisher reads them, and checks each with ok.
type subscriber struct {
	mu   sync.Mutex
	bad  []string
	seen int
}

func subscribe(t *testing.T, d *topology.Directory, ok func(*topology.Snapshot) string) *subscriber {
	sub := &subscriber{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			changed := d.Changed()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			snap := d.Current()
			sub.mu.Lock()
			sub.seen++
			if why := ok(snap); why != "" {
				sub.bad = append(sub.bad, why)
			}
			sub.mu.Unlock()
		}
	}()
	return sub
}

// TestTruncateThenWriteNeverPublishesAPartialState: a
// writer that truncates a file and then writes its new content leaves it
// empty for a moment; read then, it said "delete everything", and a client
// lost clusters that both the old and the new content have. Random
// truncate-then-write edits through the watching source: no published
// snapshot lacks an upstream that the content before and after the edit
// both define.
func TestTruncateThenWriteNeverPublishesAPartialState(t *testing.T) {
	t.Parallel()
	const (
		core   = 3 // upstreams 0..2: in every version of the file
		extras = 4 // upstreams 3..6: in some
		edits  = 25
	)
	dir := t.TempDir()
	name := filepath.Join(dir, "topology.yaml")
	rng := rand.New(rand.NewPCG(12, 6))
	version := func(i int) string {
		ups := []int{0, 1, 2}
		for u := core; u < core+extras; u++ {
			if rng.IntN(2) == 0 {
				ups = append(ups, u)
			}
		}
		return upstreamsFile(ups, i)
	}
	write(t, name, version(0))
	d := topology.NewDirectory()
	// A debounce far shorter than the writer's pause, as on a busy machine;
	// the default settle time.
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 5 * time.Millisecond}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	sub := subscribe(t, d, func(s *topology.Snapshot) string {
		if have := upstreamsOf(s, core); len(have) != core {
			return fmt.Sprintf("revision %d serves %d of the %d upstreams every version has", s.Revision, len(have), core)
		}
		return ""
	})
	var longest time.Duration // that a file stayed empty
	for i := 1; i <= edits; i++ {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		truncated := time.Now()
		// sleep: the file must stay empty for a while, well past the
		// debounce and short of the settle time: the moment a reader sees it so
		time.Sleep(time.Duration(20+rng.IntN(180)) * time.Millisecond)
		if _, err := f.WriteString(version(i)); err != nil {
			t.Fatal(err)
		}
		longest = max(longest, time.Since(truncated))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// sleep: the writer's pace: the next edit comes sooner or later
		// than the debounce, within one burst or in the next
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	}
	last := upstreamsOf(fullLoadSnapshot(t, dir), core+extras)
	waitFor(t, d, "the last version", func(s *topology.Snapshot) bool {
		return equalSets(upstreamsOf(s, core+extras), last) && s.Upstream(upstreamKey(0)) != nil &&
			probe(s, 0, edits%7) == weights.ProbeUnhealthy
	})
	sub.mu.Lock()
	switch {
	case len(sub.bad) > 0 && longest >= DefaultSettle:
		// the rule applies a file empty for longer: so it was, on a machine this busy
		t.Logf("a file stayed empty %v, past the settle time %v: %d snapshots without it", longest, DefaultSettle, len(sub.bad))
	case len(sub.bad) > 0:
		t.Errorf("%d of %d published snapshots lost an upstream during %d truncate-then-write edits; first: %s",
			len(sub.bad), sub.seen, edits, sub.bad[0])
	}
	seen := sub.seen
	sub.mu.Unlock()
	// the warning is cleared just after the Directory publishes
	testkit.Eventually(t, time.Second, "Refusal() empty once the files are whole again", func() (bool, string) {
		r := src.Refusal()
		return r == "", fmt.Sprintf("Refusal() = %q", r)
	})
	t.Logf("%d snapshots published during %d edits; a file stayed empty %v at the longest", seen, edits, longest)
}

// TestAFileEmptiedForLongerThanSettleIsApplied: emptying a file, or
// removing it, is legitimate and deletes its objects, once it has stayed
// so past the settle time; until then the previous content serves, and
// /readyz's warning and poise_source_refusing say so.
func TestAFileEmptiedForLongerThanSettleIsApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"emptied", func(t *testing.T, path string) { write(t, path, "") }},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write(t, filepath.Join(dir, "keep.yaml"), upstreamsFile([]int{0}, 0))
			write(t, filepath.Join(dir, "go.yaml"), upstreamsFile([]int{1, 2}, 0))
			held := checkHeldThenApplied(t, dir, func() { tc.do(t, filepath.Join(dir, "go.yaml")) },
				func(s *topology.Snapshot) bool { return equalSets(upstreamsOf(s, 3), map[int]bool{0: true}) })
			if !strings.Contains(held, "go.yaml would take 8 of its 8 objects away") {
				t.Errorf("warning while held: %q, want it to name go.yaml and its 8 objects", held)
			}
		})
	}
}

// TestAFileLosingMostObjectsIsAppliedAfterSettle: a file cut to less than
// half of its objects is held back for the settle time, then applied; one
// that keeps more than half, or whose objects move to another file, is
// applied at once.
func TestAFileLosingMostObjectsIsAppliedAfterSettle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	write(t, path, upstreamsFile([]int{0, 1, 2, 3}, 0)) // 16 objects
	checkHeldThenApplied(t, dir, func() { write(t, path, upstreamsFile([]int{0, 1}, 0)) },
		func(s *topology.Snapshot) bool { return equalSets(upstreamsOf(s, 4), map[int]bool{0: true, 1: true}) })

	h := newHarness(t, map[string]string{"a.yaml": upstreamsFile([]int{0, 1, 2, 3}, 0)})
	h.src.Settle = time.Hour
	h.write("a.yaml", upstreamsFile([]int{0, 1, 2}, 0)) // 4 of 16 objects go
	if out, err := h.sync(); err != nil || len(out.held) > 0 || out.snap == nil {
		t.Fatalf("a quarter of a file's objects gone: held %v, err %v; want it applied at once", out.held, err)
	}
	// three of its upstreams move to b.yaml: a.yaml loses them, the topology does not
	h.write("a.yaml", upstreamsFile([]int{0}, 0))
	h.write("b.yaml", upstreamsFile([]int{1, 2}, 0))
	if out, err := h.sync(); err != nil || len(out.held) > 0 || out.snap == nil {
		t.Fatalf("objects moved to another file: held %v, err %v; want it applied at once", out.held, err)
	}
	h.write("b.yaml", "")
	if out, err := h.sync(); err != nil || len(out.held) != 1 || out.snap != nil {
		t.Fatalf("b.yaml emptied: held %v, err %v, applied %v; want b.yaml held", out.held, err, out.snap != nil)
	}
	// put back as it was: nothing is pending, nothing held
	h.write("b.yaml", upstreamsFile([]int{1, 2}, 0))
	if out, err := h.sync(); err != nil || len(out.held) > 0 {
		t.Fatalf("b.yaml put back: held %v, err %v", out.held, err)
	}
}

// checkHeldThenApplied loads dir into a watching source with a short settle
// time, makes a change, and checks that it is held back (the snapshot
// unchanged, the warning and gauge set) until the settle time has passed,
// and then applied (want holds, the warning and gauge are clear). It
// returns the warning shown while held.
func checkHeldThenApplied(t *testing.T, dir string, change func(), want func(*topology.Snapshot) bool) string {
	t.Helper()
	const settle = 600 * time.Millisecond
	m := metrics.New(metrics.Options{}).Source // no series yet: see run
	d := topology.NewDirectory()
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 5 * time.Millisecond, Settle: settle, Metrics: m}
	before, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	run(t, src)
	refusing := func() float64 { return testutil.ToFloat64(m.Refusing.WithLabelValues("files")) }
	start := time.Now()
	change()
	var held string
	testkit.Eventually(t, settle/2, "the change held back with a warning", func() (bool, string) {
		held = src.Refusal()
		return held != "", "no warning"
	})
	if refusing() != 1 {
		t.Errorf("poise_source_refusing = %v while held, want 1", refusing())
	}
	if d.Current() != before {
		t.Fatalf("the change was applied %v after it, before the settle time %v", time.Since(start), settle)
	}
	got := waitFor(t, d, "the change, once settled", want)
	if took := time.Since(start); took < settle {
		t.Errorf("applied %v after the change, before the settle time %v", took, settle)
	}
	if got.Revision != before.Revision+1 {
		t.Errorf("revision %d after %d: want the change applied as one batch", got.Revision, before.Revision)
	}
	// the warning is cleared just after the Directory publishes the change
	testkit.Eventually(t, time.Second, "the warning cleared once the change is applied", func() (bool, string) {
		return src.Refusal() == "" && refusing() == 0, fmt.Sprintf("warning %q, poise_source_refusing %v", src.Refusal(), refusing())
	})
	return held
}

func fullLoadSnapshot(t *testing.T, dir string) *topology.Snapshot {
	t.Helper()
	src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func equalSets(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// Refusals are logged as a burst, then once per refusalEvery with a count
// of those left out, so a writer that breaks the files in a loop cannot
// fill the log.
func TestRefusalLogIsBounded(t *testing.T) {
	t.Parallel()
	var l refusalLog
	t0 := time.Unix(1000, 0)
	logged := 0
	for i := range 100 {
		if _, ok := l.take(t0.Add(time.Duration(i) * 10 * time.Millisecond)); ok {
			logged++
		}
	}
	if logged != refusalBurst {
		t.Fatalf("100 refusals within a second: %d lines, want the burst of %d", logged, refusalBurst)
	}
	more, ok := l.take(t0.Add(refusalEvery + time.Second))
	if !ok || more != 90 {
		t.Fatalf("the next line after %v: logged %v, standing for %d refusals; want logged, standing for 90", refusalEvery, ok, more)
	}
	if _, ok := l.take(t0.Add(refusalEvery + 2*time.Second)); ok {
		t.Fatal("a second line within the same refusalEvery was logged")
	}
	// an hour of a refusal every 50 ms: bounded by the rate, not the refusals
	logged = 0
	for i := range int(time.Hour / (50 * time.Millisecond)) {
		if _, ok := l.take(t0.Add(refusalEvery + 3*time.Second + time.Duration(i)*50*time.Millisecond)); ok {
			logged++
		}
	}
	if max := int(time.Hour/refusalEvery) + refusalBurst; logged > max {
		t.Fatalf("an hour of refusals every 50ms logged %d lines; want at most %d", logged, max)
	}
	if long := truncateReason(strings.Repeat("é", maxRefusalText)); len(long) > maxRefusalText+len("…") || !utf8.ValidString(long) {
		t.Fatalf("a long reason is cut to %d bytes (valid UTF-8: %v)", len(long), utf8.ValidString(long))
	}
}

// TestOtherKindsDoNotCountForSettle: the Namespaces and Services kubectl
// applies from the same files are skipped, and the settle rule counts only
// Poise objects: a file of other kinds alone is never "emptied", and other
// kinds added to a file do not hide that its Poise objects are going.
func TestOtherKindsDoNotCountForSettle(t *testing.T) {
	t.Parallel()
	const (
		ns  = "apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n"
		svc = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: bench}\n"
	)
	h := newHarness(t, map[string]string{
		"a.yaml": ns + "---\n" + upstreamsFile([]int{0, 1}, 0), // 8 Poise objects
		"b.yaml": ns + "---\n" + svc,
	})
	h.src.Settle = time.Hour
	if got := upstreamsOf(h.src.Dir.Current(), 2); !equalSets(got, map[int]bool{0: true, 1: true}) {
		t.Fatalf("loaded upstreams %v, want 0 and 1", got)
	}
	for _, step := range []struct {
		what, file, content string
		held                bool
	}{
		{"a file of other kinds emptied", "b.yaml", "", false},
		{"the Namespace taken out of a file", "a.yaml", upstreamsFile([]int{0, 1}, 0), false},
		{"half of the Poise objects go while other kinds come", "a.yaml", strings.Repeat(svc+"---\n", 9) + upstreamsFile([]int{0}, 0), true},
	} {
		h.write(step.file, step.content)
		out, err := h.sync()
		if err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if held := len(out.held) > 0; held != step.held {
			t.Errorf("%s: held %v, want held %v", step.what, out.held, step.held)
		}
	}
	// the skipped documents of an edited file are not decoded again
	h.write("a.yaml", strings.Repeat(svc+"---\n", 9)+upstreamsFile([]int{0}, 1))
	if out, err := h.sync(); err != nil || out.decoded != 1 {
		t.Errorf("one EndpointSet edited beside 9 Services: %d documents decoded (err %v), want 1", out.decoded, err)
	}
}
