package files

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

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

// sync brings the Directory in line with the files. It reads what ch names
// (full: every file, decoded afresh), then applies the files whose content
// is not what the Directory holds. out.snap is nil when there was nothing to
// apply.
func (s *Source) sync(ch *changes, full bool) (outcome, error) {
	var out outcome
	decodedBefore := s.documents
	s.readChanged(ch, full)
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
	// as compareFiles orders them, without looking each file up again
	slices.SortFunc(pending, func(a, b *file) int { return cmp.Or(cmp.Compare(a.root, b.root), cmp.Compare(a.name, b.name)) })

	delta, b, err := s.deltaBatch(pending, full)
	if err != nil {
		s.markRefused()
		return out, err
	}
	out.batch = b.Len()
	if !full {
		if out.held, out.wait = s.heldBack(pending, delta, b, time.Now()); len(out.held) > 0 {
			s.refused = true // so a return to the applied files is logged
			return out, nil
		}
	}

	snap := s.Dir.Current()
	if b.Len() > 0 {
		if snap, err = s.Dir.Apply(b); err != nil {
			s.markRefused()
			return out, manifest.Locate(err, func(ref topology.ObjectRef) (manifest.Object, bool) {
				if d := delta.definition(s, ref); d != nil {
					return d.Object, true
				}
				return manifest.Object{}, false
			})
		}
	}

	s.commit(pending, delta)
	s.refused = false
	s.warnSpatial(snap)
	s.countBatch("applied")
	if s.Metrics != nil {
		s.Metrics.Revision.Set(float64(snap.Revision))
	}
	out.snap = snap
	return out, nil
}

// deltaBatch returns what the pending files change and the batch that
// applies it, or, as a full reload would, the first problem of the files.
func (s *Source) deltaBatch(pending []*file, full bool) (*fileDelta, topology.Batch, error) {
	for fresh := false; ; fresh = true {
		if err := s.firstProblem(pending); err != nil {
			return nil, topology.Batch{}, err
		}
		delta := s.pendingDelta(pending, full)
		if errs := s.duplicates(delta); len(errs) > 0 {
			return nil, topology.Batch{}, errs
		}
		b, stale := delta.batch(s, full)
		if len(stale) == 0 || fresh {
			return delta, b, nil
		}
		// A document taken from content already applied (and released) is
		// never new to its file, so it is never put; should one be, its
		// file decoded afresh puts it right.
		s.readFiles(stale, true, true)
	}
}

// readChanged reads what ch names, and what is broken or pending and due to
// be read again (full: every file, decoded afresh).
func (s *Source) readChanged(ch *changes, full bool) {
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
			s.relistDir(i, ch)
		case !r.dir && full:
			ch.read[r.path] = true
		case !r.dir && ch.all:
			s.trackedFile(r.path) // and looked at below, with every file
		}
	}
	if full {
		for name := range s.files {
			ch.read[name] = true
		}
	}
	var named []*file
	for name := range ch.read {
		if f := s.trackedFile(name); f != nil {
			named = append(named, f)
		}
	}
	s.readFiles(named, true, full)
	if ch.all || len(ch.check) > 0 {
		var checked []*file
		for name, f := range s.files {
			if !ch.read[name] && (ch.all || ch.check[filepath.Dir(filepath.Clean(name))]) {
				checked = append(checked, f)
			}
		}
		s.readFiles(checked, false, false)
	}
}

// commit records that the Directory holds the pending files' content now.
func (s *Source) commit(pending []*file, delta *fileDelta) {
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
}

func (s *Source) markRefused() {
	s.refused = true
	s.countBatch("rejected")
}

// firstProblem returns, as a full reload would, the first path that is
// broken, else the first file that cannot be read.
func (s *Source) firstProblem(pending []*file) error {
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

// definedAt says where an object the Directory holds from us is defined.
func (s *Source) definedAt(ref topology.ObjectRef) string {
	if d := s.heldDefinition(ref, nil); d != nil {
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
			s.Log.Warn("spatial routing problem; the rest keeps serving", "object", p.Object.String(), "at", s.definedAt(p.Object),
				"field", p.Field, "reason", p.Reason, "problem", p.Message)
		}
	}
	s.warned = now
}

func (s *Source) countBatch(result string) {
	if s.Metrics != nil {
		s.Metrics.Batches.WithLabelValues(sourceName, result).Inc()
	}
}
