package manifest

import "bytes"

// The fast path's parser reads the subset of YAML the fast path knows
// (block mappings and sequences, single-line flow collections, plain and
// quoted scalars without escapes) into a tree held in one slice, and
// declines anything else. Reading the tree as Poise's kinds is
// fastdecode.go's; reading its scalars as YAML would is fastscalar.go's.

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
	switch p.doc[pos] {
	case '"', '\'':
		return p.quoted(pos)
	case '{', '[':
		return p.flowCollection(pos)
	}
	return -1, 0, false
}

// quoted parses a single- or double-quoted scalar without escapes at pos,
// within the current line, and returns where it ends.
func (p *fastParser) quoted(pos int) (int32, int, bool) {
	d := p.doc
	q := d[pos]
	j := bytes.IndexByte(d[pos+1:p.le], q)
	if j < 0 || bytes.IndexByte(d[pos+1:pos+1+j], '\\') >= 0 || (pos+2+j < p.le && d[pos+2+j] == q) {
		return -1, 0, false
	}
	return p.add(fastNode{kind: fastQuoted, start: int32(pos + 1), end: int32(pos + 1 + j)}), pos + 2 + j, true
}

// flowCollection parses a flow mapping or sequence at pos, within the
// current line, and returns where it ends.
func (p *fastParser) flowCollection(pos int) (int32, int, bool) {
	d := p.doc
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
// '-' and a digit), so no YAML indicator, space, colon or comment is in it;
// or a lone '.' (exportTo's own namespace), which YAML reads as a string.
func plainOK(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	if len(s) == 1 && s[0] == '.' {
		return true
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
