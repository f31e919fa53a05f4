package topology

import (
	"slices"
	"strings"
)

// Export is a visibility rule: the namespaces whose clients may read an
// object (an Upstream's spec.exportTo, or the control plane's default for
// the Upstreams that set none). The zero value is "not set". It is
// comparable: rules that say the same thing, in any order, are ==.
type Export struct {
	// Set distinguishes a rule from its absence: an Upstream without
	// spec.exportTo follows the control plane's default.
	Set bool
	// All exports to every namespace ("*"), and to clients of none.
	All bool
	// Own exports to the object's own namespace ("."), kept unresolved only
	// in a default, which applies to objects of every namespace; an
	// Upstream's own rule names its namespace instead.
	Own bool
	// names are the namespaces named, sorted, each once, joined by ","
	// (which no namespace name holds), so the rule stays comparable.
	names string
}

// ExportAll is the rule "every namespace": Poise's default when the control
// plane sets none.
var ExportAll = Export{Set: true, All: true}

// NewExport is the canonical rule of a valid list of items: "*", "." or
// namespace names. A "." becomes own when own is a namespace, and stays Own
// when it is "" (a default, for every namespace). nil is not set.
func NewExport(items []string, own string) Export {
	if items == nil {
		return Export{}
	}
	e := Export{Set: true}
	var names []string
	for _, it := range items {
		switch {
		case it == "*":
			return ExportAll
		case it == "." && own == "":
			e.Own = true
		case it == ".":
			names = append(names, own)
		default:
			names = append(names, it)
		}
	}
	slices.Sort(names)
	e.names = strings.Join(slices.Compact(names), ",")
	return e
}

// Namespaces are the namespaces the rule names, sorted, each once; an Own
// or All rule may name none.
func (e Export) Namespaces() []string {
	if e.names == "" {
		return nil
	}
	return strings.Split(e.names, ",")
}

// String is the rule as its items in canonical order, joined by ", ": "*",
// or "." (Own) and the names; "" when not set.
func (e Export) String() string {
	switch {
	case !e.Set:
		return ""
	case e.All:
		return "*"
	}
	items := e.Namespaces()
	if e.Own {
		items = append([]string{"."}, items...)
	}
	return strings.Join(items, ", ")
}

// allows reports whether a client of namespace ns may read an object of
// namespace own under e, a rule that is set. A client of no namespace
// (anonymous) reads only what is exported to every namespace.
func (e Export) allows(ns, own string) bool {
	switch {
	case e.All:
		return true
	case ns == "":
		return false
	case e.Own && ns == own:
		return true
	}
	// a scan of the joined names: no allocation on a client's every check
	for rest := e.names; rest != ""; {
		name, after, _ := strings.Cut(rest, ",")
		if name == ns {
			return true
		}
		rest = after
	}
	return false
}

// ExportOf is the rule in force for u: its own spec.exportTo, else def,
// else ExportAll.
func (u *Upstream) ExportOf(def Export) Export { return exportOf(u.ExportTo, def) }

func exportOf(own, def Export) Export {
	switch {
	case own.Set:
		return own
	case def.Set:
		return def
	}
	return ExportAll
}

// VisibleTo reports whether a client of namespace ns may read u, given the
// control plane's default rule def for Upstreams that set none (a def that
// is not set is every namespace). A client of no namespace ("") sees only
// what is exported to "*".
func (u *Upstream) VisibleTo(ns string, def Export) bool {
	return u.ExportOf(def).allows(ns, u.Key.Namespace)
}
