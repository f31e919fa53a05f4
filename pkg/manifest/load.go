package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

// Error is one problem in one document of one file.
type Error struct {
	File     string
	Document int    // 1-based position among the file's documents
	Object   string // "Kind namespace/name", when known
	Field    string // field path, when known
	Detail   string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %d", e.File, e.Document)
	if e.Object != "" {
		fmt.Fprintf(&b, " (%s)", e.Object)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %s", e.Detail)
	return b.String()
}

// Errors is every problem found in a set of files, in file and document order.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap exposes each problem to errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Object is one decoded object and where it came from.
type Object struct {
	File     string
	Document int
	Kind     string
	Key      topology.Key
	// NoNamespace: the document sets no metadata.namespace, and the object
	// is read in namespace "default" (kubectl apply would put it in the
	// namespace of its context, which is "default" unless the context says
	// otherwise).
	NoNamespace bool
}

func (o Object) String() string { return o.Kind + " " + o.Key.String() }

// Set is the content of a set of manifest files as one topology batch.
type Set struct {
	Batch   topology.Batch
	Objects []Object
	// Warnings are what decoded but deserves a look (see IgnoredAfterEnd).
	Warnings []string
	// Others counts the documents of other kinds, which are skipped.
	Others Others
}

// IgnoredAfterEnd is the warning for content after a document's "..." end
// marker, which every YAML decoder ignores.
func IgnoredAfterEnd(file string, doc, line int) string {
	return fmt.Sprintf("%s: document %d: line %d comes after the document end marker \"...\" and is ignored; start a new document with \"---\" if it is meant to be read", file, doc, line)
}

// Where says where an object is defined ("file document N"), or "" when the set does
// not hold it.
func (s *Set) Where(ref topology.ObjectRef) string {
	for _, o := range s.Objects {
		if o.Kind == ref.Kind && o.Key == ref.Key {
			return fmt.Sprintf("%s document %d", o.File, o.Document)
		}
	}
	return ""
}

// Load reads files and directories (the *.yaml, *.yml and *.json files
// directly in a directory, not its subdirectories, as `kubectl apply -f DIR`
// does) in
// a stable order and returns their objects as one batch. All problems are
// collected; any problem returns a nil Set.
func Load(paths ...string) (*Set, error) {
	files, err := expand(paths)
	if err != nil {
		return nil, err
	}
	set := &Set{}
	var errs Errors
	seen := map[string]Object{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		errs = append(errs, decodeInto(set, seen, f, data)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return set, nil
}

// Decode reads one file's content; name is used in messages.
func Decode(name string, data []byte) (*Set, error) {
	set := &Set{}
	if errs := decodeInto(set, map[string]Object{}, name, data); len(errs) > 0 {
		return nil, errs
	}
	return set, nil
}

func expand(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, errors.New("no manifest paths given")
	}
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("manifest path: %w", err)
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("manifest directory %s: %w", p, err)
		}
		var found []string
		for _, d := range entries {
			if !d.IsDir() && IsManifest(d.Name()) {
				found = append(found, filepath.Join(p, d.Name()))
			}
		}
		slices.Sort(found)
		files = append(files, found...)
	}
	return files, nil
}

// IsManifest reports whether a file name is one Load reads from a directory.
func IsManifest(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func decodeInto(set *Set, seen map[string]Object, file string, data []byte) Errors {
	var (
		errs Errors
		fast fastParser
	)
	err := splitDocuments(file, data, func(doc, line int, raw []byte) {
		d, e := decodeDocument(&fast, file, doc, line, raw)
		if e != nil {
			errs = append(errs, e...)
			return
		}
		if d.other {
			set.Others.add(d.Kind)
			return
		}
		id := d.String()
		if prev, dup := seen[id]; dup {
			errs = append(errs, Duplicate(d.Object, prev))
			return
		}
		seen[id] = d.Object
		d.Put(&set.Batch)
		set.Objects = append(set.Objects, d.Object)
	}, func(doc, line int) { set.Warnings = append(set.Warnings, IgnoredAfterEnd(file, doc, line)) })
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// splitDocuments calls fn with each document of a file that holds more than
// comments, numbered from 1, and the line of the file its text starts on (so
// a problem a decoder finds on the document's line n is on the file's line
// line+n-1). A file that cannot be split is reported at the document where
// splitting failed.
//
// It splits as Kubernetes' YAML reader (utilyaml.NewYAMLReader) does: a
// document is the lines up to a line starting with "---", each line ended by
// "\n" ("\r\n" is read as "\n"); a "---" line opening a document is part
// of it. Unlike that reader it copies no line, nor a document that needs no
// change: raw is a slice of data unless the document had "\r" in it or ends
// the file without a newline.
//
// A YAML decoder reads a document up to its end marker "..." and no
// further; warn (when set) is called with the document and the 1-based line
// of the first content that follows such a marker before the next "---",
// which would be silently ignored.
func splitDocuments(file string, data []byte, fn func(doc, line int, raw []byte), warn func(doc, line int)) *Error {
	doc := 1
	start := -1 // where the current document starts in data; -1: none yet
	lineNo, ended := 0, false
	startLine := 0 // the line start is on
	emit := func(end int) {
		raw := data[start:end]
		if bytes.IndexByte(raw, '\r') >= 0 || raw[len(raw)-1] != '\n' {
			raw = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
			if raw[len(raw)-1] != '\n' {
				raw = append(raw, '\n')
			}
		}
		start = -1
		if !isEmptyDocument(raw) {
			fn(doc, startLine, raw)
			doc++
		}
	}
	for pos := 0; pos < len(data); {
		next := len(data)
		line := data[pos:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			next = pos + i + 1
			line = bytes.TrimSuffix(line[:i], []byte("\r"))
		}
		lineNo++
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			// only a comment may follow a separator
			if t := bytes.TrimSpace(rest); len(t) > 0 && t[0] != '#' {
				return &Error{File: file, Document: doc, Detail: fmt.Sprintf("cannot split YAML documents: invalid Yaml document separator: %s", t)}
			}
			ended = false
			if start >= 0 {
				emit(pos)
				pos = next
				continue
			}
		} else if rest, ok := bytes.CutPrefix(line, []byte("...")); ok && (len(bytes.TrimSpace(rest)) == 0 || bytes.TrimSpace(rest)[0] == '#') {
			ended = true
		} else if t := bytes.TrimSpace(line); ended && len(t) > 0 && t[0] != '#' {
			if warn != nil {
				warn(doc, lineNo)
			}
			ended = false // once per marker
		}
		if start < 0 {
			start, startLine = pos, lineNo
		}
		pos = next
	}
	if start >= 0 {
		emit(len(data))
	}
	return nil
}

// isEmptyDocument reports whether a document holds nothing but blank lines,
// comments and "---" lines.
func isEmptyDocument(raw []byte) bool {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			return false
		}
	}
	return true
}

// decodeDocument decodes one document into its object, or says everything
// wrong with it. Whether the object is defined elsewhere too is for the caller.
// The fast path (fastdecode.go) takes the documents it can; the others, and every
// document with a problem, take the general path.
// line is the file's line the document starts on, for the problems a YAML
// decoder finds on a line.
func decodeDocument(fast *fastParser, file string, doc, line int, raw []byte) (Document, Errors) {
	if d, ok := fast.fastDecode(file, doc, raw); ok {
		return d, nil
	}
	return decodeGeneral(file, doc, line, raw)
}

// decodeGeneral decodes any document as Kubernetes does: YAML to JSON
// (rejecting repeated keys), then JSON strictly into the API type. line is
// the file's line the document starts on.
func decodeGeneral(file string, doc, line int, raw []byte) (Document, Errors) {
	fail := func(object, fieldPath, detail string) (Document, Errors) {
		return Document{}, Errors{{File: file, Document: doc, Object: object, Field: fieldPath, Detail: detail}}
	}
	if why := expansionProblem(raw); why != "" {
		return fail("", "", why)
	}
	// The strict conversion rejects a key repeated in one mapping, as
	// kubectl does; the lenient one would silently keep the last value.
	js, dupErr := yaml.YAMLToJSONStrict(raw)
	if dupErr != nil {
		var err error
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return fail("", "", "not valid YAML: "+fileLines(err.Error(), line))
		}
	}
	var tm typeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		if _, wrong := walkDocument(js, reflect.TypeFor[typeMeta](), true); len(wrong) > 0 {
			return fail("", wrong[0].field, "not a Kubernetes object: "+wrong[0].detail)
		}
		return fail("", "", fmt.Sprintf("not a Kubernetes object: %v", err))
	}
	ns := tm.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	object := fmt.Sprintf("%s %s/%s", tm.Kind, ns, tm.Metadata.Name)
	if tm.APIVersion == "" || tm.Kind == "" {
		return fail("", "", "apiVersion and kind are required")
	}
	if mistypedGroup(tm.APIVersion, tm.Kind) {
		return fail(object, "apiVersion", fmt.Sprintf("unknown apiVersion %q for kind %s: did you mean %s?", tm.APIVersion, tm.Kind, v1alpha1.GroupVersion))
	}
	if !isPoise(tm.APIVersion, tm.Kind) {
		// Another kind (a Namespace, a Deployment, ...) in the files
		// kubectl applies beside ours: not Poise's to read or judge.
		return Document{Object: Object{File: file, Document: doc, Kind: tm.Kind}, other: true}, nil
	}
	if tm.APIVersion != v1alpha1.GroupVersion.String() {
		return fail(object, "apiVersion", fmt.Sprintf("unsupported apiVersion %q: want %s", tm.APIVersion, v1alpha1.GroupVersion))
	}

	// Every problem of the document is collected: repeated keys, unknown
	// fields and invalid values, so one edit can fix them all.
	var errs Errors
	if dupErr != nil {
		errs = duplicateKeys(file, doc, line, object, raw, dupErr)
	}
	at := func(fieldPath, detail string) *Error {
		return &Error{File: file, Document: doc, Object: object, Field: fieldPath, Detail: detail}
	}
	var (
		key   topology.Key
		value any
	)
	switch tm.Kind {
	case topology.KindUpstream:
		value, key = decodeAs(js, at, &errs, convert.Upstream, func(u topology.Upstream) topology.Key { return u.Key })
	case topology.KindLocality:
		value, key = decodeAs(js, at, &errs, convert.Locality, func(l topology.Locality) topology.Key { return l.Key })
	case topology.KindEndpointSet:
		value, key = decodeAs(js, at, &errs, convert.EndpointSet, func(e topology.EndpointSet) topology.Key { return e.Key })
	case topology.KindSpatialDomain:
		value, key = decodeAs(js, at, &errs, convert.SpatialDomain, func(d topology.SpatialDomain) topology.Key { return d.Key })
	case topology.KindPartition:
		value, key = decodeAs(js, at, &errs, convert.Partition, func(p topology.Partition) topology.Key { return p.Key })
	default:
		errs = append(errs, at("kind", unknownKind(tm.Kind)))
	}
	if len(errs) > 0 {
		return Document{}, boundProblems(errs)
	}
	return Document{Object: Object{File: file, Document: doc, Kind: tm.Kind, Key: key, NoNamespace: tm.Metadata.Namespace == ""}, value: value}, nil
}

// MaxProblemsPerDocument bounds the problems reported for one document: a
// generated EndpointSet with thousands of bad addresses says the first ones
// and how many more there are.
const MaxProblemsPerDocument = 20

// boundProblems keeps the first MaxProblemsPerDocument problems of one
// document and counts the rest in one more line.
func boundProblems(errs Errors) Errors {
	if len(errs) <= MaxProblemsPerDocument {
		return errs
	}
	first := errs[0]
	more := &Error{File: first.File, Document: first.Document, Object: first.Object,
		Detail: fmt.Sprintf("and %d more problems in this document", len(errs)-MaxProblemsPerDocument)}
	return append(errs[:MaxProblemsPerDocument:MaxProblemsPerDocument], more)
}

// isPoise reports whether a document of this apiVersion and kind is Poise's
// to read. Any apiVersion of the poise.dev group is (a version Poise does not
// serve is an error, not another kind); so is a Poise kind in the core group
// ("v1alpha1" without its group, say), which has no such kind and can only be
// a Poise object with its group left out. Everything else belongs to someone
// else: another project may well have a kind named Upstream in its own group
// (a group that looks like a slip of poise.dev is caught before, by
// mistypedGroup).
func isPoise(apiVersion, kind string) bool {
	group, _, versioned := strings.Cut(apiVersion, "/")
	if !versioned {
		if apiVersion == v1alpha1.GroupVersion.Group {
			return true
		}
		group = ""
	}
	if group == v1alpha1.GroupVersion.Group {
		return true
	}
	if group == "" {
		switch kind {
		case topology.KindUpstream, topology.KindLocality, topology.KindEndpointSet, topology.KindSpatialDomain, topology.KindPartition:
			return true
		}
	}
	return false
}

// duplicateKeys reports each key repeated in one mapping of a document with
// its field path and the file's lines, the document starting on the file's
// line firstLine. cause is the YAML decoder's error, reported as is when the
// keys cannot be located.
func duplicateKeys(file string, doc, firstLine int, object string, raw []byte, cause error) Errors {
	var errs Errors
	var root yamlv3.Node
	if yamlv3.Unmarshal(raw, &root) == nil {
		var walk func(n *yamlv3.Node, path string)
		walk = func(n *yamlv3.Node, path string) {
			switch n.Kind {
			case yamlv3.DocumentNode:
				for _, c := range n.Content {
					walk(c, path)
				}
			case yamlv3.SequenceNode:
				for i, c := range n.Content {
					walk(c, fmt.Sprintf("%s[%d]", path, i))
				}
			case yamlv3.MappingNode:
				first := map[string]int{}
				for i := 0; i+1 < len(n.Content); i += 2 {
					k := n.Content[i]
					if k.Kind != yamlv3.ScalarNode || k.Tag == "!!merge" {
						continue
					}
					p := k.Value
					if path != "" {
						p = path + "." + k.Value
					}
					if line, dup := first[k.Value]; dup {
						errs = append(errs, &Error{File: file, Document: doc, Object: object, Field: p,
							Detail: fmt.Sprintf("duplicate field: set on line %d and again on line %d", line+firstLine-1, k.Line+firstLine-1)})
					} else {
						first[k.Value] = k.Line
					}
					walk(n.Content[i+1], p)
				}
			}
		}
		walk(&root, "")
	}
	if len(errs) == 0 {
		errs = Errors{{File: file, Document: doc, Object: object,
			Detail: "duplicate field: " + fileLines(strings.Join(strings.Fields(cause.Error()), " "), firstLine)}}
	}
	return errs
}

// decodeAs decodes one object of API type T strictly, validates and converts
// it, adding every problem to errs through at. An object that does not decode
// (a string where a number goes) has its unknown fields and every value of
// the wrong type reported, and is not validated: its values would say more
// about the decoding than about the document.
func decodeAs[T, O any](js []byte, at func(fieldPath, detail string) *Error, errs *Errors, conv func(*T) (O, field.ErrorList), keyOf func(O) topology.Key) (any, topology.Key) {
	var obj T
	root := reflect.TypeFor[T]()
	strictErrs, err := sigsjson.UnmarshalStrict(js, &obj)
	if err != nil {
		unknown, wrong := walkDocument(js, root, false)
		for _, path := range unknown {
			*errs = append(*errs, at(path, unknownFieldAt(root, path)))
		}
		for _, w := range wrong {
			*errs = append(*errs, at(w.field, w.detail))
		}
		if len(wrong) == 0 { // a decoding problem the walk does not know
			*errs = append(*errs, at("", fmt.Sprintf("cannot decode: %v", err)))
		}
		return nil, topology.Key{}
	}
	for _, se := range strictErrs {
		*errs = append(*errs, strictError(at, root, se))
	}
	o, ferrs := conv(&obj)
	for _, fe := range ferrs {
		*errs = append(*errs, at(fe.Field, fe.ErrorBody()))
	}
	return o, keyOf(o)
}

// strictError turns `unknown field "spec.x"` into Field "spec.x", Detail
// "unknown field" (with the field of root it most likely meant), so every
// error has the same shape.
func strictError(at func(fieldPath, detail string) *Error, root reflect.Type, se error) *Error {
	msg := se.Error()
	if path, ok := strings.CutPrefix(msg, "unknown field "); ok {
		if p, err := strconv.Unquote(path); err == nil {
			return at(p, unknownFieldAt(root, p))
		}
	}
	return at("", msg)
}

// Locate adds to a topology rejection the file and document of every object
// it involves, so a person can go straight to the lines to fix.
func (s *Set) Locate(err error) error {
	where := make(map[string]Object, len(s.Objects))
	for _, o := range s.Objects {
		where[o.String()] = o
	}
	return Locate(err, func(ref topology.ObjectRef) (Object, bool) {
		o, ok := where[ref.String()]
		return o, ok
	})
}

// Locate adds to a topology rejection where each object it involves is
// defined, as where says; an object where does not know keeps no location.
func Locate(err error, where func(topology.ObjectRef) (Object, bool)) error {
	var be *topology.BatchError
	if !errors.As(err, &be) {
		return err
	}
	located := &topology.BatchError{Problems: slices.Clone(be.Problems)}
	for i, p := range located.Problems {
		locs := make([]string, len(p.Objects))
		for j, ref := range p.Objects {
			if o, ok := where(ref); ok {
				locs[j] = fmt.Sprintf("%s document %d", o.File, o.Document)
			}
		}
		located.Problems[i].Locations = locs
	}
	return located
}
