package history

import "maps"

// Tracker follows, event by event, what each client holds, and how many
// hold what their class's observer holds: a scenario waits on it for the
// clients to converge without checking the whole history at each event.
type Tracker struct {
	clients   map[string]*clientState
	observers map[string]string // class → observer
	converged map[string]bool
	pending   map[string]map[[2]string]Event
}

// NewTracker follows clients; observers name each class's observer (one of
// the clients).
func NewTracker(clients []Client, observers map[string]string) *Tracker {
	t := &Tracker{clients: map[string]*clientState{}, observers: observers, converged: map[string]bool{}}
	for _, cl := range clients {
		t.clients[cl.ID] = &clientState{class: cl.Class, held: map[string]Contents{}, wildcard: map[string]bool{},
			names: map[string][]string{}, pending: map[[2]string]Event{}}
	}
	return t
}

// Add takes the next events.
func (t *Tracker) Add(events ...Event) {
	for _, e := range events {
		st, ok := t.clients[e.Client]
		if !ok {
			continue
		}
		switch e.Kind {
		case Response:
			st.pending[[2]string{e.Type, e.Nonce}] = e
			continue
		case NACK:
			delete(st.pending, [2]string{e.Type, e.Nonce})
			continue
		case ACK:
			k := [2]string{e.Type, e.Nonce}
			resp, ok := st.pending[k]
			if !ok {
				continue
			}
			delete(st.pending, k)
			st.asked(e)
			st.held[e.Type] = accept(st.held[e.Type], resp, e)
			st.wildcard[e.Type] = resp.Wildcard
		case Subscribe:
			st.asked(e)
			if held, ok := st.held[e.Type]; ok {
				st.held[e.Type] = subscribe(held, e)
			}
		default:
			continue
		}
		if t.observers[st.class] == e.Client {
			// the class's view moved: every client of it is judged again
			for id, other := range t.clients {
				if other.class == st.class {
					t.judge(id, other)
				}
			}
			continue
		}
		t.judge(e.Client, st)
	}
}

func (t *Tracker) judge(id string, st *clientState) {
	obs := t.clients[t.observers[st.class]]
	if obs == nil {
		return
	}
	if st.holdsView(obs.held) {
		t.converged[id] = true
	} else {
		delete(t.converged, id)
	}
}

// Converged is how many clients (observers included) hold what their
// class's observer holds.
func (t *Tracker) Converged() int { return len(t.converged) }

// Observed is what the class's observer holds now, by type (a copy).
func (t *Tracker) Observed(class string) View {
	obs := t.clients[t.observers[class]]
	if obs == nil {
		return nil
	}
	view := View{}
	for typ, res := range obs.held {
		view[typ] = maps.Clone(res)
	}
	return view
}
