package files

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fsnotify/fsnotify"

	"poise.dev/poise/pkg/topology"
)

// BenchmarkEditOneFile: 5,000 upstreams (100,000 endpoints) in 100 files of
// 50 upstreams, 200 documents each. One file is edited (one endpoint's
// health toggled) and the change applied: as Run applies it, reading and
// decoding what changed ("incremental"), and by a full Load ("full-load",
// what every change cost before). "every-file" edits all 100 files in one
// burst, as 1,000 writes/s across the files do within a 100ms window.
// Writing the files is not timed.
func BenchmarkEditOneFile(b *testing.B) {
	const files, perFile = 100, 50
	dir := b.TempDir()
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("u%03d.yaml", i)) }
	// versions[i][k]: file i with its first endpoint set healthy (k = 0) or
	// with one endpoint probe-Unhealthy (k = 1)
	versions := make([][2][]byte, files)
	for i := range files {
		versions[i][0] = []byte(syntheticFile(i*perFile, perFile, nil))
		versions[i][1] = []byte(syntheticFile(i*perFile, perFile, map[int]bool{3: true}))
		if err := os.WriteFile(name(i), versions[i][0], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
	if _, err := src.Load(); err != nil {
		b.Fatal(err)
	}
	if n := src.Dir.Current().NumUpstreams(); n != files*perFile {
		b.Fatalf("%d upstreams, want %d", n, files*perFile)
	}
	watch := src.newWatchSet()
	flipped := make([]int, files) // the version each file is at
	// edit writes the other version of the given files and returns the
	// changes their events say.
	edit := func(b *testing.B, which ...int) *changes {
		b.StopTimer()
		defer b.StartTimer()
		ch := newChanges()
		for _, i := range which {
			flipped[i] ^= 1
			if err := os.WriteFile(name(i), versions[i][flipped[i]], 0o644); err != nil {
				b.Fatal(err)
			}
			watch.noteEvent(ch, fsnotify.Event{Name: name(i), Op: fsnotify.Write})
		}
		return ch
	}
	sync := func(b *testing.B, ch *changes, wantBatch int) {
		src.mu.Lock()
		out, err := src.sync(ch, false)
		src.mu.Unlock()
		if err != nil || out.batch != wantBatch {
			b.Fatalf("batch of %d objects, %v; want %d", out.batch, err, wantBatch)
		}
	}

	b.Run("incremental", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sync(b, edit(b, files/2), 1)
		}
	})
	b.Run("full-load", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			edit(b, files/2)
			if _, err := src.Load(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("every-file", func(b *testing.B) {
		all := make([]int, files)
		for i := range all {
			all[i] = i
		}
		b.ReportAllocs()
		for range b.N {
			sync(b, edit(b, all...), files)
		}
	})
}

// BenchmarkLoad: a start. 5,000 upstreams (100,000 endpoints), one file per
// upstream (the Upstream and its three EndpointSets) as test/scale writes
// them, read, decoded and applied to a new Directory by Load.
func BenchmarkLoad(b *testing.B) {
	const upstreams = 5000
	dir := b.TempDir()
	for u := range upstreams {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("u%05d.yaml", u)), []byte(syntheticFile(u, 1, nil)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		src := &Source{Paths: []string{dir}, Dir: topology.NewDirectory()}
		if _, err := src.Load(); err != nil {
			b.Fatal(err)
		}
		if n := src.Dir.Current().NumUpstreams(); n != upstreams {
			b.Fatalf("%d upstreams, want %d", n, upstreams)
		}
	}
}
