package xdscache

// Withheld is what one stream asks for and is not sent, and why, for people
// (/debug/clients): the names it subscribes to whose resource exists but its
// audience may not read (Hidden), the names of which nothing is published in
// its view (Unpublished: not hidden, simply absent), and, for each type it
// subscribes to with a wildcard, how many resources of the type its audience
// may not read. Names are in type order (xdstype's), then by name.
type Withheld struct {
	Hidden []WithheldName
	// HiddenMore counts the hidden names left out by the limit.
	HiddenMore      int
	Unpublished     []WithheldName
	UnpublishedMore int
	// Wildcard has a count for each type the stream subscribes to with a
	// wildcard of which some resource is withheld from it, in type order.
	Wildcard []WithheldCount
}

// WithheldName is one name a stream subscribes to and is not sent.
type WithheldName struct {
	TypeURL string
	Name    string
	// Visible is who may read the resource; the zero value for an
	// unpublished name.
	Visible Visibility
}

// WithheldCount is how many resources of a type a wildcard stream may not
// read.
type WithheldCount struct {
	TypeURL string
	Count   int
}

// Empty reports whether nothing is withheld.
func (w Withheld) Empty() bool {
	return len(w.Hidden) == 0 && w.HiddenMore == 0 && len(w.Unpublished) == 0 && w.UnpublishedMore == 0 && len(w.Wildcard) == 0
}

// Withheld lists what the stream subscribes to and is not sent, at most
// limit names of each kind (hidden, unpublished) with a count of the rest.
// It reads the stream's current watches and the cache's current resources
// under one hold of the cache's lock and changes nothing; its cost is the
// stream's subscribed names, plus, for a wildcard type whose audience's
// visible list is not built, the type's resources. It is for the admin
// port, never called on the send path. A closed stream withholds nothing.
func (s *Stream) Withheld(limit int) Withheld {
	limit = max(limit, 0)
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	var out Withheld
	if s.closed {
		return out
	}
	for _, w := range s.watches {
		if w == nil {
			continue
		}
		ts := w.ts
		if w.wildcard {
			if n := ts.hiddenFrom(w.g); n > 0 {
				out.Wildcard = append(out.Wildcard, WithheldCount{TypeURL: ts.typeURL, Count: n})
			}
		}
		// what it names: a wildcard Delta watch's names too, which stay
		// subscribed when it leaves the wildcard
		for _, name := range w.deltaNames() {
			e := ts.resources[name]
			switch {
			case e == nil:
				if len(out.Unpublished) < limit {
					out.Unpublished = append(out.Unpublished, WithheldName{TypeURL: ts.typeURL, Name: name})
				} else {
					out.UnpublishedMore++
				}
			case w.get(name) == nil: // neither the base nor an audience variant is its
				if len(out.Hidden) < limit {
					out.Hidden = append(out.Hidden, WithheldName{TypeURL: ts.typeURL, Name: name, Visible: e.Visible})
				} else {
					out.HiddenMore++
				}
			}
		}
	}
	return out
}

// hiddenFrom counts the resources of the type g's audience may not read:
// none while none is restricted, else what g's visible list (when it is of
// the current resources) leaves out, else a scan.
func (ts *typeState) hiddenFrom(g *group) int {
	if ts.restricted == 0 {
		return 0
	}
	if g.visibleGen == ts.gen {
		return len(ts.resources) - len(g.visible)
	}
	n := 0
	for name := range ts.resources {
		if ts.get(name, "", g.aud) == nil {
			n++
		}
	}
	return n
}
