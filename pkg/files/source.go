package files

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
)

const (
	sourceName = "files"

	// DefaultDebounce is how long the files must be quiet before a change is
	// applied. An editor's save or a script writing many files is a burst of
	// events a few milliseconds apart: 50 ms takes the whole burst with margin
	// on a busy machine, and each event starts the interval again.
	DefaultDebounce = 50 * time.Millisecond

	// DefaultSettle is how long a change that empties a file, removes it or
	// takes most of its objects away must last before it is applied (see
	// Source.Settle). A writer that truncates a file and then writes it
	// again leaves it empty for a moment, often longer than the debounce on
	// a busy machine; 2 s covers that with a wide margin, and deleting a
	// file's objects on purpose takes 2 s longer.
	DefaultSettle = 2 * time.Second

	// maxFileSize bounds one manifest file: a larger one is refused, naming
	// it, rather than read into memory.
	maxFileSize = 64 << 20
)

// Source loads and watches manifest files.
//
// Load reads and decodes every file. Run then watches the files' directories
// and, after each burst of changes, reads only the files the events name
// (and lists a directory again when a file appears or goes), decodes only
// the documents whose text changed, and hands the Directory a batch of only
// what changed. The outcome is the one a full reload would have: any
// problem in the files, or a batch the Directory refuses, applies nothing.
type Source struct {
	Paths []string
	Dir   *topology.Directory
	// Debounce is how long the files must be quiet after an event before
	// the change is applied; each event starts it again. 0 means
	// DefaultDebounce.
	Debounce time.Duration
	// MaxDelay bounds how long a burst that never falls quiet waits: it is
	// applied at the latest MaxDelay after its first event. 0 means twice
	// Debounce; less than Debounce means Debounce.
	MaxDelay time.Duration
	// Settle is how long a change must last when it takes at least half of
	// the objects a file defines out of the topology, and at least one (a
	// file emptied, removed, or cut short): until the files have shown it
	// that long, the whole change is held back and the previous content
	// keeps serving. Objects moved to another file are not taken out; the
	// objects a change leaves naming an Upstream or a SpatialDomain it takes
	// away count as taken out by the file that loses it. 0 means
	// DefaultSettle; negative applies such changes at once.
	Settle  time.Duration
	Log     *slog.Logger
	Metrics *metrics.Source

	mu    sync.Mutex
	roots []root
	// files is every manifest file under the paths, by the name Load gives
	// it; pending those whose content on disk is not what the Directory
	// holds from them (changed since, or refused).
	files   map[string]*file
	pending map[string]*file
	// rootErrs are paths that cannot be found or listed, by index: as with
	// a full reload, nothing is applied while one is broken.
	rootErrs map[int]error
	// owners says which file each object the Directory holds from us is
	// defined in.
	owners map[topology.ObjectRef]string
	warned map[string]bool // spatial problems already logged
	// loading: Load is reading the files, whose skipped objects its
	// start-up line sums up.
	loading bool
	// refused: the last change was refused (so a return to the applied
	// files is worth a log line).
	refused bool
	// refusalLog bounds the log lines of refusals; used by Run's goroutine only.
	refusalLog refusalLog
	// refusal is why, for /readyz, while it lasts; read without s.mu, which
	// a long batch holds.
	refusal atomic.Pointer[string]
	// reads, decodes and documents count files read and decoded, and
	// documents decoded, for tests.
	reads, decodes, documents int
}

// root is one of the paths: a directory (its manifest files, not its
// subdirectories) or a file.
type root struct {
	path  string
	dir   bool
	files map[string]*file // a directory's files, by name
}

// file is one manifest file: what was last read from disk, and what the
// Directory holds from it.
type file struct {
	name string
	root int         // index of its path, for Load's order
	info os.FileInfo // at the last read; nil when absent
	// disk is the content last read, nil when absent; err says why it
	// could not be read.
	disk *manifest.File
	err  error
	// applied is what the Directory holds from the file (nil: nothing).
	// disk == applied when they are the same.
	applied *manifest.File
	// shrunk is when the file was first seen with content shrunkTo (nil:
	// absent) taking most of its objects away; zero when it is not.
	shrunk   time.Time
	shrunkTo *manifest.File
	// skipped is what the file's objects of other kinds were last logged
	// as ("" none), so a save that keeps them is not logged again.
	skipped string
}

func (f *file) settled() bool { return f.err == nil && f.disk == f.applied }

// Load reads and decodes every manifest and applies them as one batch,
// deleting objects that are no longer in any file. On any error nothing is
// applied.
func (s *Source) Load() (*topology.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The files are the whole truth at once: a name no object defines is a
	// mistake, not an object yet to come.
	if err := s.Dir.RequireComplete(); err != nil {
		return nil, fmt.Errorf("manifest files: %w", err)
	}
	if err := s.setRoots(); err != nil {
		s.countBatch("rejected")
		return nil, err
	}
	s.loading = true
	out, err := s.sync(newChanges(), true)
	s.loading = false
	if err != nil {
		return nil, err
	}
	snap := out.snap
	if snap == nil {
		snap = s.Dir.Current()
	}
	s.logLoaded(snap)
	return snap, nil
}
