package server_test

import (
	"maps"
	"slices"
)

// modelWatch is the server's side of one type on one client's stream as
// the protocol and the cache promise it, in plain maps: what the client
// subscribes to, whether a response awaits its answer (the server sends
// one at a time per type and merges what changes meanwhile), and what
// changed since the last response.
type modelWatch struct {
	wildcard bool
	legacy   bool            // SotW: the first request named nothing, so naming nothing stays wildcard
	names    map[string]bool // subscribed by name, beside any wildcard
	first    bool            // not answered yet
	// reqVersion is the version a SotW stream's first request says the
	// client holds: an empty state at that version needs no response.
	reqVersion string
	awaiting   bool
	pendingAll bool            // the next response is the whole scope
	dirty      map[string]bool // changed in scope since the last response
	// initial is what a resumed Delta stream's client said it holds, by
	// name, until the name is next due: a name then at the version held
	// is not sent (content changed and changed back while a response
	// awaited its answer is nothing new to it).
	initial map[string]string
}

func (s *modelWatch) scope(name string) bool { return s.wildcard || s.names[name] }

// published marks what a publication changed for the client (what it
// reads, see modelWorld.publish) on the client's stream.
func (c *modelClient) published(changed [2][]string) {
	for typ, names := range changed {
		s := c.srv[typ]
		for _, n := range names {
			delete(c.stale[typ], n) // the server owes the client its new content
			c.moved[typ][n] = true
			if s != nil && s.scope(n) {
				s.dirty[n] = true
			}
		}
	}
	c.serverNext()
}

// serverNext is what the server sends now: for each type not awaiting an
// answer and with something changed, one response.
func (c *modelClient) serverNext() {
	for typ := range 2 {
		s := c.srv[typ]
		if s == nil || s.awaiting || (!s.pendingAll && len(s.dirty) == 0 && !s.first) {
			continue
		}
		r, ok := c.build(typ)
		s.pendingAll, s.first = false, false
		clear(s.dirty)
		if !ok {
			continue
		}
		s.awaiting = true
		r.typ, r.version = typ, c.w.version[c.view][typ]
		c.expect[typ] = append(c.expect[typ], r)
	}
}

// build is the response the server owes for typ, if any. SotW clusters
// are sent whole; SotW endpoints are sent as they change (a deletion is not
// sent: SotW has no word for it); Delta sends what changed and what was
// deleted (with the whole scope too, when it sends that), and answers its
// first request even when it has nothing.
func (c *modelClient) build(typ int) (*modelResponse, bool) {
	s, cur := c.srv[typ], c.cur(typ)
	r := &modelResponse{}
	whole := func() {
		for _, n := range slices.Sorted(maps.Keys(cur)) {
			if s.scope(n) {
				r.entries = append(r.entries, cur[n])
			}
		}
	}
	switch {
	case !c.delta && typ == mCDS:
		whole()
		if len(r.entries) == 0 && s.first && s.reqVersion == c.w.version[c.view][typ] {
			return nil, false
		}
		return r, true
	case s.pendingAll:
		whole()
	}
	for _, n := range slices.Sorted(maps.Keys(s.dirty)) {
		held, resumed := s.initial[n]
		settled := resumed && s.scope(n) && !s.pendingAll // due now: it stands no longer
		if settled {
			delete(s.initial, n)
		}
		switch e := cur[n]; {
		case !s.scope(n):
		case settled && e != nil && e.Version == held:
		case e == nil && c.delta:
			r.removed = append(r.removed, n)
		case e != nil && !s.pendingAll:
			r.entries = append(r.entries, e)
		}
	}
	return r, len(r.entries) > 0 || len(r.removed) > 0 || (c.delta && s.first)
}

// serverSotw is the server receiving a SotW request of typ. The test's
// requests always carry the last nonce the server sent (each step waits for
// what the server owes), so each answers the last response.
func (c *modelClient) serverSotw(typ int, names []string, version, nonce string) {
	star := slices.Contains(names, "*")
	explicit := map[string]bool{}
	for _, n := range names {
		if n != "*" {
			explicit[n] = true
		}
	}
	s := c.srv[typ]
	if s == nil {
		s = &modelWatch{first: true, pendingAll: true, reqVersion: version, legacy: typ == mCDS && len(names) == 0, dirty: map[string]bool{}}
		s.wildcard, s.names = star || s.legacy, explicit
		c.srv[typ] = s
		c.serverNext()
		return
	}
	s.awaiting = false
	wildcard := star || (s.legacy && len(explicit) == 0)
	switch {
	case wildcard && s.wildcard:
	case !wildcard && !s.wildcard && maps.Equal(explicit, s.names):
	case typ == mCDS || wildcard:
		s.pendingAll = true // the whole new scope
	case !s.wildcard:
		for n := range explicit {
			if !s.names[n] && c.cur(typ)[n] != nil {
				s.dirty[n] = true
			}
		}
	}
	s.wildcard, s.names = wildcard, explicit
	c.serverNext()
}

// serverDelta is the server receiving a Delta request of typ: the first
// one of the stream (with the versions a reconnecting client holds), a
// subscription change, or an answer (nonce set).
func (c *modelClient) serverDelta(typ int, sub, unsub []string, initial map[string]string, nonce string) {
	cur := c.cur(typ)
	s := c.srv[typ]
	if s == nil {
		s = &modelWatch{names: map[string]bool{}, dirty: map[string]bool{}, wildcard: len(sub) == 0}
		for _, n := range sub {
			if n == "*" {
				s.wildcard = true
			} else {
				s.names[n] = true
			}
		}
		c.srv[typ] = s
		if len(initial) == 0 {
			s.pendingAll, s.first = true, true
		} else {
			// what it lacks, holds at another version, or holds deleted;
			// answered even when that is nothing
			s.first = true
			s.initial = maps.Clone(initial)
			for n, v := range initial {
				if s.scope(n) && (cur[n] == nil || cur[n].Version != v) {
					s.dirty[n] = true
				}
			}
			for n := range cur {
				if _, held := initial[n]; !held && s.scope(n) {
					s.dirty[n] = true
				}
			}
		}
		c.serverNext()
		return
	}
	if nonce != "" {
		s.awaiting = false
	}
	if len(sub)+len(unsub) > 0 {
		was := &modelWatch{wildcard: s.wildcard, names: maps.Clone(s.names)}
		wildcard := (s.wildcard || slices.Contains(sub, "*")) && !slices.Contains(unsub, "*")
		for _, n := range sub {
			if n != "*" {
				s.names[n] = true
			}
		}
		for _, n := range unsub {
			delete(s.names, n)
		}
		if wildcard && !s.wildcard {
			s.pendingAll = true
		}
		if wildcard != s.wildcard {
			s.initial = nil
		}
		s.wildcard = wildcard
		for _, n := range unsub {
			delete(s.initial, n)
		}
		for n := range s.names {
			if !was.scope(n) {
				delete(s.initial, n) // owed whole: what it said it held no longer stands
				if cur[n] != nil {
					s.dirty[n] = true
				}
			}
		}
	}
	c.serverNext()
}
