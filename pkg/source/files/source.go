package files

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

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
	// keeps serving. Objects moved to another file are not taken out. 0
	// means DefaultSettle; negative applies such changes at once.
	Settle  time.Duration
	Log     *slog.Logger
	Metrics *metrics.Metrics

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
}

func (f *file) settled() bool { return f.err == nil && f.disk == f.applied }

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

// outcome is what one sync did.
type outcome struct {
	snap    *topology.Snapshot // nil: nothing was pending
	files   int                // files whose content is not what was applied
	decoded int                // documents decoded
	batch   int                // objects in the batch
	// held lists the files that take most of their objects away and have
	// not been seen so for Settle yet: nothing was applied. wait is how
	// long until the last of them has.
	held []shrink
	wait time.Duration
}

// shrink is a file that takes most of its objects out of the topology.
type shrink struct {
	file     string
	lost, of int // objects taken out, of those it defined
}

func (k shrink) String() string {
	return fmt.Sprintf("%s would take %d of its %d objects away", k.file, k.lost, k.of)
}

// Load reads and decodes every manifest and applies them as one batch,
// deleting objects that are no longer in any file. On any error nothing is
// applied.
func (s *Source) Load() (*topology.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setRoots(); err != nil {
		s.count("rejected")
		return nil, err
	}
	out, err := s.sync(newChanges(), true)
	if err != nil {
		return nil, err
	}
	if out.snap == nil {
		return s.Dir.Current(), nil
	}
	return out.snap, nil
}

// setRoots reads what each path is. A file reached twice would define each
// of its objects twice, so overlapping paths are refused.
func (s *Source) setRoots() error {
	if len(s.Paths) == 0 {
		return errors.New("no manifest paths given")
	}
	roots := make([]root, len(s.Paths))
	dirs := map[string]string{}
	named := map[string]string{}
	for i, p := range s.Paths {
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("manifest path: %w", err)
		}
		roots[i] = root{path: p, dir: info.IsDir()}
		clean := filepath.Clean(p)
		if info.IsDir() {
			roots[i].files = map[string]*file{}
			if other, ok := dirs[clean]; ok {
				return fmt.Errorf("manifest paths %s and %s are the same directory", other, p)
			}
			dirs[clean] = p
			continue
		}
		if other, ok := named[clean]; ok {
			return fmt.Errorf("manifest paths %s and %s are the same file", other, p)
		}
		named[clean] = p
	}
	for clean, p := range named {
		if d, ok := dirs[filepath.Dir(clean)]; ok && manifest.IsManifest(clean) {
			return fmt.Errorf("manifest path %s is also read from directory %s", p, d)
		}
	}
	if s.files == nil {
		s.files, s.pending, s.rootErrs = map[string]*file{}, map[string]*file{}, map[int]error{}
		s.owners = map[topology.ObjectRef]string{}
	}
	s.roots = roots
	clear(s.rootErrs)
	// Files keep their state under the new paths; one under none is gone.
	for _, f := range s.files {
		if f.root = s.rootFor(f.name); f.root < 0 {
			s.gone(f)
		} else if r := s.roots[f.root]; r.dir {
			r.files[f.name] = f
		}
	}
	return nil
}

// rootFor returns the index of the path a file name is read under, or -1.
func (s *Source) rootFor(name string) int {
	for i, r := range s.roots {
		if r.dir && filepath.Dir(name) == filepath.Clean(r.path) && filepath.Join(r.path, filepath.Base(name)) == name {
			return i
		}
		if !r.dir && r.path == name {
			return i
		}
	}
	return -1
}

func (s *Source) rootOf(f *file) root {
	if f.root < 0 || f.root >= len(s.roots) {
		return root{}
	}
	return s.roots[f.root]
}

// sync brings the Directory in line with the files. It reads what ch names
// (full: every file, decoded afresh), then applies the files whose content
// is not what the Directory holds. out.snap is nil when there was nothing to
// apply.
func (s *Source) sync(ch *changes, full bool) (outcome, error) {
	var out outcome
	decodedBefore := s.documents
	// Anything broken is tried again: a full reload would try it too.
	for i := range s.rootErrs {
		if s.roots[i].dir {
			ch.list[i] = true
		} else {
			ch.read[s.roots[i].path] = true
		}
	}
	for name, f := range s.pending {
		if f.err != nil || ch.pending {
			ch.read[name] = true
		}
	}
	for i, r := range s.roots {
		switch {
		case r.dir && (full || ch.all || ch.list[i]):
			s.list(i, ch)
		case !r.dir && full:
			ch.read[r.path] = true
		case !r.dir && ch.all:
			s.track(r.path) // and looked at below, with every file
		}
	}
	if full {
		for name := range s.files {
			ch.read[name] = true
		}
	}
	var named []*file
	for name := range ch.read {
		if f := s.track(name); f != nil {
			named = append(named, f)
		}
	}
	s.readAll(named, true, full)
	if ch.all || len(ch.check) > 0 {
		var checked []*file
		for name, f := range s.files {
			if !ch.read[name] && (ch.all || ch.check[filepath.Dir(filepath.Clean(name))]) {
				checked = append(checked, f)
			}
		}
		s.readAll(checked, false, false)
	}
	out.decoded = s.documents - decodedBefore
	if len(s.pending) == 0 && len(s.rootErrs) == 0 {
		s.refused = false // what was refused is undone
		return out, nil
	}
	out.files = len(s.pending)

	pending := make([]*file, 0, len(s.pending))
	for _, f := range s.pending {
		pending = append(pending, f)
	}
	// as compare orders them, without looking each file up again
	slices.SortFunc(pending, func(a, b *file) int { return cmp.Or(cmp.Compare(a.root, b.root), cmp.Compare(a.name, b.name)) })

	var (
		delta *fileDelta
		b     topology.Batch
	)
	for fresh := false; ; fresh = true {
		if err := s.problems(pending); err != nil {
			s.refuse()
			return out, err
		}
		delta = s.delta(pending, full)
		if errs := s.duplicates(delta); len(errs) > 0 {
			s.refuse()
			return out, errs
		}
		var stale []*file
		b, stale = delta.batch(s, full)
		if len(stale) == 0 || fresh {
			break
		}
		// A document taken from content already applied (and released) is
		// never new to its file, so it is never put; should one be, its
		// file decoded afresh puts it right.
		s.readAll(stale, true, true)
	}
	out.batch = b.Len()
	if !full {
		if out.held, out.wait = s.hold(pending, delta, time.Now()); len(out.held) > 0 {
			s.refused = true // so a return to the applied files is logged
			return out, nil
		}
	}

	snap := s.Dir.Current()
	if b.Len() > 0 {
		var err error
		if snap, err = s.Dir.Apply(b); err != nil {
			s.refuse()
			return out, manifest.Locate(err, func(ref topology.ObjectRef) (manifest.Object, bool) {
				if d := delta.definition(s, ref); d != nil {
					return d.Object, true
				}
				return manifest.Object{}, false
			})
		}
	}

	// The Directory holds the pending files now; their decoded objects are
	// of no more use.
	for ref := range delta.dropped {
		delete(s.owners, ref)
	}
	if len(s.owners) == 0 && len(delta.added) > 64 {
		s.owners = make(map[topology.ObjectRef]string, len(delta.added))
	}
	for ref, defs := range delta.added {
		s.owners[ref] = defs[0].File
	}
	for _, f := range pending {
		if f.disk != nil {
			f.disk.Release()
		}
		f.applied = f.disk
		f.shrunk, f.shrunkTo = time.Time{}, nil
		delete(s.pending, f.name)
		if f.disk == nil {
			s.untrack(f)
		}
	}
	s.refused = false
	s.warnSpatial(snap)
	s.count("applied")
	if s.Metrics != nil {
		s.Metrics.Revision.Set(float64(snap.Revision))
	}
	out.snap = snap
	return out, nil
}

// hold applies the settle rule: it returns the pending files that take at
// least half of the objects they define out of the topology, and at least
// one, and have not shown that content for Settle yet, with how long until
// the last of them has. Any of them holds back the whole change, so the
// files are applied as one state or not at all.
func (s *Source) hold(pending []*file, c *fileDelta, now time.Time) (held []shrink, wait time.Duration) {
	settle := s.settleTime()
	if settle <= 0 {
		return nil, 0
	}
	var lost map[string]int
	for ref, d := range c.dropped {
		if c.added[ref] == nil { // not moved to, or edited in, a file
			if lost == nil {
				lost = map[string]int{}
			}
			lost[d.File]++
		}
	}
	for _, f := range pending {
		var before int
		if f.applied != nil {
			before = len(f.applied.Documents)
		}
		n := lost[f.name]
		if n == 0 || 2*n < before {
			f.shrunk, f.shrunkTo = time.Time{}, nil
			continue
		}
		if f.shrunk.IsZero() || f.shrunkTo != f.disk {
			f.shrunk, f.shrunkTo = now, f.disk // this content's clock starts now
		}
		if left := settle - now.Sub(f.shrunk); left > 0 {
			held = append(held, shrink{file: f.name, lost: n, of: before})
			wait = max(wait, left)
		}
	}
	return held, wait
}

func (s *Source) settleTime() time.Duration {
	if s.Settle == 0 {
		return DefaultSettle
	}
	return s.Settle
}

func (s *Source) refuse() {
	s.refused = true
	s.count("rejected")
}

// problems returns, as a full reload would, the first path that is broken,
// else the first file that cannot be read.
func (s *Source) problems(pending []*file) error {
	for i := range s.roots {
		if err := s.rootErrs[i]; err != nil {
			return err
		}
	}
	for _, f := range pending {
		if f.err != nil {
			return f.err
		}
	}
	return nil
}

// fileDelta is what the pending files define anew and no longer define, by
// object: only the documents whose text changed, so a burst costs what it
// touched, not the size of its files.
type fileDelta struct {
	// added: the definitions new in a pending file, in load order;
	// dropped: the definitions gone from one (an object is defined once
	// in the files the Directory holds, so dropped from one file at most).
	added   map[topology.ObjectRef][]*manifest.Document
	dropped map[topology.ObjectRef]*manifest.Document
	errs    manifest.Errors // the pending files' own problems
}

// delta compares each pending file's content with what the Directory holds
// from it, document by document (full: every document is new).
func (s *Source) delta(pending []*file, full bool) *fileDelta {
	// sized for a start, where every document is new, so the maps do not
	// grow by steps through hundreds of thousands of objects
	var docs int
	if full {
		for _, f := range pending {
			if f.disk != nil {
				docs += len(f.disk.Documents)
			}
		}
	}
	c := &fileDelta{added: make(map[topology.ObjectRef][]*manifest.Document, docs), dropped: map[topology.ObjectRef]*manifest.Document{}}
	for _, f := range pending {
		if f.disk != nil {
			c.errs = append(c.errs, f.disk.Errors...)
		}
		added, dropped := diff(f.applied, f.disk, full)
		for _, d := range added {
			c.added[d.Ref()] = append(c.added[d.Ref()], d)
		}
		for _, d := range dropped {
			c.dropped[d.Ref()] = d
		}
	}
	return c
}

// diff returns the documents of now that are not in old, and those of old
// that are not in now, by text: documents of equal text define the same
// object the same way. A nil File has no documents.
func diff(old, now *manifest.File, full bool) (added, dropped []*manifest.Document) {
	var olds, nows []manifest.Document
	if old != nil {
		olds = old.Documents
	}
	if now != nil {
		nows = now.Documents
	}
	if full || len(olds) == 0 {
		return pointers(nows), pointers(olds)
	}
	unmatched := make(map[[sha256.Size]byte]int, len(olds))
	for i := range olds {
		unmatched[olds[i].Sum]++
	}
	for i := range nows {
		if unmatched[nows[i].Sum] > 0 {
			unmatched[nows[i].Sum]--
			continue
		}
		added = append(added, &nows[i])
	}
	for i := range olds {
		if unmatched[olds[i].Sum] > 0 {
			unmatched[olds[i].Sum]--
			dropped = append(dropped, &olds[i])
		}
	}
	return added, dropped
}

func pointers(docs []manifest.Document) []*manifest.Document {
	out := make([]*manifest.Document, len(docs))
	for i := range docs {
		out[i] = &docs[i]
	}
	return out
}

// batch returns what the Directory is to be given: the objects defined
// anew, but for those moved unchanged from another file (full: all of
// them), and the deletion of those no longer defined. stale lists the files
// of documents that could not be put.
func (c *fileDelta) batch(s *Source, full bool) (b topology.Batch, stale []*file) {
	for ref, defs := range c.added {
		if old := c.dropped[ref]; old != nil && old.Sum == defs[0].Sum && !full {
			continue
		}
		if !defs[0].Put(&b) {
			stale = append(stale, s.files[defs[0].File])
		}
	}
	for ref := range c.dropped {
		if c.added[ref] == nil {
			remove(&b, ref)
		}
	}
	return b, stale
}

// definition returns where an object is defined once the pending files are
// applied, or nil.
func (c *fileDelta) definition(s *Source, ref topology.ObjectRef) *manifest.Document {
	if defs := c.added[ref]; len(defs) > 0 {
		return defs[0]
	}
	if c.dropped[ref] != nil {
		return nil
	}
	return s.find(ref, nil)
}

// duplicates checks, as a full reload does, that each object is defined
// once across every file: the first definition in load order stands, and
// each later one is an error naming it. Only objects defined anew need
// looking at: the rest were defined once when applied.
func (s *Source) duplicates(c *fileDelta) manifest.Errors {
	errs := c.errs
	for ref, defs := range c.added {
		// still defined where the Directory has it from?
		if c.dropped[ref] == nil {
			if held := s.find(ref, defs); held != nil {
				defs = append(slices.Clone(defs), held)
			}
		}
		if len(defs) < 2 {
			continue
		}
		defs = slices.Clone(defs)
		slices.SortFunc(defs, func(a, b *manifest.Document) int { return s.order(a.Object, b.Object) })
		for _, again := range defs[1:] {
			errs = append(errs, manifest.Duplicate(again.Object, defs[0].Object))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *manifest.Error) int {
		if c := s.compare(a.File, b.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Document, b.Document)
	})
	return errs
}

// find returns the definition of an object the Directory holds, in its
// file's content now (a pending file's as read, but for documents in
// except), or nil.
func (s *Source) find(ref topology.ObjectRef, except []*manifest.Document) *manifest.Document {
	name, ok := s.owners[ref]
	if !ok {
		return nil
	}
	f := s.files[name]
	if f == nil {
		return nil
	}
	content := f.applied
	if s.pending[name] != nil {
		content = f.disk
	}
	if content == nil {
		return nil
	}
	for i := range content.Documents {
		if d := &content.Documents[i]; d.Kind == ref.Kind && d.Key == ref.Key && !slices.Contains(except, d) {
			return d
		}
	}
	return nil
}

// compare orders files as Load reads them: by path, then by name.
func (s *Source) compare(a, b string) int {
	if a == b {
		return 0
	}
	ra, rb := -1, -1
	if f := s.files[a]; f != nil {
		ra = f.root
	}
	if f := s.files[b]; f != nil {
		rb = f.root
	}
	if c := cmp.Compare(ra, rb); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// order orders definitions as Load reads them.
func (s *Source) order(a, b manifest.Object) int {
	if c := s.compare(a.File, b.File); c != 0 {
		return c
	}
	return cmp.Compare(a.Document, b.Document)
}

// track returns the file of a name, tracking it if it is under a path.
func (s *Source) track(name string) *file {
	if f := s.files[name]; f != nil {
		return f
	}
	i := s.rootFor(name)
	if i < 0 {
		return nil
	}
	f := &file{name: name, root: i}
	s.files[name] = f
	if r := s.roots[i]; r.dir {
		r.files[name] = f
	}
	return f
}

func (s *Source) untrack(f *file) {
	delete(s.files, f.name)
	delete(s.pending, f.name)
	if r := s.rootOf(f); r.files != nil {
		delete(r.files, f.name)
	}
}

// list lists a directory path again: a file that appeared is to be read, a
// file that went is gone.
func (s *Source) list(i int, ch *changes) {
	r := s.roots[i]
	info, err := os.Stat(r.path)
	switch {
	case err != nil:
		s.rootErrs[i] = fmt.Errorf("manifest path: %w", err)
		return
	case !info.IsDir():
		s.rootErrs[i] = fmt.Errorf("manifest path %s: no longer a directory", r.path)
		return
	}
	entries, err := os.ReadDir(r.path)
	if err != nil {
		s.rootErrs[i] = fmt.Errorf("manifest directory %s: %w", r.path, err)
		return
	}
	delete(s.rootErrs, i)
	if len(r.files) == 0 && len(entries) > 64 { // a first listing: sized once, not grown by steps
		r.files = make(map[string]*file, len(entries))
		s.roots[i].files = r.files
	}
	if len(s.files) == 0 && len(entries) > 64 {
		s.files = make(map[string]*file, len(entries))
	}
	present := make(map[string]bool, len(entries))
	for _, d := range entries {
		if !d.IsDir() && manifest.IsManifest(d.Name()) {
			name := filepath.Join(r.path, d.Name())
			present[name] = true
			if r.files[name] == nil {
				ch.read[name] = true
			}
		}
	}
	for name, f := range r.files {
		if present[name] {
			continue
		}
		// A listing taken while files are renamed into the directory can
		// miss one (tmpfs does): a file is gone only if its name is.
		if _, err := os.Lstat(name); err == nil {
			ch.read[name] = true
			continue
		}
		s.gone(f)
	}
}

// gone records that a file is no longer there.
func (s *Source) gone(f *file) {
	f.info, f.disk, f.err = nil, nil, nil
	s.settle(f)
}

// settle keeps the pending set: files whose disk content is not applied.
func (s *Source) settle(f *file) {
	switch {
	case !f.settled():
		s.pending[f.name] = f
		return
	case f.disk == nil:
		s.untrack(f)
	default:
		delete(s.pending, f.name)
	}
	f.shrunk, f.shrunkTo = time.Time{}, nil // back to what is applied
}

// readAll reads files again if force, or else those whose size, time or
// identity changed, and decodes those whose content did (fresh: decodes
// every document again). Reading and decoding, the costly parts, run on
// every core when there are many files (a start, or a burst touching many):
// each worker reads, hashes and decodes one file at a time and drops its
// content once decoded, so no more than one file's bytes per core are held.
// What was read is then noted in the files' order, on this goroutine.
func (s *Source) readAll(files []*file, force, fresh bool) {
	reads := make([]fileRead, len(files))
	workers := min(runtime.GOMAXPROCS(0), len(files)/parallelRead+1)
	stripe := func(w int) {
		var (
			buf []byte // each file's bytes in turn: nothing decoded keeps them
			dec manifest.Decoder
		)
		for i := w; i < len(files); i += workers {
			reads[i] = s.readOne(files[i], force, fresh, &buf, &dec)
		}
	}
	if workers == 1 { // the usual burst: a file or a few, read here
		stripe(0)
	} else {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { stripe(w) })
		}
		wg.Wait()
	}
	for i, f := range files {
		s.note(f, &reads[i])
	}
}

// parallelRead is how many files make a read use every core.
const parallelRead = 16

// fileRead is what reading one file found.
type fileRead struct {
	skipped bool // not read: under no path any more, or unchanged on disk
	absent  bool // not there (or a directory)
	err     error
	info    os.FileInfo
	sum     [sha256.Size]byte
	// out is the content decoded, when it differs from what the file
	// holds (disk) and from what the Directory holds from it (applied).
	out *manifest.File
}

// readOne reads one file into *buf and decodes it with dec if its content
// changed. It changes nothing, so files are read in parallel; note records
// what it found.
func (s *Source) readOne(f *file, force, fresh bool, buf *[]byte, dec *manifest.Decoder) fileRead {
	if f.root < 0 { // under none of the paths any more
		return fileRead{skipped: true}
	}
	if !force && f.info != nil {
		if info, err := os.Stat(f.name); err == nil && sameFile(info, f.info) {
			return fileRead{skipped: true}
		}
	}
	data, info, absent, err := readFile(f.name, *buf)
	*buf = data[:0]
	if errors.Is(err, errChanged) {
		// the write's event is on its way: the file is read again with it
		return fileRead{skipped: true}
	}
	if absent || err != nil {
		return fileRead{absent: absent, err: err}
	}
	r := fileRead{info: info, sum: sha256.Sum256(data)}
	var prev *manifest.File
	switch {
	case fresh:
	case f.disk != nil && f.disk.Sum == r.sum, f.applied != nil && f.applied.Sum == r.sum:
		return r
	case f.disk != nil:
		prev = f.disk
	default:
		prev = f.applied
	}
	r.out = dec.DecodeFile(f.name, data, prev)
	return r
}

// note records what reading a file found, and keeps the pending set.
func (s *Source) note(f *file, r *fileRead) {
	switch {
	case f.root < 0:
		f.info, f.disk, f.err = nil, nil, nil
		s.settle(f)
		return
	case r.skipped:
		s.settle(f)
		return
	}
	explicit := !s.rootOf(f).dir
	if r.absent {
		if explicit {
			s.rootErrs[f.root] = fmt.Errorf("manifest path: %w", r.err)
		}
		f.info, f.disk, f.err = nil, nil, nil
		s.settle(f)
		return
	}
	if explicit {
		delete(s.rootErrs, f.root)
	}
	if r.err != nil {
		f.err = r.err
		s.settle(f)
		return
	}
	s.reads++
	f.info, f.err = r.info, nil
	switch {
	case r.out != nil:
		s.decodes++
		s.documents += r.out.Decoded
		f.disk = r.out
		if s.Log != nil {
			for i, w := range r.out.Warnings {
				if i == maxWarningsPerFile {
					s.Log.Warn("manifest warnings not shown", "file", f.name, "more", len(r.out.Warnings)-i)
					break
				}
				s.Log.Warn("manifest content will be ignored", "warning", w)
			}
			if r.out.Others.Total() > 0 {
				// kubectl applies them from the same files; they are not ours
				s.Log.Info("manifest objects of other kinds skipped", "file", f.name, "skipped", r.out.Others.String())
			}
		}
	case f.disk != nil && f.disk.Sum == r.sum:
	case f.applied != nil && f.applied.Sum == r.sum:
		f.disk = f.applied
	}
	s.settle(f)
}

// sameFile reports whether a file looks unchanged: the same file (a link
// swapped to another target is not), size and modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// readFile reads a manifest file: a regular file (a link to one is
// followed) of at most maxFileSize bytes, into buf when it is large enough.
// absent reports a file that is not there, or is a directory, which a
// directory listing passes over too.
func readFile(name string, buf []byte) (data []byte, info os.FileInfo, absent bool, err error) {
	if info, err = os.Stat(name); err != nil {
		if _, lerr := os.Lstat(name); errors.Is(err, fs.ErrNotExist) && lerr != nil {
			return nil, nil, true, err
		}
		return nil, nil, false, fmt.Errorf("read manifest: %w", err)
	}
	if info.IsDir() {
		if l, err := os.Lstat(name); err == nil && l.IsDir() {
			return nil, nil, true, fmt.Errorf("%s is a directory, not a file", name)
		}
	}
	if err := checkFile(name, info); err != nil {
		return nil, nil, false, err
	}
	// Without blocking: a path that became a FIFO since the Stat above would
	// otherwise hold the source until a writer opened it; the Stat below
	// refuses it.
	fh, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, false, fmt.Errorf("read manifest: %w", err)
	}
	defer fh.Close()
	if info, err = fh.Stat(); err != nil {
		return nil, nil, false, fmt.Errorf("read manifest: %w", err)
	}
	if err := checkFile(name, info); err != nil {
		return nil, nil, false, err
	}
	// sized for the file as it is, and one more byte to see it grew past the bound
	if want := int(info.Size()) + bytes.MinRead; cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	b := bytes.NewBuffer(buf[:0])
	if _, err := b.ReadFrom(io.LimitReader(fh, maxFileSize+1)); err != nil {
		return nil, nil, false, fmt.Errorf("read manifest: %w", err)
	}
	if b.Len() > maxFileSize {
		return nil, nil, false, tooLarge(name)
	}
	// One read of the whole file, and the same file before and after it:
	// content written while it was read may be half old, half new, and is
	// read again with the event of that write.
	if after, err := fh.Stat(); err != nil || !sameFile(after, info) || int64(b.Len()) != info.Size() {
		return b.Bytes(), info, false, errChanged
	}
	return b.Bytes(), info, false, nil
}

// errChanged: a file changed while it was read.
var errChanged = errors.New("changed while read")

func checkFile(name string, info os.FileInfo) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("read manifest %s: not a regular file (%s)", name, info.Mode().Type())
	}
	if info.Size() > maxFileSize {
		return tooLarge(name)
	}
	return nil
}

func tooLarge(name string) error {
	return fmt.Errorf("read manifest %s: larger than %d MiB, the most a manifest file may hold", name, maxFileSize>>20)
}

// remove adds the deletion of one object to a batch.
func remove(b *topology.Batch, ref topology.ObjectRef) {
	switch ref.Kind {
	case topology.KindUpstream:
		b.DeleteUpstream(ref.Key)
	case topology.KindLocality:
		b.DeleteLocality(ref.Key)
	case topology.KindEndpointSet:
		b.DeleteEndpointSet(ref.Key)
	case topology.KindSpatialDomain:
		b.DeleteSpatialDomain(ref.Key)
	case topology.KindPartition:
		b.DeletePartition(ref.Key)
	}
}

// where says where an object the Directory holds from us is defined.
func (s *Source) where(ref topology.ObjectRef) string {
	if d := s.find(ref, nil); d != nil {
		return fmt.Sprintf("%s document %d", d.File, d.Document)
	}
	return ""
}

// warnSpatial logs each spatial problem once, with where its object is defined:
// manifest files have no status to carry it, and it never rejects a change.
func (s *Source) warnSpatial(snap *topology.Snapshot) {
	now := map[string]bool{}
	for _, p := range snap.SpatialProblems() {
		key := p.String()
		now[key] = true
		if !s.warned[key] && s.Log != nil {
			s.Log.Warn("spatial routing problem; the rest keeps serving", "object", p.Object.String(), "at", s.where(p.Object),
				"field", p.Field, "reason", p.Reason, "problem", p.Message)
		}
	}
	s.warned = now
}

func (s *Source) count(result string) {
	if s.Metrics != nil {
		s.Metrics.SourceBatches.WithLabelValues(sourceName, result).Inc()
	}
}

// delays returns the quiet interval and the cap of a burst.
func (s *Source) delays() (quiet, most time.Duration) {
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
	watch := s.watchSet()
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
	holdFor(s.apply(ch, log))

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
		s.collect(watchCtx, w, watch, log, &mu, &burst, ready)
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
			holdFor(s.apply(ch, log))
		case <-recheck.C:
			ch := newChanges()
			ch.pending = true
			holdFor(s.apply(ch, log))
		}
	}
}

// collect notes every event into *burst and signals ready once the burst has
// been quiet for Debounce, or MaxDelay after its first event.
func (s *Source) collect(ctx context.Context, w *fsnotify.Watcher, watch *watchSet, log *slog.Logger,
	mu *sync.Mutex, burst **changes, ready chan<- struct{}) {
	quiet, most := s.delays()
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
			noted := watch.note(*burst, ev)
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

// apply syncs what one burst changed, and logs the outcome. It returns how
// long until a change held back by the settle rule is to be looked at
// again, or 0.
func (s *Source) apply(ch *changes, log *slog.Logger) time.Duration {
	start := time.Now()
	s.mu.Lock()
	wasRefused := s.refused
	out, err := s.sync(ch, false)
	revision := s.Dir.Current().Revision
	s.mu.Unlock()
	s.setRefusal(err, out, revision)
	switch {
	case err != nil:
		if more, ok := s.refusalLog.take(start); ok {
			log.Error("manifest change refused; the last good topology keeps serving", "reason", cut(err.Error()), "refusedMeanwhile", more)
		}
	case len(out.held) > 0:
		if more, ok := s.refusalLog.take(start); ok {
			log.Warn("manifest change held back: a file would take most of its objects away; the last topology keeps serving until the files have stayed so for the settle time",
				"files", cut(heldText(out.held)), "settle", s.settleTime(), "looked at again in", out.wait.Round(time.Millisecond), "revision", revision, "refusedMeanwhile", more)
		}
	case out.snap != nil:
		log.Info("manifest change applied", "revision", out.snap.Revision, "files", out.files, "decoded", out.decoded,
			"objects", out.batch, "took", time.Since(start))
	case wasRefused:
		log.Info("manifest files are back to the applied topology", "revision", revision)
	}
	return out.wait
}

func heldText(held []shrink) string {
	parts := make([]string, len(held))
	for i, k := range held {
		parts[i] = k.String()
	}
	return strings.Join(parts, "; ")
}

// maxWarningsPerFile bounds the warnings logged for one version of a file.
const maxWarningsPerFile = 10

// maxRefusalText bounds the reason Refusal gives and a refusal's log line.
const maxRefusalText = 1024

// cut bounds a reason to maxRefusalText bytes.
func cut(text string) string {
	if len(text) > maxRefusalText {
		return strings.ToValidUTF8(text[:maxRefusalText], "") + "…"
	}
	return text
}

// Refused and held-back changes are logged in a bounded way: a burst of
// refusalBurst lines, then one line per refusalEvery at most, which counts
// the refusals it stands for. A writer that breaks the files again and
// again fills /readyz's one line, not the log.
const (
	refusalBurst = 10
	refusalEvery = 10 * time.Second
)

// refusalLog is the token bucket of refusal log lines.
type refusalLog struct {
	tokens     int
	refilled   time.Time
	suppressed int
}

// take says whether a refusal at now may be logged, and how many were not
// since the last line that was.
func (l *refusalLog) take(now time.Time) (suppressed int, ok bool) {
	if l.refilled.IsZero() {
		l.tokens, l.refilled = refusalBurst, now
	}
	if n := int(now.Sub(l.refilled) / refusalEvery); n > 0 {
		l.tokens = min(refusalBurst, l.tokens+n)
		l.refilled = l.refilled.Add(time.Duration(n) * refusalEvery)
	}
	if l.tokens == 0 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}

// setRefusal says, for /readyz and poise_source_refusing, whether the
// latest change is refused or held back.
func (s *Source) setRefusal(err error, out outcome, revision uint64) {
	var text string
	switch {
	case err != nil:
		text = fmt.Sprintf("the latest manifest change is refused; revision %d keeps serving: %s", revision, err.Error())
	case len(out.held) > 0:
		text = fmt.Sprintf("the latest manifest change is held back until the files have stayed so for %v (--settle); revision %d keeps serving: %s",
			s.settleTime(), revision, heldText(out.held))
	}
	refusing := 0.0
	if text == "" {
		s.refusal.Store(nil)
	} else {
		text = cut(text)
		s.refusal.Store(&text)
		refusing = 1
	}
	if s.Metrics != nil {
		s.Metrics.SourceRefusing.WithLabelValues(sourceName).Set(refusing)
	}
}

// Refusal says why the latest change to the files is refused (a file that
// cannot be read, an invalid document) or held back (the settle rule), or
// "" when the files on disk are what is served.
func (s *Source) Refusal() string {
	if p := s.refusal.Load(); p != nil {
		return *p
	}
	return ""
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

// watchSet watches each directory path, and each file path's directory (so
// an editor that replaces the file by renaming keeps being seen).
func (s *Source) watchSet() *watchSet {
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

// note records what an event may have changed, and reports whether it
// concerns the manifests at all.
func (ws *watchSet) note(ch *changes, ev fsnotify.Event) bool {
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
