package manifest

import (
	"crypto/sha256"
	"fmt"

	"poise.dev/poise/pkg/topology"
)

// Ref names the object as the topology does.
func (o Object) Ref() topology.ObjectRef { return topology.ObjectRef{Kind: o.Kind, Key: o.Key} }

// Duplicate is the problem of an object defined again after its first
// definition; Load reports every later definition so.
func Duplicate(again, first Object) *Error {
	return &Error{File: again.File, Document: again.Document, Object: again.String(), Field: "metadata.name",
		Detail: fmt.Sprintf("%s is also defined in %s document %d", again, first.File, first.Document)}
}

// Document is one object decoded from one document of a file.
type Document struct {
	Object
	// Sum is the SHA-256 of the document's text as split from its file:
	// documents with equal sums decode to equal objects.
	Sum   [sha256.Size]byte
	value any  // topology.Upstream, Locality, EndpointSet, SpatialDomain or Partition
	other bool // a document of another kind: Kind is all it says
}

// Put adds the document's object to a batch. It reports false, putting
// nothing, for a document of a released file.
func (d *Document) Put(b *topology.Batch) bool {
	switch v := d.value.(type) {
	case topology.Upstream:
		b.PutUpstream(v)
	case topology.Locality:
		b.PutLocality(v)
	case topology.EndpointSet:
		b.PutEndpointSet(v)
	case topology.SpatialDomain:
		b.PutSpatialDomain(v)
	case topology.Partition:
		b.PutPartition(v)
	default:
		return false
	}
	return true
}

// File is one manifest file decoded document by document, for a caller that
// keeps files apart and decodes again only the one that changed.
type File struct {
	Name string
	// Sum is the SHA-256 of the file's content.
	Sum [sha256.Size]byte
	// Documents are the objects that decoded, in document order. Whether
	// each is defined only once is not checked: that takes every file (see
	// Duplicate).
	Documents []Document
	// Errors are the problems of the other documents, in document order.
	Errors Errors
	// Warnings are what decoded but deserves a look (see IgnoredAfterEnd).
	Warnings []string
	// Others counts the documents of other kinds, which are skipped: they
	// are not among Documents, so they count for nothing that counts a
	// file's objects.
	Others Others
	// Decoded counts the documents decoded; the others were taken from the
	// previous version of the file.
	Decoded int
	// otherKinds is the kind of each skipped document by its sum, so the
	// next version of the file need not decode them again either.
	otherKinds map[[sha256.Size]byte]string
}

// Release drops the decoded objects and keeps what identifies each
// document, for a caller that has put them where they are kept anyway: its
// documents can no longer be put, nor can those DecodeFile takes from it.
func (f *File) Release() {
	for i := range f.Documents {
		f.Documents[i].value = nil
	}
}

// Err returns the file's problems as an error, or nil.
func (f *File) Err() error {
	if len(f.Errors) == 0 {
		return nil
	}
	return f.Errors
}

// DecodeFile decodes one file's content; name is used in messages. A
// document whose text is unchanged from a valid document of prev, an earlier
// version of the file (or nil), is taken from it instead of being decoded
// again: a one-line edit of a large file decodes one document.
func DecodeFile(name string, data []byte, prev *File) *File {
	var d Decoder
	return d.DecodeFile(name, data, prev)
}

// Decoder decodes files one after another, as DecodeFile does, reusing its
// working space from one file to the next. It keeps nothing of a file once
// it has decoded it. It is not safe for concurrent use.
type Decoder struct {
	fast fastParser
}

// DecodeFile is DecodeFile with d's working space.
func (d *Decoder) DecodeFile(name string, data []byte, prev *File) *File {
	defer d.fast.release()
	f := &File{Name: name, Sum: sha256.Sum256(data)}
	var known map[[sha256.Size]byte]*Document
	if prev != nil && len(prev.Documents) > 0 {
		known = make(map[[sha256.Size]byte]*Document, len(prev.Documents))
		for i := range prev.Documents {
			known[prev.Documents[i].Sum] = &prev.Documents[i]
		}
	}
	err := splitDocuments(name, data, func(doc, line int, raw []byte) {
		sum := sha256.Sum256(raw)
		if prev != nil {
			if kind, ok := prev.otherKinds[sum]; ok {
				f.skip(sum, kind)
				return
			}
		}
		if d, ok := known[sum]; ok {
			reused := *d
			reused.File, reused.Document = name, doc
			f.Documents = append(f.Documents, reused)
			return
		}
		f.Decoded++
		d, errs := decodeDocument(&d.fast, name, doc, line, raw)
		if errs != nil {
			f.Errors = append(f.Errors, errs...)
			return
		}
		if d.other {
			f.skip(sum, d.Kind)
			return
		}
		d.Sum = sum
		f.Documents = append(f.Documents, d)
	}, func(doc, line int) { f.Warnings = append(f.Warnings, IgnoredAfterEnd(name, doc, line)) })
	if err != nil {
		f.Errors = append(f.Errors, err)
	}
	return f
}

// skip counts a document of another kind.
func (f *File) skip(sum [sha256.Size]byte, kind string) {
	if f.otherKinds == nil {
		f.otherKinds = map[[sha256.Size]byte]string{}
	}
	f.otherKinds[sum] = kind
	f.Others.add(kind)
}
