package manifest

import (
	"bytes"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

// The fast path decodes the documents Poise's own tools and most people
// write — block and single-line flow YAML of plain identifiers, numbers and
// simple strings, for the fields of Upstream, Locality and EndpointSet it
// knows — straight into the API object, without the generic YAML tree, the
// JSON text and the reflective decoding of the general path (decodeDocument).
// It decodes to exactly the object the general path would, or declines: on
// anything it does not know (another kind, an unknown field, a tab, an
// anchor, an escape, a multi-line scalar, a scalar YAML would read as a
// number where a string is wanted, ...) and on any problem at all, the
// document goes the general path, which says what is wrong. So the errors
// are always the general path's; the fast path only saves time.

// fastKind is what a node of the fast path's tree is.
type fastKind uint8

const (
	fastNull   fastKind = iota // no value (`key:` with nothing under it)
	fastPlain                  // a plain scalar
	fastQuoted                 // a single- or double-quoted scalar without escapes
	fastMap                    // children alternate key and value
	fastSeq
)

// fastNode is one node; nodes link to their first child and next sibling by
// index into fastParser.nodes, so a document's tree is one slice.
type fastNode struct {
	kind        fastKind
	start, end  int32 // a scalar's text in the document
	first, next int32 // -1: none
}

// maxFastDepth bounds the nesting the fast path follows; Poise's objects
// need five levels.
const maxFastDepth = 16

// maxFastDocument bounds the documents the fast path parses, and so its node
// array (at most a node per two bytes): an EndpointSet of the most endpoints
// a set may have (5,000, each with health) is about 500 KB. A larger
// document takes the general path.
const maxFastDocument = 2 << 20

// keptNodes is the largest node array a parser keeps for its next document.
const keptNodes = 1 << 14

// fastParser parses one document at a time into nodes; one parser is reused
// for the documents of a file.
type fastParser struct {
	doc   []byte
	nodes []fastNode
	// the current line: [ls, le) without its newline, content from ls+ind;
	// next is where the following line starts.
	ls, le, ind, next int
	eof               bool
	depth             int
}

// fastDecode decodes one document by the fast path, or reports false.
func (p *fastParser) fastDecode(file string, doc int, raw []byte) (Document, bool) {
	obj, ok := p.apiObject(raw)
	if !ok {
		return Document{}, false
	}
	var (
		value any
		key   topology.Key
		kind  string
		nerrs int
		ns    string
	)
	switch o := obj.(type) {
	case *v1alpha1.Upstream:
		u, ferrs := convert.Upstream(o)
		value, key, kind, nerrs, ns = u, u.Key, topology.KindUpstream, len(ferrs), o.Namespace
	case *v1alpha1.Locality:
		l, ferrs := convert.Locality(o)
		value, key, kind, nerrs, ns = l, l.Key, topology.KindLocality, len(ferrs), o.Namespace
	case *v1alpha1.EndpointSet:
		s, ferrs := convert.OwnedEndpointSet(o) // o is ours: no copy to default
		value, key, kind, nerrs, ns = s, s.Key, topology.KindEndpointSet, len(ferrs), o.Namespace
	}
	if nerrs > 0 {
		return Document{}, false // the general path says what is wrong
	}
	return Document{Object: Object{File: file, Document: doc, Kind: kind, Key: key, NoNamespace: ns == ""}, value: value}, true
}

// apiObject decodes a document into a *v1alpha1.Upstream, Locality or
// EndpointSet, or reports false.
func (p *fastParser) apiObject(raw []byte) (any, bool) {
	root, ok := p.parse(raw)
	if !ok {
		return nil, false
	}
	var apiVersion, kind string
	for k := p.nodes[root].first; k >= 0; k = p.nodes[p.nodes[k].next].next {
		switch string(p.bytes(k)) {
		case "apiVersion":
			apiVersion, ok = p.str(p.nodes[k].next)
		case "kind":
			kind, ok = p.str(p.nodes[k].next)
		}
		if !ok {
			return nil, false
		}
	}
	if apiVersion != v1alpha1.GroupVersion.String() {
		return nil, false
	}
	switch kind {
	case topology.KindUpstream:
		obj := &v1alpha1.Upstream{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.upstreamSpec(v, &obj.Spec) }, p.empty)
	case topology.KindLocality:
		obj := &v1alpha1.Locality{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.localitySpec(v, &obj.Spec) }, p.empty)
	case topology.KindEndpointSet:
		obj := &v1alpha1.EndpointSet{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.endpointSetSpec(v, &obj.Spec) },
			func(v int32) bool { return p.endpointSetStatus(v, &obj.Status) })
	}
	return nil, false
}

// parse parses a document into p.nodes and returns its root, a mapping.
func (p *fastParser) parse(raw []byte) (int32, bool) {
	if len(raw) > maxFastDocument {
		return -1, false
	}
	for _, c := range raw {
		if (c < ' ' || c > '~') && c != '\n' {
			return -1, false // tabs, control characters and anything not ASCII go the general way
		}
	}
	if cap(p.nodes) == 0 { // a 20-endpoint set takes about 100 nodes; reused for the file's next documents
		p.nodes = make([]fastNode, 0, max(128, len(raw)/8))
	}
	p.doc, p.nodes, p.next, p.eof, p.depth = raw, p.nodes[:0], 0, false, 0
	p.advance()
	// a "---" line opening the document, with at most a comment after it
	for !p.eof && p.ind == 0 && bytes.HasPrefix(p.line(), []byte("---")) {
		rest := bytes.TrimLeft(p.line()[3:], " ")
		if len(rest) > 0 && (rest[0] != '#' || len(rest) == len(p.line())-3) {
			return -1, false
		}
		p.advance()
	}
	if p.eof || !p.isKey(p.ls+p.ind) {
		return -1, false
	}
	root, ok := p.mapping(p.ind, p.ls+p.ind)
	if !ok || !p.eof {
		return -1, false
	}
	return root, true
}

// release drops the last document, keeping a node array of usual size for
// the next.
func (p *fastParser) release() {
	p.doc = nil
	if cap(p.nodes) > keptNodes {
		p.nodes = nil
	}
}

// line is the current line's content.
func (p *fastParser) line() []byte { return p.doc[p.ls+p.ind : p.le] }

// advance moves to the next line holding more than blanks or a comment.
func (p *fastParser) advance() {
	pos := p.next
	for pos < len(p.doc) {
		le := bytes.IndexByte(p.doc[pos:], '\n')
		if le < 0 {
			le = len(p.doc)
		} else {
			le += pos
		}
		i := pos
		for i < le && p.doc[i] == ' ' {
			i++
		}
		if i == le || p.doc[i] == '#' {
			pos = le + 1
			continue
		}
		p.ls, p.le, p.ind, p.next = pos, le, i-pos, le+1
		return
	}
	p.eof = true
}

func (p *fastParser) add(n fastNode) int32 {
	n.first, n.next = -1, -1
	p.nodes = append(p.nodes, n)
	return int32(len(p.nodes) - 1)
}

// isSeqEntry reports whether the current line is a block sequence entry.
func (p *fastParser) isSeqEntry() bool {
	l := p.line()
	return l[0] == '-' && (len(l) == 1 || l[1] == ' ')
}

// isKey reports whether a mapping key followed by ": " or ":" and the end
// of the line starts at pos.
func (p *fastParser) isKey(pos int) bool {
	_, end, ok := p.key(pos)
	return ok && end <= p.le
}

// key scans a key at pos: a plain identifier or a quoted string without
// escapes, then ':' and a space or the end of the line. It returns the
// key's text and where its value may start.
func (p *fastParser) key(pos int) (n fastNode, after int, ok bool) {
	d := p.doc
	i := pos
	switch {
	case i < p.le && (d[i] == '"' || d[i] == '\''):
		q := d[i]
		j := bytes.IndexByte(d[i+1:p.le], q)
		if j < 0 {
			return n, 0, false
		}
		n = fastNode{kind: fastQuoted, start: int32(i + 1), end: int32(i + 1 + j)}
		if bytes.IndexByte(d[i+1:i+1+j], '\\') >= 0 || (i+2+j < p.le && d[i+2+j] == q) {
			return n, 0, false
		}
		i += j + 2
	default:
		for i < p.le && isIdent(d[i]) {
			i++
		}
		if i == pos {
			return n, 0, false
		}
		n = fastNode{kind: fastPlain, start: int32(pos), end: int32(i)}
	}
	if i >= p.le || d[i] != ':' {
		return n, 0, false
	}
	i++
	if i < p.le && d[i] != ' ' {
		return n, 0, false
	}
	return n, i, true
}

func isIdent(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// mapping parses a block mapping whose keys are at column col, the first at
// pos on the current line.
func (p *fastParser) mapping(col, pos int) (int32, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return -1, false
	}
	defer func() { p.depth-- }()
	m := p.add(fastNode{kind: fastMap})
	last := int32(-1)
	for {
		kn, after, ok := p.key(pos)
		if !ok {
			return -1, false
		}
		k := p.add(kn)
		var v int32
		rest := skipSpaces(p.doc, after, p.le)
		if rest == p.le || p.doc[rest] == '#' { // key() saw a space before any comment
			p.advance()
			switch {
			case !p.eof && p.ind > col:
				if v, ok = p.block(); !ok {
					return -1, false
				}
			case !p.eof && p.ind == col && p.isSeqEntry():
				if v, ok = p.sequence(col); !ok {
					return -1, false
				}
			default:
				v = p.add(fastNode{kind: fastNull})
			}
		} else {
			if v, ok = p.inline(rest); !ok {
				return -1, false
			}
			if p.advance(); !p.eof && p.ind > col {
				return -1, false // a scalar continued on the next line, or worse
			}
		}
		p.nodes[k].next = v
		if last < 0 {
			p.nodes[m].first = k
		} else {
			p.nodes[last].next = k
		}
		last = v
		if p.eof || p.ind < col {
			return m, true
		}
		if p.ind > col || p.isSeqEntry() {
			return -1, false
		}
		pos = p.ls + p.ind
	}
}

// sequence parses a block sequence whose entries are at column col.
func (p *fastParser) sequence(col int) (int32, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return -1, false
	}
	defer func() { p.depth-- }()
	s := p.add(fastNode{kind: fastSeq})
	last := int32(-1)
	for {
		start := skipSpaces(p.doc, p.ls+p.ind+1, p.le)
		if start == p.le || p.doc[start] == '#' || start == p.ls+p.ind+1 {
			return -1, false // an entry on the following lines, or none
		}
		var (
			v  int32
			ok bool
		)
		if p.isKey(start) {
			if v, ok = p.mapping(start-p.ls, start); !ok {
				return -1, false
			}
		} else {
			if v, ok = p.inline(start); !ok {
				return -1, false
			}
			p.advance()
		}
		if last < 0 {
			p.nodes[s].first = v
		} else {
			p.nodes[last].next = v
		}
		last = v
		if p.eof || p.ind < col || (p.ind == col && !p.isSeqEntry()) {
			return s, true
		}
		if p.ind > col {
			return -1, false
		}
	}
}

// block parses the block node starting the current line.
func (p *fastParser) block() (int32, bool) {
	if p.isSeqEntry() {
		return p.sequence(p.ind)
	}
	if p.isKey(p.ls + p.ind) {
		return p.mapping(p.ind, p.ls+p.ind)
	}
	return -1, false
}

// inline parses the rest of the current line from pos as one value: a
// single-line flow mapping or sequence, or a scalar, then at most a
// comment.
func (p *fastParser) inline(pos int) (int32, bool) {
	var (
		n   int32
		end int
		ok  bool
	)
	switch p.doc[pos] {
	case '{', '[', '"', '\'':
		if n, end, ok = p.flow(pos); !ok {
			return -1, false
		}
	default:
		end = pos
		for end < p.le && !(p.doc[end] == '#' && p.doc[end-1] == ' ') {
			end++
		}
		text := bytes.TrimRight(p.doc[pos:end], " ")
		if !plainOK(text) {
			return -1, false
		}
		end = pos + len(text)
		n = p.add(fastNode{kind: fastPlain, start: int32(pos), end: int32(end)})
	}
	rest := skipSpaces(p.doc, end, p.le)
	if rest < p.le && (p.doc[rest] != '#' || rest == end) {
		return -1, false
	}
	return n, true
}

// flow parses a flow value at pos, within the current line, and returns
// where it ends.
func (p *fastParser) flow(pos int) (int32, int, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return -1, 0, false
	}
	defer func() { p.depth-- }()
	d := p.doc
	switch d[pos] {
	case '"', '\'':
		q := d[pos]
		j := bytes.IndexByte(d[pos+1:p.le], q)
		if j < 0 || bytes.IndexByte(d[pos+1:pos+1+j], '\\') >= 0 || (pos+2+j < p.le && d[pos+2+j] == q) {
			return -1, 0, false
		}
		return p.add(fastNode{kind: fastQuoted, start: int32(pos + 1), end: int32(pos + 1 + j)}), pos + 2 + j, true
	case '{', '[':
		isMap := d[pos] == '{'
		closer := byte(']')
		n := p.add(fastNode{kind: fastSeq})
		if isMap {
			closer = '}'
			p.nodes[n].kind = fastMap
		}
		last := int32(-1)
		link := func(c int32) {
			if last < 0 {
				p.nodes[n].first = c
			} else {
				p.nodes[last].next = c
			}
			last = c
		}
		i := skipSpaces(d, pos+1, p.le)
		if i < p.le && d[i] == closer {
			return n, i + 1, true
		}
		for {
			if isMap {
				kn, after, ok := p.key(i)
				if !ok || after >= p.le {
					return -1, 0, false
				}
				link(p.add(kn))
				i = skipSpaces(d, after, p.le)
			}
			if i >= p.le {
				return -1, 0, false
			}
			v, end, ok := p.flowValue(i)
			if !ok {
				return -1, 0, false
			}
			link(v)
			i = skipSpaces(d, end, p.le)
			if i >= p.le {
				return -1, 0, false
			}
			switch d[i] {
			case closer:
				return n, i + 1, true
			case ',':
				i = skipSpaces(d, i+1, p.le)
				if i >= p.le || d[i] == closer || d[i] == ',' {
					return -1, 0, false
				}
			default:
				return -1, 0, false
			}
		}
	}
	return -1, 0, false
}

// flowValue parses a value inside a flow collection.
func (p *fastParser) flowValue(pos int) (int32, int, bool) {
	switch p.doc[pos] {
	case '{', '[', '"', '\'':
		return p.flow(pos)
	}
	end := pos
	for end < p.le {
		c := p.doc[end]
		if c == ',' || c == '}' || c == ']' || c == ' ' {
			break
		}
		end++
	}
	if !plainOK(p.doc[pos:end]) {
		return -1, 0, false
	}
	return p.add(fastNode{kind: fastPlain, start: int32(pos), end: int32(end)}), end, true
}

func skipSpaces(d []byte, i, end int) int {
	for i < end && d[i] == ' ' {
		i++
	}
	return i
}

// plainOK reports whether a plain scalar is one the fast path reads: ASCII
// letters, digits, '.', '/' and '-', starting with a letter or a digit (or
// '-' and a digit), so no YAML indicator, space, colon or comment is in it.
func plainOK(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	c := s[0]
	if !(isAlnum(c) || c == '-' && len(s) > 1 && s[1] >= '0' && s[1] <= '9') {
		return false
	}
	for _, c := range s[1:] {
		if !isAlnum(c) && c != '.' && c != '/' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// text is a scalar node's text.
func (p *fastParser) text(n int32) string {
	return string(p.bytes(n))
}

func (p *fastParser) bytes(n int32) []byte {
	return p.doc[p.nodes[n].start:p.nodes[n].end]
}

// fieldNames are the keys the fast path knows, so a key is named without
// copying it.
var fieldNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"apiVersion", "kind", "metadata", "name", "namespace", "spec", "status",
		"overprovisioningFactor", "panicThreshold", "panicMode", "drainingCapacity", "healthAdjustment", "loadBalancing",
		"protocol", "connectTimeout", "endpointsFrom", "service", "port", "upstream", "priority", "weight", "region",
		"zone", "subZone", "locality", "endpoints", "address", "adminState", "observedGeneration", "health", "probe",
		"circuit", "outlierEjected", "addressPolicy", "allowLoopback"} {
		m[k] = k
	}
	return m
}()

// isNull reports whether a node is YAML's null: no value, or a plain ~ or
// null.
func (p *fastParser) isNull(n int32) bool {
	switch p.nodes[n].kind {
	case fastNull:
		return true
	case fastPlain:
		switch string(p.bytes(n)) {
		case "~", "null", "Null", "NULL":
			return true
		}
	}
	return false
}

// yamlWords are the plain scalars YAML 1.1 (and so the general path) reads
// as something other than a string, among those plainOK lets through and
// that do not start with a digit or '-'.
var yamlWords = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"n": true, "N": true, "no": true, "No": true, "NO": true,
	"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
	"null": true, "Null": true, "NULL": true,
}

// str decodes a node into a string field: a quoted scalar, or a plain one
// YAML reads as a string; null leaves it empty, as JSON's null does.
func (p *fastParser) str(n int32) (string, bool) {
	switch {
	case p.isNull(n):
		return "", true
	case p.nodes[n].kind == fastQuoted:
		return p.text(n), true
	case p.nodes[n].kind != fastPlain:
		return "", false
	}
	s := p.doc[p.nodes[n].start:p.nodes[n].end]
	if c := s[0]; c >= '0' && c <= '9' || c == '-' {
		if !plainIsString(s) {
			return "", false
		}
	} else if yamlWords[string(s)] {
		return "", false
	}
	return string(s), true
}

// plainIsString reports whether YAML (go-yaml v2's resolve, which the
// general path uses) reads a plain scalar starting with a digit or '-' as a
// string: not a timestamp, an integer in any base or a float. It answers
// false when unsure.
func plainIsString(s []byte) bool {
	dots := 0
	for _, c := range s {
		if c == '.' {
			dots++
		} else if c < '0' || c > '9' {
			dots = -1 << 10
		}
	}
	if dots >= 2 {
		return true // digits and two dots or more (an IPv4 address): no number has that
	}
	if len(s) >= 5 && s[4] == '-' && isDigits(s[:4]) {
		return false // perhaps a timestamp
	}
	str := string(s)
	if _, err := strconv.ParseInt(str, 0, 64); err == nil {
		return false
	}
	if _, err := strconv.ParseUint(str, 0, 64); err == nil {
		return false
	}
	if isYAMLFloat(s) {
		return false
	}
	if len(s) > 2 && (s[0] == '0' && s[1] == 'b' || s[0] == '-' && s[1] == '0') {
		return false // perhaps binary
	}
	return true
}

func isDigits(s []byte) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(s) > 0
}

// isYAMLFloat reports whether s matches go-yaml v2's float syntax,
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, which ParseFloat then
// always accepts (an overflow is ±Inf, not an error, once the syntax matched;
// either way the general path does not read a string).
func isYAMLFloat(s []byte) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// integer decodes a plain decimal integer within [lo, hi]: what YAML reads
// as an integer and JSON then decodes into the field unchanged.
func (p *fastParser) integer(n int32, lo, hi int64) (int64, bool) {
	if p.nodes[n].kind != fastPlain {
		return 0, false
	}
	s := p.doc[p.nodes[n].start:p.nodes[n].end]
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if !isDigits(digits) || len(digits) > 1 && digits[0] == '0' || len(digits) > 18 || string(s) == "-0" {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, false
	}
	return v, true
}

func (p *fastParser) int32Ptr(n int32, dst **int32) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	v, ok := p.integer(n, -1<<31, 1<<31-1)
	if ok {
		x := int32(v)
		*dst = &x
	}
	return ok
}

func (p *fastParser) int64Ptr(n int32, dst **int64) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	v, ok := p.integer(n, -1<<62, 1<<62)
	if ok {
		*dst = &v
	}
	return ok
}

func (p *fastParser) int32Val(n int32, dst *int32) bool {
	if p.isNull(n) {
		return true
	}
	v, ok := p.integer(n, -1<<31, 1<<31-1)
	*dst = int32(v)
	return ok
}

func (p *fastParser) int64Val(n int32, dst *int64) bool {
	if p.isNull(n) {
		return true
	}
	v, ok := p.integer(n, -1<<62, 1<<62)
	*dst = v
	return ok
}

func (p *fastParser) boolVal(n int32, dst *bool) bool {
	if p.isNull(n) {
		return true
	}
	if p.nodes[n].kind != fastPlain {
		return false
	}
	switch string(p.bytes(n)) {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		*dst = true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		*dst = false
	default:
		return false
	}
	return true
}

// strField decodes a node into a string-kinded field.
func strField[T ~string](p *fastParser, n int32, dst *T) bool {
	s, ok := p.str(n)
	*dst = T(s)
	return ok
}

// fields calls fn with each key and value of a mapping; null is an empty
// mapping. A key given twice, or one fn does not know, declines.
func (p *fastParser) fields(n int32, fn func(key string, v int32) bool) bool {
	if p.isNull(n) {
		return true
	}
	if p.nodes[n].kind != fastMap {
		return false
	}
	for k := p.nodes[n].first; k >= 0; k = p.nodes[p.nodes[k].next].next {
		key, known := fieldNames[string(p.bytes(k))]
		if !known {
			return false
		}
		for o := p.nodes[n].first; o != k; o = p.nodes[p.nodes[o].next].next {
			if bytes.Equal(p.bytes(o), p.bytes(k)) {
				return false
			}
		}
		if !fn(key, p.nodes[k].next) {
			return false
		}
	}
	return true
}

// items decodes a sequence into a slice; null leaves it nil, [] makes it
// empty, as JSON does.
func items[T any](p *fastParser, n int32, dst *[]T, fn func(v int32, e *T) bool) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	if p.nodes[n].kind != fastSeq {
		return false
	}
	count := 0
	for c := p.nodes[n].first; c >= 0; c = p.nodes[c].next {
		count++
	}
	out := make([]T, count)
	i := 0
	for c := p.nodes[n].first; c >= 0; c = p.nodes[c].next {
		if !fn(c, &out[i]) {
			return false
		}
		i++
	}
	*dst = out
	return true
}

// empty accepts null or an empty mapping: a status the fast path need not
// read.
func (p *fastParser) empty(n int32) bool {
	return p.isNull(n) || p.nodes[n].kind == fastMap && p.nodes[n].first < 0
}

// object decodes a document's top level: apiVersion, kind, metadata (name
// and namespace), and spec and status through their functions.
func (p *fastParser) object(root int32, tm *metav1.TypeMeta, om *metav1.ObjectMeta, spec, status func(v int32) bool) bool {
	return p.fields(root, func(k string, v int32) bool {
		switch k {
		case "apiVersion":
			tm.APIVersion, _ = p.str(v)
			return true
		case "kind":
			tm.Kind, _ = p.str(v)
			return true
		case "metadata":
			return p.fields(v, func(k string, v int32) bool {
				switch k {
				case "name":
					return strField(p, v, &om.Name)
				case "namespace":
					return strField(p, v, &om.Namespace)
				}
				return false
			})
		case "spec":
			return spec(v)
		case "status":
			return status(v)
		}
		return false
	})
}

func (p *fastParser) localityID(k string, v int32, l *v1alpha1.LocalityID) (known, ok bool) {
	switch k {
	case "region":
		return true, strField(p, v, &l.Region)
	case "zone":
		return true, strField(p, v, &l.Zone)
	case "subZone":
		return true, strField(p, v, &l.SubZone)
	}
	return false, false
}

func (p *fastParser) upstreamSpec(n int32, s *v1alpha1.UpstreamSpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "overprovisioningFactor":
			return p.int32Ptr(v, &s.OverprovisioningFactor)
		case "panicThreshold":
			return p.int32Ptr(v, &s.PanicThreshold)
		case "panicMode":
			return strField(p, v, &s.PanicMode)
		case "drainingCapacity":
			return strField(p, v, &s.DrainingCapacity)
		case "healthAdjustment":
			return strField(p, v, &s.HealthAdjustment)
		case "loadBalancing":
			return strField(p, v, &s.LoadBalancing)
		case "protocol":
			return strField(p, v, &s.Protocol)
		case "connectTimeout":
			if p.isNull(v) {
				s.ConnectTimeout = nil
				return true
			}
			str, ok := p.str(v)
			if !ok {
				return false
			}
			d, err := time.ParseDuration(str)
			if err != nil {
				return false
			}
			s.ConnectTimeout = &metav1.Duration{Duration: d}
			return true
		case "endpointsFrom":
			if p.isNull(v) {
				s.EndpointsFrom = nil
				return true
			}
			from := &v1alpha1.EndpointsFrom{}
			s.EndpointsFrom = from
			return p.fields(v, func(k string, v int32) bool {
				if k != "service" {
					return false
				}
				return p.fields(v, func(k string, v int32) bool {
					switch k {
					case "name":
						return strField(p, v, &from.Service.Name)
					case "port":
						return p.portRef(v, &from.Service.Port)
					}
					return false
				})
			})
		case "addressPolicy":
			if p.isNull(v) {
				s.AddressPolicy = nil
				return true
			}
			ap := &v1alpha1.AddressPolicy{}
			s.AddressPolicy = ap
			return p.fields(v, func(k string, v int32) bool {
				return k == "allowLoopback" && p.boolVal(v, &ap.AllowLoopback)
			})
		}
		return false
	})
}

// portRef decodes an IntOrString: a decimal number is an int, a string a
// string.
func (p *fastParser) portRef(n int32, dst *intstr.IntOrString) bool {
	if p.nodes[n].kind == fastPlain {
		if v, ok := p.integer(n, -1<<31, 1<<31-1); ok {
			*dst = intstr.FromInt32(int32(v))
			return true
		}
	}
	if p.isNull(n) {
		return false
	}
	s, ok := p.str(n)
	if ok {
		*dst = intstr.FromString(s)
	}
	return ok
}

func (p *fastParser) localitySpec(n int32, s *v1alpha1.LocalitySpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "upstream":
			return strField(p, v, &s.Upstream)
		case "priority":
			return p.int32Ptr(v, &s.Priority)
		case "weight":
			return p.int64Ptr(v, &s.Weight)
		}
		_, ok := p.localityID(k, v, &s.LocalityID)
		return ok
	})
}

func (p *fastParser) endpointSetSpec(n int32, s *v1alpha1.EndpointSetSpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "upstream":
			return strField(p, v, &s.Upstream)
		case "locality":
			return p.fields(v, func(k string, v int32) bool {
				_, ok := p.localityID(k, v, &s.Locality)
				return ok
			})
		case "priority":
			return p.int32Ptr(v, &s.Priority)
		case "endpoints":
			return items(p, v, &s.Endpoints, func(v int32, e *v1alpha1.Endpoint) bool {
				return p.fields(v, func(k string, v int32) bool {
					switch k {
					case "address":
						return strField(p, v, &e.Address)
					case "port":
						return p.int32Val(v, &e.Port)
					case "weight":
						return p.int64Ptr(v, &e.Weight)
					case "adminState":
						return strField(p, v, &e.AdminState)
					}
					return false
				})
			})
		}
		return false
	})
}

func (p *fastParser) endpointSetStatus(n int32, s *v1alpha1.EndpointSetStatus) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "observedGeneration":
			return p.int64Val(v, &s.ObservedGeneration)
		case "health":
			return items(p, v, &s.Health, func(v int32, h *v1alpha1.EndpointHealth) bool {
				return p.fields(v, func(k string, v int32) bool {
					switch k {
					case "address":
						return strField(p, v, &h.Address)
					case "port":
						return p.int32Val(v, &h.Port)
					case "probe":
						return strField(p, v, &h.Probe)
					case "circuit":
						return strField(p, v, &h.Circuit)
					case "outlierEjected":
						return p.boolVal(v, &h.OutlierEjected)
					}
					return false
				})
			})
		}
		return false
	})
}
