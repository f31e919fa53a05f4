package xdscache

import (
	"slices"
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
