package files

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"syscall"

	"poise.dev/poise/pkg/manifest"
)

// readFiles reads files again if force, or else those whose size, time or
// identity changed, and decodes those whose content did (fresh: decodes
// every document again). Reading and decoding, the costly parts, run on
// every core when there are many files (a start, or a burst touching many):
// each worker reads, hashes and decodes one file at a time and drops its
// content once decoded, so no more than one file's bytes per core are held.
// What was read is then noted in the files' order, on this goroutine.
func (s *Source) readFiles(files []*file, force, fresh bool) {
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
		s.recordRead(f, &reads[i])
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
// changed. It changes nothing, so files are read in parallel; recordRead
// records what it found.
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

// recordRead records what reading a file found, and keeps the pending set.
func (s *Source) recordRead(f *file, r *fileRead) {
	switch {
	case f.root < 0:
		f.info, f.disk, f.err = nil, nil, nil
		s.updatePending(f)
		return
	case r.skipped:
		s.updatePending(f)
		return
	}
	explicit := !s.rootOf(f).dir
	if r.absent {
		if explicit {
			s.rootErrs[f.root] = fmt.Errorf("manifest path: %w", r.err)
		}
		f.info, f.disk, f.err = nil, nil, nil
		s.updatePending(f)
		return
	}
	if explicit {
		delete(s.rootErrs, f.root)
	}
	if r.err != nil {
		f.err = r.err
		s.updatePending(f)
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
			s.logSkipped(f, r.out.Others)
		}
	case f.disk != nil && f.disk.Sum == r.sum:
	case f.applied != nil && f.applied.Sum == r.sum:
		f.disk = f.applied
	}
	s.updatePending(f)
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

// maxWarningsPerFile bounds the warnings logged for one version of a file.
const maxWarningsPerFile = 10
