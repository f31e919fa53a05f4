package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Rule is a line of the resilience contract (docs/resilience.md) a
// violation breaks.
type Rule int

const (
	// Coherent: at the end of each round a client holds, resource by
	// resource, what one revision published for its class; every resource
	// it is sent is that revision's.
	Coherent Rule = 1 + iota
	// Monotonic: per client and resource, what it ACKs never goes back to
	// an older revision's content.
	Monotonic
	// Converges: every client that stays holds the latest revision's view,
	// within the bound after the heal.
	Converges
	// LastGoodKept: a replica never serves a client a type at an older
	// revision than it served that client before.
	LastGoodKept
	// Tenancy: no client is sent a resource its class is not published.
	Tenancy
)

func (r Rule) String() string {
	switch r {
	case Coherent:
		return "coherent"
	case Monotonic:
		return "monotonic"
	case Converges:
		return "converges"
	case LastGoodKept:
		return "last-good-kept"
	case Tenancy:
		return "tenancy"
	}
	return fmt.Sprintf("rule-%d", int(r))
}

// Violation is one breach of a rule, with what it involves.
type Violation struct {
	Rule     Rule
	Client   string
	Replica  string
	Type     string
	Resource string
	// Revisions are the two revisions involved (the one held before and
	// the one after, or the one expected and the one found), when two are.
	Revisions [2]uint64
	Detail    string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: client %s", v.Rule, v.Client)
	if v.Replica != "" {
		fmt.Fprintf(&b, " (replica %s)", v.Replica)
	}
	if v.Type != "" {
		fmt.Fprintf(&b, ", %s", shortType(v.Type))
	}
	if v.Resource != "" {
		fmt.Fprintf(&b, " %s", v.Resource)
	}
	if v.Revisions != [2]uint64{} {
		fmt.Fprintf(&b, ", revisions %d and %d", v.Revisions[0], v.Revisions[1])
	}
	return b.String() + ": " + v.Detail
}

func shortType(url string) string { return url[strings.LastIndexByte(url, '.')+1:] }

// Options are the checker's bounds.
type Options struct {
	// HealedAt is when the last fault healed: convergence is measured from
	// it, or from the latest publication when that is later.
	HealedAt time.Time
	// ConvergeWithin bounds that time; 0 measures it without a bound.
	ConvergeWithin time.Duration
	// Left are the clients that left before the end, held to every rule but
	// convergence.
	Left []string
	// MatchContent judges each response by the revisions whose view of the
	// client's class has all it carries, not by its version: for replicas
	// that number their revisions each their own way, against publications
	// observed on one of them.
	MatchContent bool
	// RevisionOf, when set, reads a version's revision (ordered as the
	// publications' are): a response of a version no publication has, whose
	// revision lies between two publications', is of a revision no observer
	// saw (they were answering the one before and were sent the next), and
	// is judged only at rest, as content of a type an observer did not see.
	RevisionOf func(version string) (uint64, bool)
}

// Result is what Check found: the violations, and per client the time it
// took to hold the latest view.
type Result struct {
	Violations []Violation
	Converged  map[string]time.Duration
	// Slowest is the longest of Converged.
	Slowest time.Duration
}

// contentKey is one resource's content in one class.
type contentKey struct {
	class, typ, name string
	hash             Hash
}

type span struct{ first, last int } // publication indexes

type clientState struct {
	class    string
	held     map[string]Contents // by type, what the client ACKed
	wildcard map[string]bool
	names    map[string][]string // by type, the names last asked for (SotW by name, Delta)
	pending  map[[2]string]Event // by type and nonce: responses not yet answered
	reached  time.Time           // when the held state last changed
}

type checker struct {
	h         History
	o         Options
	byVersion map[string]int
	spans     map[contentKey]span
	out       []Violation
}

// Check verifies every rule over h.
func Check(h History, o Options) Result {
	c := &checker{h: h, o: o, byVersion: map[string]int{}, spans: map[contentKey]span{}}
	for i, p := range h.Publications {
		for _, v := range p.Versions {
			c.byVersion[v] = i
		}
		for class, view := range p.Views {
			for typ, res := range view {
				for name, hash := range res {
					k := contentKey{class, typ, name, hash}
					s, ok := c.spans[k]
					if !ok {
						s.first = i
					}
					s.last = i
					c.spans[k] = s
				}
			}
		}
	}
	clients := map[string]*clientState{}
	for _, cl := range h.Clients {
		clients[cl.ID] = &clientState{class: cl.Class, held: map[string]Contents{}, wildcard: map[string]bool{}, names: map[string][]string{},
			pending: map[[2]string]Event{}}
	}
	// per replica, client and type, the newest publication it served: a
	// type's version names the revision that last changed it, so types
	// differ; streams of different clients are sent concurrently, so a
	// response built a moment before a publication may reach one client
	// after another client had the new one: the order that counts is each
	// client's own
	served := map[[3]string]int{}
	for _, e := range h.Events {
		if e.Kind == Settled {
			c.settled(h.Clients, clients, o.Left)
			continue
		}
		st, ok := clients[e.Client]
		if !ok {
			c.add(Violation{Rule: Coherent, Client: e.Client, Detail: "an event of a client the history does not list"})
			continue
		}
		switch e.Kind {
		case Response:
			c.response(st, e, served)
		case ACK:
			c.ack(st, e)
		case NACK:
			delete(st.pending, [2]string{e.Type, e.Nonce})
		case Subscribe:
			st.asked(e)
			if held, ok := st.held[e.Type]; ok {
				next := subscribe(held, e)
				if !maps.Equal(held, next) {
					st.reached = e.At
				}
				st.held[e.Type] = next
			}
		}
	}
	res := Result{Converged: map[string]time.Duration{}}
	latest := len(h.Publications) - 1
	start := o.HealedAt
	if latest >= 0 && h.Publications[latest].At.After(start) {
		start = h.Publications[latest].At
	}
	for _, cl := range h.Clients {
		st := clients[cl.ID]
		if len(st.held) > 0 && c.coherentAt(st) < 0 {
			c.add(Violation{Rule: Coherent, Client: cl.ID, Detail: "at the end it holds a mix that no revision published: " + c.describe(st)})
		}
		if slices.Contains(o.Left, cl.ID) || latest < 0 {
			continue
		}
		if len(st.held) == 0 {
			c.add(Violation{Rule: Converges, Client: cl.ID, Revisions: [2]uint64{0, h.Publications[latest].Revision},
				Detail: "it never received anything"})
			continue
		}
		if !c.holds(st, latest) {
			c.add(Violation{Rule: Converges, Client: cl.ID, Revisions: [2]uint64{0, h.Publications[latest].Revision},
				Detail: "it never held the latest revision's view: " + c.describe(st)})
			continue
		}
		d := max(st.reached.Sub(start), 0)
		res.Converged[cl.ID] = d
		res.Slowest = max(res.Slowest, d)
		if o.ConvergeWithin > 0 && d > o.ConvergeWithin {
			c.add(Violation{Rule: Converges, Client: cl.ID, Revisions: [2]uint64{0, h.Publications[latest].Revision},
				Detail: fmt.Sprintf("it held the latest revision's view %v after the heal, past the bound of %v", d, o.ConvergeWithin)})
		}
	}
	res.Violations = c.out
	return res
}

func (c *checker) add(v Violation) { c.out = append(c.out, v) }

// settled holds every client that has answered all it was sent to one
// revision's view: in between rounds, make-before-break may mix revisions;
// at rest nothing may.
func (c *checker) settled(list []Client, clients map[string]*clientState, left []string) {
	for _, cl := range list {
		st := clients[cl.ID]
		if len(st.held) == 0 || len(st.pending) > 0 || slices.Contains(left, cl.ID) {
			continue
		}
		if c.coherentAt(st) < 0 {
			c.add(Violation{Rule: Coherent, Client: cl.ID, Detail: "settled on a mix that no revision published: " + c.describe(st)})
		}
	}
}

func (c *checker) response(st *clientState, e Event, served map[[3]string]int) {
	if c.o.MatchContent {
		c.responseByContent(st, e, served)
		st.pending[[2]string{e.Type, e.Nonce}] = e
		return
	}
	i, ok := c.byVersion[e.Version]
	if !ok {
		if !c.unseenRevision(e.Version) {
			c.add(Violation{Rule: Coherent, Client: e.Client, Replica: e.Replica, Type: e.Type,
				Detail: fmt.Sprintf("a response of version %q, which no publication has", e.Version)})
		}
		st.pending[[2]string{e.Type, e.Nonce}] = e
		return
	}
	pub := c.h.Publications[i]
	at := [3]string{e.Replica, e.Client, e.Type}
	if last, ok := served[at]; ok && last > i {
		c.add(Violation{Rule: LastGoodKept, Client: e.Client, Replica: e.Replica, Type: e.Type,
			Revisions: [2]uint64{c.h.Publications[last].Revision, pub.Revision},
			Detail:    "the replica served an older revision than one it had served"})
	} else {
		served[at] = i
	}
	seen := pub.seen(st.class, e.Type)
	for _, name := range slices.Sorted(maps.Keys(e.Resources)) {
		hash := e.Resources[name]
		want, ok := pub.Views[st.class][e.Type][name]
		switch {
		case !seen && (ok || c.classEverHas(st.class, e.Type, name)):
			// the observer did not see this type at this revision: its
			// content here is unknown, and judged only at rest
		case !ok && c.otherClassHas(pub, st.class, e.Type, name):
			c.add(Violation{Rule: Tenancy, Client: e.Client, Replica: e.Replica, Type: e.Type, Resource: name,
				Revisions: [2]uint64{pub.Revision, pub.Revision},
				Detail:    fmt.Sprintf("sent a resource that revision %d publishes to other classes only, not to class %q", pub.Revision, st.class)})
		case !ok:
			c.add(Violation{Rule: Coherent, Client: e.Client, Replica: e.Replica, Type: e.Type, Resource: name,
				Detail: fmt.Sprintf("sent a resource that revision %d does not have", pub.Revision)})
		case want != hash:
			c.add(Violation{Rule: Coherent, Client: e.Client, Replica: e.Replica, Type: e.Type, Resource: name,
				Detail: fmt.Sprintf("sent under revision %d's version content that revision does not have", pub.Revision)})
		}
	}
	st.pending[[2]string{e.Type, e.Nonce}] = e
}

// responseByContent judges a response by what it carries, not by its
// version: the revisions that had all of it for the client's class. Replicas
// that number their revisions each their own way (a client class joining
// is a revision of the replica it joins) are judged against one timeline.
func (c *checker) responseByContent(st *clientState, e Event, served map[[3]string]int) {
	if len(e.Resources) == 0 {
		return
	}
	lo, hi := 0, len(c.h.Publications)-1
	for _, name := range slices.Sorted(maps.Keys(e.Resources)) {
		sp, ok := c.spans[contentKey{st.class, e.Type, name, e.Resources[name]}]
		if !ok {
			latest := c.h.Publications[len(c.h.Publications)-1]
			if !c.classEverHas(st.class, e.Type, name) && c.otherClassHas(latest, st.class, e.Type, name) {
				c.add(Violation{Rule: Tenancy, Client: e.Client, Replica: e.Replica, Type: e.Type, Resource: name,
					Detail: fmt.Sprintf("sent a resource published to other classes only, never to class %q", st.class)})
			} else {
				c.add(Violation{Rule: Coherent, Client: e.Client, Replica: e.Replica, Type: e.Type, Resource: name,
					Detail: "sent content that no revision published to its class"})
			}
			return
		}
		lo, hi = max(lo, sp.first), min(hi, sp.last)
	}
	i := -1
	for j := lo; j <= hi; j++ {
		if c.carries(c.h.Publications[j].Views[st.class][e.Type], e.Resources) {
			i = j
			break
		}
	}
	if i < 0 {
		c.add(Violation{Rule: Coherent, Client: e.Client, Replica: e.Replica, Type: e.Type,
			Detail: "a response whose resources no one revision published together"})
		return
	}
	at := [3]string{e.Replica, e.Client, e.Type}
	if first, ok := served[at]; ok && hi < first {
		c.add(Violation{Rule: LastGoodKept, Client: e.Client, Replica: e.Replica, Type: e.Type,
			Revisions: [2]uint64{c.h.Publications[first].Revision, c.h.Publications[hi].Revision},
			Detail:    "the replica served content only revisions older than what it had served had"})
		return
	}
	served[at] = max(served[at], i)
}

// unseenRevision reports whether version names a revision between two
// publications (see Options.RevisionOf).
func (c *checker) unseenRevision(version string) bool {
	if c.o.RevisionOf == nil {
		return false
	}
	rev, ok := c.o.RevisionOf(version)
	if !ok {
		return false
	}
	before, after := false, false
	for _, p := range c.h.Publications {
		before = before || p.Revision < rev
		after = after || p.Revision > rev
	}
	return before && after
}

// seen reports whether the observer of class saw typ at p's revision
// itself (see Publication.Seen).
func (p Publication) seen(class, typ string) bool {
	if p.Seen == nil {
		return true
	}
	types, ok := p.Seen[class]
	if !ok {
		return false // carried over whole from an earlier revision
	}
	return types == nil || types[typ]
}

// carries reports whether view has every resource of res as res has it.
func (c *checker) carries(view Contents, res Contents) bool {
	for n, h := range res {
		if w, ok := view[n]; !ok || w != h {
			return false
		}
	}
	return true
}

func (c *checker) classEverHas(class, typ, name string) bool {
	for _, p := range c.h.Publications {
		if _, ok := p.Views[class][typ][name]; ok {
			return true
		}
	}
	return false
}

func (c *checker) otherClassHas(pub Publication, class, typ, name string) bool {
	for other, view := range pub.Views {
		if _, ok := view[typ][name]; ok && other != class {
			return true
		}
	}
	return false
}

func (c *checker) ack(st *clientState, e Event) {
	k := [2]string{e.Type, e.Nonce}
	resp, ok := st.pending[k]
	if !ok {
		return // an ACK of a response not recorded: nothing it holds changes
	}
	delete(st.pending, k)
	st.asked(e)
	before := st.held[e.Type]
	next := accept(before, resp, e)
	for _, name := range slices.Sorted(maps.Keys(next)) {
		h0, had := before[name]
		h1 := next[name]
		if !had || h0 == h1 {
			continue
		}
		old, okOld := c.spans[contentKey{st.class, e.Type, name, h0}]
		now, okNow := c.spans[contentKey{st.class, e.Type, name, h1}]
		if okOld && okNow && now.last < old.first {
			c.add(Violation{Rule: Monotonic, Client: e.Client, Replica: resp.Replica, Type: e.Type, Resource: name,
				Revisions: [2]uint64{c.h.Publications[old.first].Revision, c.h.Publications[now.last].Revision},
				Detail:    "ACKed content that only revisions older than the content it held had"})
		}
	}
	if !maps.Equal(before, next) || st.wildcard[e.Type] != resp.Wildcard {
		st.reached = e.At
	}
	st.held[e.Type] = next
	st.wildcard[e.Type] = resp.Wildcard
}

// coherentAt is a publication whose view for the client's class is what
// it holds, or -1: the candidates are the revisions every held resource's
// content was published in, each then checked whole.
func (c *checker) coherentAt(st *clientState) int {
	lo, hi := 0, len(c.h.Publications)-1
	for typ, res := range st.held {
		for name, hash := range res {
			s, ok := c.spans[contentKey{st.class, typ, name, hash}]
			if !ok {
				return -1
			}
			lo, hi = max(lo, s.first), min(hi, s.last)
		}
	}
	for i := lo; i <= hi; i++ {
		if c.holds(st, i) {
			return i
		}
	}
	return -1
}

// holds reports whether the client holds publication i's view: each
// resource as published, and for a type it asked for whole, no more and no
// fewer.
func (c *checker) holds(st *clientState, i int) bool {
	return st.holdsView(c.h.Publications[i].Views[st.class])
}

// holdsView reports whether the client holds view: each resource as the
// view has it, and for a type it asked for whole, no more and no fewer.
func (st *clientState) holdsView(view View) bool {
	if len(st.held) == 0 {
		return false
	}
	for typ, res := range st.held {
		want := view[typ]
		if st.wildcard[typ] && len(want) != len(res) {
			return false
		}
		for name, hash := range res {
			if w, ok := want[name]; !ok || w != hash {
				return false
			}
		}
	}
	for typ, names := range st.names {
		// a resource asked for by name and published must be held
		if _, ok := st.held[typ]; !ok || st.wildcard[typ] {
			continue
		}
		for _, n := range names {
			if w, ok := view[typ][n]; ok && st.held[typ][n] != w {
				return false
			}
		}
	}
	return true // a type the client never received is not part of what it holds
}

// asked notes the names a request asks for by name.
func (st *clientState) asked(e Event) {
	switch {
	case e.Delta && e.Kind == Subscribe:
		names := slices.DeleteFunc(append(slices.Clone(st.names[e.Type]), e.Names...), func(n string) bool { return slices.Contains(e.Removed, n) })
		slices.Sort(names)
		st.names[e.Type] = slices.Compact(names)
	case !e.Delta && e.Names != nil:
		st.names[e.Type] = e.Names
	}
}

func (c *checker) describe(st *clientState) string {
	var parts []string
	for _, typ := range slices.Sorted(maps.Keys(st.held)) {
		res := st.held[typ]
		var names []string
		for _, n := range slices.Sorted(maps.Keys(res)) {
			where := "unpublished"
			if s, ok := c.spans[contentKey{st.class, typ, n, res[n]}]; ok {
				where = fmt.Sprintf("r%d..r%d", c.h.Publications[s.first].Revision, c.h.Publications[s.last].Revision)
			}
			names = append(names, n+"@"+where)
			if len(names) == 5 {
				names = append(names, fmt.Sprintf("and %d more", len(res)-5))
				break
			}
		}
		parts = append(parts, shortType(typ)+" {"+strings.Join(names, ", ")+"}")
	}
	return strings.Join(parts, "; ")
}
