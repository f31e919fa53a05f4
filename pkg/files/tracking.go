package files

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

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
		if f.root = s.rootIndex(f.name); f.root < 0 {
			s.markGone(f)
		} else if r := s.roots[f.root]; r.dir {
			r.files[f.name] = f
		}
	}
	return nil
}

// rootIndex returns the index of the path a file name is read under, or -1.
func (s *Source) rootIndex(name string) int {
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

// trackedFile returns the file of a name, tracking it if it is under a path.
func (s *Source) trackedFile(name string) *file {
	if f := s.files[name]; f != nil {
		return f
	}
	i := s.rootIndex(name)
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

// relistDir lists a directory path again: a file that appeared is to be
// read, a file that went is gone.
func (s *Source) relistDir(i int, ch *changes) {
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
		s.markGone(f)
	}
}

// markGone records that a file is no longer there.
func (s *Source) markGone(f *file) {
	f.info, f.disk, f.err = nil, nil, nil
	s.updatePending(f)
}

// updatePending keeps the pending set: files whose disk content is not
// applied.
func (s *Source) updatePending(f *file) {
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
