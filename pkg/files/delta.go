package files

import (
	"cmp"
	"crypto/sha256"
	"slices"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

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

// pendingDelta compares each pending file's content with what the Directory
// holds from it, document by document (full: every document is new).
func (s *Source) pendingDelta(pending []*file, full bool) *fileDelta {
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
		added, dropped := diffDocuments(f.applied, f.disk, full)
		for _, d := range added {
			c.added[d.Ref()] = append(c.added[d.Ref()], d)
		}
		for _, d := range dropped {
			c.dropped[d.Ref()] = d
		}
	}
	return c
}

// diffDocuments returns the documents of now that are not in old, and those
// of old that are not in now, by text: documents of equal text define the
// same object the same way. A nil File has no documents.
func diffDocuments(old, now *manifest.File, full bool) (added, dropped []*manifest.Document) {
	var olds, nows []manifest.Document
	if old != nil {
		olds = old.Documents
	}
	if now != nil {
		nows = now.Documents
	}
	if full || len(olds) == 0 {
		return documentPointers(nows), documentPointers(olds)
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

func documentPointers(docs []manifest.Document) []*manifest.Document {
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
			deleteFromBatch(&b, ref)
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
	return s.heldDefinition(ref, nil)
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
			if held := s.heldDefinition(ref, defs); held != nil {
				defs = append(slices.Clone(defs), held)
			}
		}
		if len(defs) < 2 {
			continue
		}
		defs = slices.Clone(defs)
		slices.SortFunc(defs, func(a, b *manifest.Document) int { return s.compareDefinitions(a.Object, b.Object) })
		for _, again := range defs[1:] {
			errs = append(errs, manifest.Duplicate(again.Object, defs[0].Object))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *manifest.Error) int {
		if c := s.compareFiles(a.File, b.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Document, b.Document)
	})
	return errs
}

// heldDefinition returns the definition of an object the Directory holds, in
// its file's content now (a pending file's as read, but for documents in
// except), or nil.
func (s *Source) heldDefinition(ref topology.ObjectRef, except []*manifest.Document) *manifest.Document {
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

// compareFiles orders files as Load reads them: by path, then by name.
func (s *Source) compareFiles(a, b string) int {
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

// compareDefinitions orders definitions as Load reads them.
func (s *Source) compareDefinitions(a, b manifest.Object) int {
	if c := s.compareFiles(a.File, b.File); c != 0 {
		return c
	}
	return cmp.Compare(a.Document, b.Document)
}

// deleteFromBatch adds the deletion of one object to a batch.
func deleteFromBatch(b *topology.Batch, ref topology.ObjectRef) {
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
