package xdscache

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
)

// Audience is who a stream's client is, as far as what it may read goes:
// the namespace its identity proves, or none (the zero value, anonymous),
// which reads only what is visible to every client. It comes from the
// transport's identity, never from the node message, and is comparable: the
// cache keeps the watches of each audience apart and builds each response
// from what that audience may read.
type Audience struct {
	Namespace string
}

// Anonymous is the audience of a client of no proven namespace.
var Anonymous = Audience{}

// IsAnonymous reports whether a is the anonymous audience.
func (a Audience) IsAnonymous() bool { return a.Namespace == "" }

// String is "anonymous" or the namespace.
func (a Audience) String() string {
	if a.IsAnonymous() {
		return "anonymous"
	}
	return a.Namespace
}

// Visibility is who may read an entry: every client, anonymous or not (the
// zero value), or the clients of a set of namespaces only. It is comparable:
// sets that name the same namespaces, in any order, are ==.
type Visibility struct {
	restricted bool
	names      string // sorted, unique, joined by "," (which no namespace name holds)
}

// VisibleToNamespaces is the visibility of an entry only the clients of the
// namespaces may read; none is no client at all.
func VisibleToNamespaces(namespaces ...string) Visibility {
	ns := slices.Clone(namespaces)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if len(ns) > 0 && ns[0] == "" {
		ns = ns[1:] // anonymous is never named: it reads only what every client may
	}
	return Visibility{restricted: true, names: strings.Join(ns, ",")}
}

// Restricted reports whether some client may not read the entry.
func (v Visibility) Restricted() bool { return v.restricted }

// Namespaces are the namespaces whose clients may read a restricted entry,
// sorted; nil for an unrestricted one.
func (v Visibility) Namespaces() []string {
	if v.names == "" {
		return nil
	}
	return strings.Split(v.names, ",")
}

// String is "*" for every client, else the namespaces joined by ",".
func (v Visibility) String() string {
	if !v.restricted {
		return "*"
	}
	return v.names
}

// Allows reports whether a client of audience a may read what v guards.
func (v Visibility) Allows(a Audience) bool {
	if !v.restricted {
		return true
	}
	if a.IsAnonymous() {
		return false
	}
	// a scan of the joined names: no allocation on the send path
	for rest := v.names; rest != ""; {
		name, after, _ := strings.Cut(rest, ",")
		if name == a.Namespace {
			return true
		}
		rest = after
	}
	return false
}

// VisibleTo reports whether a client of audience a may read e.
func (e *Entry) VisibleTo(a Audience) bool { return e.Visible.Allows(a) }

// WithVisibility is e for the clients v allows: the same bytes and version
// when v is e's own, else a new entry that shares them.
func (e *Entry) WithVisibility(v Visibility) *Entry {
	if e.Visible == v {
		return e
	}
	return &Entry{Name: e.Name, Version: e.Version, Any: e.Any, Visible: v}
}

// audienceVariants are the audience variants of one resource: entries sent
// instead of its base to the clients of the namespaces each names. Their
// visibilities are disjoint, so a namespace reads one variant at most; a
// client of any other audience reads the base (or its zone's variant), if
// it may.
type audienceVariants struct {
	src  []*Entry          // as put, in order
	sent []*Entry          // src[i] under a version of its own
	sums []uint64          // the digest of sent[i]'s bytes
	byNS map[string]*Entry // namespace → the entry of sent its clients read
}

// newAudienceVariants makes the audience variants of name from list, as a
// Change puts them; nil when none is valid. An entry visible to every
// client, or to none, is no variant (the base is what every other client
// reads); a namespace two entries name reads the first's. An entry of
// bytes old already holds keeps their Any and version, and its sent entry
// when its visibility is the same too: a publication that repeats a
// variant changes nothing, and one that moves it to other namespaces
// changes what only the namespaces that move read. Each new content costs
// one digest of its bytes (seed is the cache's); an entry old holds costs
// nothing.
func newAudienceVariants(name string, list []*Entry, old *audienceVariants, seed maphash.Seed) *audienceVariants {
	var av *audienceVariants
	for _, e := range list {
		if e == nil || !e.Visible.Restricted() || e.Visible.names == "" {
			continue
		}
		if av == nil {
			av = &audienceVariants{byNS: map[string]*Entry{}}
		}
		sent, sum := old.sentFor(e, seed)
		switch {
		case sent == nil:
			sent = &Entry{Name: name, Version: e.Version + "@" + strconv.FormatUint(sum, 16), Any: e.Any, Visible: e.Visible}
		case sent.Visible != e.Visible:
			sent = &Entry{Name: name, Version: sent.Version, Any: sent.Any, Visible: e.Visible}
		}
		av.src, av.sent, av.sums = append(av.src, e), append(av.sent, sent), append(av.sums, sum)
		for rest := e.Visible.names; rest != ""; {
			ns, after, _ := strings.Cut(rest, ",")
			if _, taken := av.byNS[ns]; !taken {
				av.byNS[ns] = sent
			}
			rest = after
		}
	}
	return av
}

// sentFor is the sent entry of e's bytes (the one of its visibility too, if
// there is one), or nil; and the digest of the bytes: the entry's Any is
// looked for first, and the bytes are hashed only when it is new.
func (av *audienceVariants) sentFor(e *Entry, seed maphash.Seed) (*Entry, uint64) {
	var found *Entry
	var sum uint64
	if av != nil {
		for i, s := range av.sent {
			if s.Any == e.Any && (found == nil || s.Visible == e.Visible) {
				found, sum = s, av.sums[i]
			}
		}
	}
	if found != nil {
		return found, sum
	}
	sum = maphash.Bytes(seed, e.Any.GetValue())
	if av != nil {
		for i, s := range av.sent {
			if av.sums[i] == sum && bytes.Equal(s.Any.GetValue(), e.Any.GetValue()) && (found == nil || s.Visible == e.Visible) {
				found = s
			}
		}
	}
	return found, sum
}

// same reports whether av and o send the same entries to the same audiences.
func (av *audienceVariants) same(o *audienceVariants) bool {
	if av == nil || o == nil {
		return av == o
	}
	return slices.Equal(av.sent, o.sent)
}

// audienceVariant is the audience variant of name aud reads, or nil.
func (ts *typeState) audienceVariant(name string, aud Audience) *Entry {
	if len(ts.audiences) == 0 || aud.IsAnonymous() {
		return nil
	}
	if av := ts.audiences[name]; av != nil {
		return av.byNS[aud.Namespace]
	}
	return nil
}
