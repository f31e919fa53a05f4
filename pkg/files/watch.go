package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"poise.dev/poise/pkg/manifest"
)

// changes is what the events of one burst say may have changed.
type changes struct {
	read  map[string]bool // files to read again, named by an event
	list  map[int]bool    // directory paths to list again, by index
	check map[string]bool // directories whose files to stat again (a link or directory changed there)
	all   bool            // list and stat everything: events were lost
	// pending: read the files pending again (a held change's settle time
	// is over: what is applied is what is on disk then, not what was)
	pending bool
}

func newChanges() *changes {
	return &changes{read: map[string]bool{}, list: map[int]bool{}, check: map[string]bool{}}
}

// burstDelays returns the quiet interval and the cap of a burst.
func (s *Source) burstDelays() (quiet, most time.Duration) {
	quiet = s.Debounce
	if quiet <= 0 {
		quiet = DefaultDebounce
	}
	most = s.MaxDelay
	if most <= 0 {
		most = 2 * quiet
	}
	return quiet, max(most, quiet)
}

// Run watches the paths until ctx is done and, once the events of a burst
// have been quiet for Debounce (or MaxDelay after its first event, if they
// never are), applies what changed. A refused change is logged and
// counted; the directory keeps its last good state. A change held back by
// the settle rule (see Settle) is looked at again once it has lasted
// Settle, with or without another event.
func (s *Source) Run(ctx context.Context) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.mu.Lock()
	var err error
	if s.roots == nil {
		err = s.setRoots()
	}
	watch := s.newWatchSet()
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("watch manifests: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifests: %w", err)
	}
	defer w.Close()
	for dir := range watch.dirs {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	// What changed between Load and the watch starting is caught by
	// looking at every file once.
	ch := newChanges()
	ch.all = true
	recheck := time.NewTimer(time.Hour)
	defer recheck.Stop()
	holdFor := func(wait time.Duration) {
		if wait > 0 {
			recheck.Reset(wait)
		} else {
			recheck.Stop()
		}
	}
	holdFor(s.applyBurst(ch, log))

	// Events are taken in their own goroutine, so they keep being read while
	// a burst is applied: left unread, the kernel's queue of them overflows
	// under a steady stream of writes, and a lost event means looking at
	// every file.
	var (
		mu    sync.Mutex
		burst = newChanges()
		ready = make(chan struct{}, 1)
	)
	done := make(chan struct{})
	defer func() { <-done }()
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		defer close(done)
		s.collectEvents(watchCtx, w, watch, log, &mu, &burst, ready)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			return nil
		case <-ready:
			mu.Lock()
			ch := burst
			burst = newChanges()
			mu.Unlock()
			holdFor(s.applyBurst(ch, log))
		case <-recheck.C:
			ch := newChanges()
			ch.pending = true
			holdFor(s.applyBurst(ch, log))
		}
	}
}

// collectEvents notes every event into *burst and signals ready once the
// burst has been quiet for Debounce, or MaxDelay after its first event.
func (s *Source) collectEvents(ctx context.Context, w *fsnotify.Watcher, watch *watchSet, log *slog.Logger,
	mu *sync.Mutex, burst **changes, ready chan<- struct{}) {
	quiet, most := s.burstDelays()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // of the burst; zero when none is waiting
	wait := func() {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		timer.Reset(min(quiet, most-now.Sub(first)))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			mu.Lock()
			noted := watch.noteEvent(*burst, ev)
			mu.Unlock()
			if noted {
				wait()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Warn("manifest watch error", "error", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				mu.Lock()
				(*burst).all = true
				mu.Unlock()
				wait()
			}
		case <-timer.C:
			first = time.Time{}
			select {
			case ready <- struct{}{}:
			default: // an apply is already due: it takes this burst too
			}
		}
	}
}

// watchSet is the directories watched and what their events concern.
type watchSet struct {
	roots []root
	dirs  map[string]*watchDir // by clean path
}

type watchDir struct {
	root  int   // the directory path watched here, or -1
	files []int // the file paths in this directory
}

// newWatchSet watches each directory path, and each file path's directory (so
// an editor that replaces the file by renaming keeps being seen).
func (s *Source) newWatchSet() *watchSet {
	ws := &watchSet{roots: slices.Clone(s.roots), dirs: map[string]*watchDir{}}
	dir := func(p string) *watchDir {
		wd := ws.dirs[p]
		if wd == nil {
			wd = &watchDir{root: -1}
			ws.dirs[p] = wd
		}
		return wd
	}
	for i, r := range s.roots {
		if r.dir {
			dir(filepath.Clean(r.path)).root = i
		} else {
			wd := dir(filepath.Dir(filepath.Clean(r.path)))
			wd.files = append(wd.files, i)
		}
	}
	return ws
}

// noteEvent records what an event may have changed, and reports whether it
// concerns the manifests at all.
func (ws *watchSet) noteEvent(ch *changes, ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if wd, ok := ws.dirs[name]; ok {
		// the directory itself went or moved: listing it says so
		if wd.root >= 0 {
			ch.list[wd.root] = true
		}
		for _, i := range wd.files {
			ch.read[ws.roots[i].path] = true
		}
		return true
	}
	dir := filepath.Dir(name)
	wd, ok := ws.dirs[dir]
	if !ok {
		return false
	}
	for _, i := range wd.files {
		if filepath.Clean(ws.roots[i].path) == name {
			ch.read[ws.roots[i].path] = true
			return true
		}
	}
	base := filepath.Base(name)
	if wd.root >= 0 && manifest.IsManifest(base) {
		// Reading the named file is enough whatever happened to it: one that
		// appeared is tracked, one that went is untracked. The directory is
		// not listed again (that would cost every file in it, per event); a
		// lost event (overflow) re-reads everything.
		ch.read[filepath.Join(ws.roots[wd.root].path, base)] = true
		return true
	}
	// A link or a directory appearing here (a Kubernetes volume swaps its
	// ..data link so) can change what every file here resolves to.
	if ev.Has(fsnotify.Create) {
		if info, err := os.Lstat(name); err == nil && (info.Mode()&fs.ModeSymlink != 0 || info.IsDir()) {
			ch.check[dir] = true
			return true
		}
	}
	return false
}
