package files

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

// run starts src.Run, stopped when the test ends, and returns once Run has
// taken its first look at the files: its watch is in place, so what the test
// writes next is seen as a change. That first look sets
// poise_source_refusing, whose series the Source's metrics (made here if
// the test gives none) must not have before.
func run(t *testing.T, src *Source) {
	t.Helper()
	if src.Metrics == nil {
		src.Metrics = metrics.New(metrics.Options{}).Source
	}
	looked := func() int { return testutil.CollectAndCount(src.Metrics.Refusing) }
	if n := looked(); n != 0 {
		t.Fatalf("run: poise_source_refusing has %d series before Run, want none (metrics.Options without Source)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testkit.Eventually(t, 10*time.Second, "the watch's first look at the files", func() (bool, string) {
		return looked() > 0, "poise_source_refusing not set yet"
	})
}

// applies records when each new revision of a Directory is published.
type applies struct {
	mu    sync.Mutex
	times []time.Time
}

func watchApplies(t *testing.T, d *topology.Directory) *applies {
	a := &applies{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.Changed():
				a.mu.Lock()
				a.times = append(a.times, time.Now())
				a.mu.Unlock()
			}
		}
	}()
	return a
}

func (a *applies) since(t0 time.Time) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Time
	for _, at := range a.times {
		if !at.Before(t0) {
			out = append(out, at)
		}
	}
	return out
}

func TestDelays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		debounce, most         time.Duration
		wantQuiet, wantMaxWait time.Duration
	}{
		{0, 0, DefaultDebounce, 2 * DefaultDebounce},
		{250 * time.Millisecond, 0, 250 * time.Millisecond, 500 * time.Millisecond},
		{20 * time.Millisecond, 150 * time.Millisecond, 20 * time.Millisecond, 150 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, // the cap is never below the quiet interval
	} {
		s := &Source{Debounce: tc.debounce, MaxDelay: tc.most}
		if q, m := s.burstDelays(); q != tc.wantQuiet || m != tc.wantMaxWait {
			t.Errorf("Debounce %v, MaxDelay %v: quiet %v, cap %v; want %v, %v", tc.debounce, tc.most, q, m, tc.wantQuiet, tc.wantMaxWait)
		}
	}
}

// TestBurstIsAppliedOnce: writes a few milliseconds apart are one burst,
// applied once the files are quiet.
func TestBurstIsAppliedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 10 {
		write(t, filepath.Join(dir, fileName(i)), fileOf(i, nil))
	}
	d := topology.NewDirectory()
	// a long quiet interval, so a slow machine's pause between two writes does not split the burst
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 300 * time.Millisecond, MaxDelay: 10 * time.Second}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	seen := watchApplies(t, d)
	start := time.Now()
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, fileName(i)), []byte(fileOf(i, map[int]bool{0: true})), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	last := time.Now()
	snap := waitFor(t, d, "every edit", func(s *topology.Snapshot) bool {
		for i := range 10 {
			if probe(s, i, 0) != weights.ProbeUnhealthy {
				return false
			}
		}
		return true
	})
	// the watching goroutine records the apply just after waitFor sees it;
	// a second apply, if any, would come within another quiet interval
	testkit.Eventually(t, time.Second, "the apply recorded", func() (bool, string) { return len(seen.since(start)) > 0, "" })
	// no second apply through another quiet interval (300ms) and a margin
	quiet := time.Now().Add(400 * time.Millisecond)
	testkit.Eventually(t, 10*time.Second, "a quiet interval past the apply", func() (bool, string) {
		if at := seen.since(start); len(at) != 1 {
			t.Fatalf("%d applies for one burst, want 1 (revision %d)", len(at), snap.Revision)
		}
		return !time.Now().Before(quiet), ""
	})
	if at := seen.since(start); at[0].Sub(last) < 300*time.Millisecond {
		t.Errorf("applied %v after the last write, before the files were quiet for 300ms", at[0].Sub(last))
	}
}

// TestContinuousEditsAreAppliedEveryMaxDelay: writes that never fall quiet
// are still applied, at least once per MaxDelay.
func TestContinuousEditsAreAppliedEveryMaxDelay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 10 {
		write(t, filepath.Join(dir, fileName(i)), fileOf(i, nil))
	}
	d := topology.NewDirectory()
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 40 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	seen := watchApplies(t, d)
	// one write every 5ms, round the files, never quiet for 40ms, until
	// three applies have come (about 300ms with a 100ms cap; a slow machine
	// applies less often, but not never): within 1.5s
	start := time.Now()
	var n int
	testkit.EventuallyEvery(t, 1500*time.Millisecond, 5*time.Millisecond, "3 applies during continuous writes with a 100ms cap", func() (bool, string) {
		if during := len(seen.since(start)); during >= 3 {
			return true, ""
		}
		i := n % 10
		if err := os.WriteFile(filepath.Join(dir, fileName(i)), []byte(fileOf(i, map[int]bool{n % 7: true})), 0o644); err != nil {
			t.Fatal(err)
		}
		n++
		return false, fmt.Sprintf("%d applies, %d writes", len(seen.since(start)), n)
	})
	during := len(seen.since(start))
	// and the last write is applied once they stop
	last := (n - 1) % 10
	waitFor(t, d, "the last write", func(s *topology.Snapshot) bool { return probe(s, last, (n-1)%7) == weights.ProbeUnhealthy })
	t.Logf("%d writes, %d applies during the stream", n, during)
}

// TestWatchFollowsALinkSwap: a Kubernetes volume updates its files by
// swapping a ..data link to a new directory; the files, links into it,
// change without an event of their own.
func TestWatchFollowsALinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(n int, content string) {
		t.Helper()
		data := filepath.Join(dir, fmt.Sprintf("..v%d", n))
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "f0.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version(1, fileOf(0, nil))
	if err := os.Symlink(filepath.Join("..data", "f0.yaml"), filepath.Join(dir, "f0.yaml")); err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	src := &Source{Paths: []string{dir}, Dir: d, Debounce: 10 * time.Millisecond}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	version(2, fileOf(0, map[int]bool{2: true}))
	waitFor(t, d, "the new version", func(s *topology.Snapshot) bool { return probe(s, 0, 2) == weights.ProbeUnhealthy })
}

// TestWatchAFileAmongOthers: a file path is watched through its directory,
// replaced by renaming; the directory's other files are not read.
func TestWatchAFileAmongOthers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "f0.yaml"), fileOf(0, nil))
	write(t, filepath.Join(dir, "other.yaml"), "not a manifest of ours: [")
	d := topology.NewDirectory()
	src := &Source{Paths: []string{filepath.Join(dir, "f0.yaml")}, Dir: d, Debounce: 10 * time.Millisecond}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	run(t, src)
	write(t, filepath.Join(dir, "other.yaml"), "still not: [")
	write(t, filepath.Join(dir, "f0.yaml"), fileOf(0, map[int]bool{5: true}))
	waitFor(t, d, "the edit", func(s *topology.Snapshot) bool { return probe(s, 0, 5) == weights.ProbeUnhealthy })
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.files) != 1 || src.reads != 2 {
		t.Errorf("tracking %d files and read %d times, want f0.yaml alone, read at Load and after its edit", len(src.files), src.reads)
	}
}
