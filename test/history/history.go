package history

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Hash identifies a resource's content: the SHA-256 of its serialized
// bytes (the Any's value, as it came over the wire).
type Hash [sha256.Size]byte

// HashOf is the Hash of a resource's bytes.
func HashOf(b []byte) Hash { return sha256.Sum256(b) }

// Contents are the resources of one type, by name.
type Contents map[string]Hash

// View is what one client class is published: per type URL, its resources.
type View map[string]Contents

// Publication is one revision of the truth as the plane published it: the
// view of each client class, and the version strings the replicas serve it
// under (each replica names a revision its own way). Revisions increase in
// the order of the History's Publications.
type Publication struct {
	Revision uint64
	Versions []string
	Views    map[string]View
	// At is when it was published: convergence is measured from the
	// latest one (or the heal, when later).
	At time.Time
	// Seen says, by class and type, which views the observer saw at this
	// very revision; the others are carried over from an earlier one, and
	// stand for this revision's only where the type did not change in
	// between: an observer still answering one response is sent the next
	// revision's content, and a revision in between is never seen. A
	// response carrying content a carried-over view lacks is not judged
	// (its revision's content is unknown). nil: every view was seen.
	Seen map[string]map[string]bool
}

// Kind is what an Event records.
type Kind int

const (
	// Response: the client received a response.
	Response Kind = iota
	// ACK and NACK: the client answered the response of Nonce.
	ACK
	NACK
	// Settled: the harness waited for what it did to reach the clients
	// (an event, not a time); every client must then rest on one
	// revision's view. It names no client.
	Settled
	// Subscribe: the client asked for the resources Names of Type without
	// answering a response (a first request, or names added or dropped);
	// with Delta, Removed are the names it dropped.
	Subscribe
)

func (k Kind) String() string {
	switch k {
	case Response:
		return "response"
	case ACK:
		return "ACK"
	case NACK:
		return "NACK"
	case Settled:
		return "settled"
	case Subscribe:
		return "subscribe"
	}
	return "unknown"
}

// Event is one message of one client's stream, in the order the client saw
// it; a History's events are in the order they happened over all clients.
type Event struct {
	Client  string
	Replica string // the replica the stream was connected to
	Kind    Kind
	Type    string // the type URL
	Nonce   string
	// Version is a response's version (SotW version_info, Delta
	// system_version_info).
	Version string
	// Delta: the response updates Resources and removes Removed; otherwise
	// Resources are the type's whole state (SotW).
	Delta     bool
	Resources Contents
	Removed   []string
	// Wildcard: the client asked for the type's every resource (CDS, LDS),
	// so the state it holds must be the view's whole set; otherwise it
	// named the resources it holds (EDS, RDS).
	Wildcard bool
	// Names are the resources a SotW request (Subscribe, ACK, NACK) asks
	// for by name, or a Delta request subscribes to; nil with a SotW
	// request for every resource.
	Names []string
	At    time.Time
}

// Client is one recorded client: its class (which view it is published)
// and its identity.
type Client struct {
	ID    string
	Class string
}

// History is a run: the clients, what was published, and what each client
// received and answered.
type History struct {
	Clients      []Client
	Publications []Publication
	Events       []Event
}

// FromObserver derives what was published for one class from an
// observer's record: a client of that class, connected where no fault
// reaches, that answered every response at once. Each response's version
// names the revision it belongs to (revisionOf reads it; false: not a
// version of the plane); the view of a revision is, per type, what the
// observer last accepted at or before it. The publications are in
// revision order; a type's responses the observer never saw (two
// revisions within one of its round trips) are missing from them, and the
// checker then names those revisions' versions as unpublished.
func FromObserver(events []Event, observer, class string, revisionOf func(version string) (uint64, bool)) ([]Publication, error) {
	type accepted struct {
		rev     uint64
		version string
		typ     string
		state   Contents
		at      time.Time
	}
	var seq []accepted
	held := map[string]Contents{}
	pending := map[[2]string]Event{}
	for _, e := range events {
		if e.Client != observer {
			continue
		}
		switch e.Kind {
		case Response:
			pending[[2]string{e.Type, e.Nonce}] = e
		case Subscribe:
			held[e.Type] = subscribe(held[e.Type], e)
		case NACK:
			return nil, fmt.Errorf("observer %s NACKed %s version %s: it must accept everything", observer, e.Type, pending[[2]string{e.Type, e.Nonce}].Version)
		case ACK:
			resp, ok := pending[[2]string{e.Type, e.Nonce}]
			if !ok {
				continue
			}
			delete(pending, [2]string{e.Type, e.Nonce})
			rev, ok := revisionOf(resp.Version)
			if !ok {
				return nil, fmt.Errorf("observer %s: version %q names no revision", observer, resp.Version)
			}
			next := accept(held[e.Type], resp, e)
			held[e.Type] = next
			seq = append(seq, accepted{rev: rev, version: resp.Version, typ: e.Type, state: next, at: resp.At})
		}
	}
	// revisions in order; per revision the last accepted state of each
	// type at or before it
	byRev := map[uint64][]accepted{}
	for _, a := range seq {
		byRev[a.rev] = append(byRev[a.rev], a)
	}
	revs := slices.Sorted(maps.Keys(byRev))
	view := View{}
	var out []Publication
	for _, r := range revs {
		p := Publication{Revision: r, Views: map[string]View{}, Seen: map[string]map[string]bool{class: {}}}
		for _, a := range byRev[r] {
			view[a.typ] = a.state
			p.Seen[class][a.typ] = true
			if !slices.Contains(p.Versions, a.version) {
				p.Versions = append(p.Versions, a.version)
			}
			if a.at.After(p.At) {
				p.At = a.at
			}
		}
		p.Views[class] = maps.Clone(view)
		out = append(out, p)
	}
	return out, nil
}

// Merge joins the publications of several classes (FromObserver of each)
// into one list: a revision one class saw and another did not gets the
// other's view as of its latest revision before it.
func Merge(lists ...[]Publication) []Publication {
	byRev := map[uint64]*Publication{}
	for _, l := range lists {
		for _, p := range l {
			q, ok := byRev[p.Revision]
			if !ok {
				q = &Publication{Revision: p.Revision, Views: map[string]View{}, Seen: map[string]map[string]bool{}}
				byRev[p.Revision] = q
			}
			for class := range p.Views {
				if p.Seen == nil {
					q.Seen[class] = nil // every view seen
				} else {
					q.Seen[class] = p.Seen[class]
				}
			}
			for _, v := range p.Versions {
				if !slices.Contains(q.Versions, v) {
					q.Versions = append(q.Versions, v)
				}
			}
			maps.Copy(q.Views, p.Views)
			if p.At.After(q.At) {
				q.At = p.At
			}
		}
	}
	revs := slices.Sorted(maps.Keys(byRev))
	out := make([]Publication, 0, len(revs))
	last := map[string]View{}
	for _, r := range revs {
		p := byRev[r]
		for class, v := range last {
			if _, ok := p.Views[class]; !ok {
				p.Views[class] = v
			}
		}
		maps.Copy(last, p.Views)
		out = append(out, *p)
	}
	return out
}

// accept is what a client holds of a type once it has ACKed resp: a SotW
// response to a request for the whole type is the type's state; any other
// updates the resources it names (a SotW response for EDS or RDS need not
// repeat the unchanged ones) and a Delta one removes its Removed; then
// what the ACK no longer asks for by name is dropped.
func accept(before Contents, resp, ack Event) Contents {
	next := Contents{}
	if resp.Delta || !resp.Wildcard {
		maps.Copy(next, before)
	}
	for _, n := range resp.Removed {
		delete(next, n)
	}
	maps.Copy(next, resp.Resources)
	if !resp.Delta && !resp.Wildcard && ack.Names != nil {
		keepOnly(next, ack.Names)
	}
	return next
}

// subscribe is what a client holds of a type after a request that answers
// no response: resources it stopped asking for by name are gone.
func subscribe(held Contents, e Event) Contents {
	if held == nil {
		return nil
	}
	next := maps.Clone(held)
	if e.Delta {
		for _, n := range e.Removed {
			delete(next, n)
		}
		return next
	}
	if e.Names != nil {
		keepOnly(next, e.Names)
	}
	return next
}

func keepOnly(c Contents, names []string) {
	for n := range c {
		if !slices.Contains(names, n) {
			delete(c, n)
		}
	}
}
