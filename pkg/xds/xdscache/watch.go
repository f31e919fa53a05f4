package xdscache

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"poise.dev/poise/pkg/xds/xdstype"
)

// Stream is the cache's side of one client stream (SotW or Delta): one
// watch per type, what is pending for each, and a signal to the goroutine
// that sends. It knows nothing of gRPC: the server feeds it requests and
// sends what Next returns.
//
// Flow control follows the protocol: a watch has at most one response
// awaiting the client's ACK or NACK; changes that arrive meanwhile are
// merged into its pending names and sent together once it answers. A
// NACKed response is not re-sent: nothing of it stays pending, so the same
// content is sent again only when it changes.
type Stream struct {
	c       *Cache
	delta   bool
	view    int
	viewSet bool
	// zone is the client's zone (see ZoneKey), admitted to the census, or ""
	// (no locality, or overflow): the stream is sent its zone's variants.
	zone     string
	aud      Audience // what the client may read, as its identity proves; fixed for its life
	admitted Admission
	demand   uint64 // what the stream counts for in Demand: weigh of its node, else 1
	watches  [xdstype.Count]*Watch
	wakeCh   chan struct{}
	queued   atomic.Bool // counted in the cache's backlog: woken, not yet served
	epoch    uint64      // the Apply that last queued this stream for waking
	nonce    uint64
	closed   bool
	conn     uint64 // the connection the stream is on (SetConnection), to wake its streams together

	// weigh reads the demand weight of the stream's node (WeighDemand);
	// instance is the workload instance it is of, counted once in Demand
	// ("": on its own).
	weigh    func(*core.Node) uint64
	instance string

	// placed is the class Place put the stream in, whatever its node
	// claims (isPlaced: Place was called).
	placed   string
	isPlaced bool
}

// Watch is one stream's subscription to one type.
type Watch struct {
	stream   *Stream
	ts       *typeState
	g        *group // the watches of the stream's zone, for the whole life of w
	wildcard bool
	legacy   bool    // SotW: the first request named nothing, so an empty list means everything
	subset   *subset // the names subscribed, shared with other watches; nil when wildcard
	reqHash  uint64  // SotW: hash of the last request's names, in order

	// named is what a wildcard Delta watch also subscribes to by name: the
	// names stay subscribed when the client unsubscribes from "*".
	named []string

	pending    []string // names changed since the last response; may repeat until compacted
	compacted  int
	pendingAll bool

	first bool // never answered
	// initial is what a resuming Delta client said it holds
	// (initial_resource_versions), by name, until each name is next due:
	// a name whose resource then has the version held is not sent. A
	// client may resume before the first publication (a replica
	// restarting under its clients): what it holds is then compared with
	// what is published when it is.
	initial    map[string]string
	reqVersion string // SotW: the version the opening request said it holds
	reqNACK    bool
	awaiting   bool   // a response is out and neither ACKed nor NACKed
	nonce      string // of the last response
}

// NewStream opens a stream of an anonymous client; delta says which
// protocol it speaks.
func (c *Cache) NewStream(delta bool) *Stream { return c.NewStreamFor(delta, Anonymous) }

// NewStreamFor opens a stream of a client of audience aud: it is sent only
// what aud may read, and to it nothing else exists.
func (c *Cache) NewStreamFor(delta bool, aud Audience) *Stream {
	return &Stream{c: c, delta: delta, aud: aud, view: c.viewOf(nil), wakeCh: make(chan struct{}, 1)}
}

// SetConnection says which connection the stream is on (any key equal for
// the streams of one connection and unlikely to be equal for two), before
// its first request: the streams of one connection are then woken together.
func (s *Stream) SetConnection(key uint64) { s.conn = key }

// Audience is the audience the stream was opened for.
func (s *Stream) Audience() Audience { return s.aud }

// Seed is the seed of the hash the server computes over a SotW request's
// resource names (see SotwRequest.NamesHash and HashNames).
func (c *Cache) Seed() maphash.Seed { return c.seed }

// HashNames hashes names in order as SotwRequest.NamesHash wants.
func (c *Cache) HashNames(names []string) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, n := range names {
		writeName(&h, n)
	}
	return h.Sum64()
}

// writeName hashes one name as it is encoded on the wire in a
// DiscoveryRequest (field 3, length-delimited), so a server can hash the
// raw bytes of a request without decoding its names.
func writeName(h *maphash.Hash, n string) {
	var buf [16]byte
	b := protowire.AppendTag(buf[:0], 3, protowire.BytesType)
	_, _ = h.Write(protowire.AppendVarint(b, uint64(len(n))))
	_, _ = h.WriteString(n)
}

// Wake is signalled when the stream may have something to send.
func (s *Stream) Wake() <-chan struct{} { return s.wakeCh }

// Interrupt wakes the stream's sender with nothing new to send, when what
// it serves is ending: a sender then waits on Wake alone, which costs less
// per response than a select of Wake and its context.
func (s *Stream) Interrupt() {
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// signal counts the stream among those waiting to be served and wakes it.
func (s *Stream) signal() {
	s.queue()
	s.Interrupt()
}

// SetNode chooses the stream's view and zone from the first node it sees,
// before its first watch (the zone where Place put it, else the node's), and
// counts the stream in its zone's census.
func (s *Stream) SetNode(n *core.Node) {
	if n == nil {
		return
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if !s.viewSet && !s.closed && s.watches == [xdstype.Count]*Watch{} {
		s.view, s.viewSet = s.c.viewOf(n), true
		s.demand = 1
		if s.weigh != nil {
			s.demand = s.weigh(n)
		}
		s.zone, s.admitted = s.c.zones.admit(s.view, s.classKey(n))
		if s.instance != "" {
			s.c.zones.joinInstance(s.instance)
		}
	}
}

// Class is the class the stream is sent the variants of ("" for none),
// how its claim was admitted, and its demand weight.
func (s *Stream) Class() (class string, how Admission, demand uint64) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.zone, s.admitted, s.demand
}

// Zone is the zone the stream is sent variants of ("" for none).
func (s *Stream) Zone() string {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.zone
}

// Close drops every watch of the stream and uncounts it.
func (s *Stream) Close() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.closed {
		return
	}
	for i, w := range s.watches {
		if w != nil {
			w.unregister()
			s.watches[i] = nil
		}
	}
	s.c.zones.leave(s.view, s.zone, s.admitted)
	if s.viewSet && s.instance != "" {
		s.c.zones.leaveInstance(s.instance)
	}
	s.unqueue()
	s.closed = true
}

// newWatch makes the stream's watch of type t, in the group of its zone
// and audience.
func (s *Stream) newWatch(t int) *Watch {
	ts := s.c.views[s.view].types[t]
	g := ts.groupFor(s.zone, s.aud)
	g.watches++
	w := &Watch{stream: s, ts: ts, g: g}
	s.watches[t] = w
	return w
}

func (w *Watch) unregister() {
	g := w.g
	if w.wildcard {
		delete(g.wildcard, w)
		g.wildcardDemand -= w.stream.demand
	}
	g.release(w)
	if g.watches--; g.watches == 0 {
		auds := w.ts.zones[g.zone]
		delete(auds, g.aud)
		if len(auds) == 0 {
			delete(w.ts.zones, g.zone)
		}
	}
}

// get is the resource w is sent for name (its zone's variant, or the
// base), or nil when there is none its audience may read.
func (w *Watch) get(name string) *Entry { return w.ts.get(name, w.g.zone, w.g.aud) }

// mark adds name to what w must be sent.
func (w *Watch) mark(name string) {
	if w.pendingAll && !w.stream.delta {
		return // the whole scope goes; a Delta one still needs the removals
	}
	w.pending = append(w.pending, name)
	if n := len(w.pending); n > 64 && n > 2*w.compacted {
		slices.Sort(w.pending)
		w.pending = slices.Compact(w.pending)
		w.compacted = len(w.pending)
	}
}

func (w *Watch) hasPending() bool { return w.pendingAll || len(w.pending) > 0 || w.first }

// behind: the last response waits for the client's answer, or a change in
// w's scope waits to be sent (TypeSync.Behind).
func (w *Watch) behind() bool { return w.awaiting || (w.ts.version != "" && w.hasPending()) }

// inScope reports whether w subscribes to name.
func (w *Watch) inScope(name string) bool {
	if w.wildcard {
		return true
	}
	if w.subset == nil {
		return false
	}
	_, ok := slices.BinarySearch(w.subset.names, name)
	return ok
}

// scopeNames is what w subscribes to when not wildcard.
func (w *Watch) scopeNames() []string {
	if w.subset == nil {
		return nil
	}
	return w.subset.names
}

// deltaNames is what a Delta watch subscribes to by name, wildcard or not.
func (w *Watch) deltaNames() []string {
	if w.wildcard {
		return w.named
	}
	return w.scopeNames()
}

// setDeltaScope is setScope for Delta, which keeps the names of a wildcard
// watch: subscribing to "*" and then unsubscribing from it leaves the
// client subscribed to what it named.
func (c *Cache) setDeltaScope(w *Watch, wildcard bool, names []string) (added []string, changed bool) {
	added, changed = c.setScope(w, wildcard, names)
	w.named = nil
	if w.wildcard {
		w.named = names
	}
	return added, changed
}

// setScope makes w wildcard or subscribe to names (sorted, unique, without
// "*"), and returns the names newly in scope when it stays non-wildcard.
func (c *Cache) setScope(w *Watch, wildcard bool, names []string) (added []string, changed bool) {
	g := w.g
	if wildcard {
		if w.wildcard {
			return nil, false
		}
		g.release(w)
		w.wildcard = true
		g.wildcard[w] = struct{}{}
		g.wildcardDemand += w.stream.demand
		c.demandMoved(w)
		return nil, true
	}
	old := w.scopeNames()
	wasWildcard := w.wildcard
	if !wasWildcard && slices.Equal(old, names) {
		return nil, false
	}
	ss := c.intern(g, names)
	if wasWildcard {
		delete(g.wildcard, w)
		g.wildcardDemand -= w.stream.demand
		w.wildcard = false
	}
	if w.subset != ss {
		g.release(w)
		w.subset = ss
		ss.members[w] = struct{}{}
		ss.demand += w.stream.demand
	}
	c.demandMoved(w)
	if wasWildcard {
		return nil, true // everything it can hold is already in scope
	}
	added = c.scope[:0]
	i := 0
	for _, n := range ss.names {
		for i < len(old) && old[i] < n {
			i++
		}
		if i < len(old) && old[i] == n {
			continue
		}
		added = append(added, n)
	}
	c.scope = added
	return added, true
}

// canonical sorts names, drops duplicates and reports (and drops) "*".
func canonical(names []string) (sorted []string, star bool) {
	sorted = slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if i, ok := slices.BinarySearch(sorted, "*"); ok {
		sorted = slices.Delete(sorted, i, i+1)
		star = true
	}
	return sorted, star
}

// SotwRequest is what the cache needs of a SotW DiscoveryRequest.
type SotwRequest struct {
	TypeURL string
	Version string // version_info: what the client holds
	Nonce   string // response_nonce
	NACK    bool   // error_detail is set
	// NamesHash is the hash of resource_names in request order (HashNames);
	// Names returns them and is called only when the hash differs from the
	// previous request's, so an ACK that repeats its subscription (SotW
	// repeats every name in every request) costs no decoding and no
	// allocation here.
	NamesHash uint64
	Names     func() []string
}

// lock takes the cache lock for a request of typeURL on an open stream;
// ok is false (and the lock not held) otherwise.
func (s *Stream) lock(typeURL string) (t int, c *Cache, ok bool, err error) {
	if t = xdstype.Index(typeURL); t < 0 {
		return t, nil, false, ErrUnknownType
	}
	c = s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return t, c, false, nil
	}
	return t, c, true, nil
}

// Sotw processes a SotW request. A request that answers an older response
// than the last one sent (a stale nonce) is ignored, as the protocol says.
func (s *Stream) Sotw(r SotwRequest) error {
	t, c, ok, err := s.lock(r.TypeURL)
	if !ok {
		return err
	}
	w := s.watches[t]
	signal := false
	if w == nil {
		names := r.Names()
		if len(names) > MaxSubscribedNames {
			c.mu.Unlock()
			return ErrTooManyNames
		}
		w = s.newWatch(t)
		w.first, w.pendingAll = true, true
		w.reqVersion, w.reqNACK, w.reqHash, w.legacy = r.Version, r.NACK, r.NamesHash, xdstype.At(t).FullState && len(names) == 0
		c.setSotwScope(w, names)
		signal = true
	} else if r.Nonce == "" || r.Nonce == w.nonce {
		w.awaiting = false
		if r.NamesHash != w.reqHash {
			names := r.Names()
			if len(names) > MaxSubscribedNames {
				c.mu.Unlock()
				return ErrTooManyNames
			}
			w.reqHash = r.NamesHash
			added, changed := c.setSotwScope(w, names)
			switch {
			case !changed:
			case xdstype.At(t).FullState || w.wildcard:
				w.pendingAll = true // SotW full state: the response is the whole new scope
			default:
				for _, n := range added {
					if w.get(n) != nil {
						w.mark(n)
					}
				}
			}
		}
		signal = w.hasPending()
	}
	c.mu.Unlock()
	if signal {
		s.signal()
	}
	return nil
}

// setSotwScope subscribes w to the names of a SotW request: "*" or, after
// an empty first request, an empty list means every resource.
func (c *Cache) setSotwScope(w *Watch, names []string) (added []string, changed bool) {
	sorted, star := canonical(names)
	return c.setScope(w, star || (w.legacy && len(sorted) == 0), sorted)
}

// DeltaRequest is what the cache needs of a DeltaDiscoveryRequest.
type DeltaRequest struct {
	TypeURL     string
	Nonce       string
	NACK        bool
	Subscribe   []string
	Unsubscribe []string
	// Initial is initial_resource_versions: what a reconnecting client holds.
	Initial map[string]string
}

// Delta processes a Delta request.
func (s *Stream) Delta(r DeltaRequest) error {
	t, c, ok, err := s.lock(r.TypeURL)
	if !ok {
		return err
	}
	w := s.watches[t]
	if w == nil && len(r.Subscribe) > MaxSubscribedNames {
		c.mu.Unlock()
		return ErrTooManyNames
	}
	if w == nil {
		w = s.newWatch(t)
		sorted, star := canonical(r.Subscribe)
		c.setDeltaScope(w, star || len(r.Subscribe) == 0, sorted)
		if len(r.Initial) == 0 {
			w.pendingAll, w.first = true, true
		} else {
			// Send what the client lacks or holds at another version, and the
			// removal of what it holds that no longer exists; and answer even
			// when that is nothing, so that a client that resumed knows it
			// is served (versions name content: a replica that agrees owes
			// it nothing).
			w.first = true
			w.initial = make(map[string]string, min(len(r.Initial), MaxSubscribedNames))
			for name, v := range r.Initial {
				if len(w.initial) < MaxSubscribedNames {
					w.initial[name] = v
				}
				if !w.inScope(name) {
					continue
				}
				if e := w.get(name); e == nil || e.Version != v {
					w.mark(name)
				}
			}
			if w.wildcard {
				for name := range w.ts.resources {
					if _, held := r.Initial[name]; !held && w.get(name) != nil {
						w.mark(name)
					}
				}
			} else {
				for _, n := range w.scopeNames() {
					if _, held := r.Initial[n]; !held && w.get(n) != nil {
						w.mark(n)
					}
				}
			}
		}
	} else {
		if r.Nonce != "" && r.Nonce == w.nonce {
			w.awaiting = false
		}
		if len(r.Subscribe) > 0 || len(r.Unsubscribe) > 0 {
			sub, starOn := canonical(r.Subscribe)
			unsub, starOff := canonical(r.Unsubscribe)
			wildcard := (w.wildcard || starOn) && !starOff
			names := mergeNames(w.deltaNames(), sub, unsub)
			if len(names) > MaxSubscribedNames {
				c.mu.Unlock()
				return ErrTooManyNames
			}
			was := w.wildcard
			added, _ := c.setDeltaScope(w, wildcard, names)
			if wildcard && !was {
				w.pendingAll = true
			}
			// a name unsubscribed is dropped by the client, one subscribed
			// again is owed whole: what it said it held no longer stands
			if wildcard != was {
				w.initial = nil
			}
			for _, n := range unsub {
				delete(w.initial, n)
			}
			for _, n := range added {
				delete(w.initial, n)
				if w.get(n) != nil {
					w.mark(n)
				}
			}
		}
	}
	signal := w.hasPending()
	c.mu.Unlock()
	if signal {
		s.signal()
	}
	return nil
}

// mergeNames is (old ∪ add) ∖ remove, all sorted and unique.
func mergeNames(old, add, remove []string) []string {
	out := make([]string, 0, len(old)+len(add))
	out = append(out, old...)
	out = append(out, add...)
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(n string) bool {
		_, ok := slices.BinarySearch(remove, n)
		return ok
	})
}

// Response is one response to send: the resources (SotW: the response's
// resources; Delta: the updated ones) and, for Delta, the removed names.
// Entries may be shared with other responses: do not modify it.
type Response struct {
	TypeURL string
	Version string
	Nonce   string
	Entries []*Entry
	Removed []string
	// Bytes is the encoded size of the entries' resources.
	Bytes int
}

// Next appends to out the responses the stream should send now, in type
// order (clusters before endpoints, listeners before routes), and marks
// each as awaiting its ACK.
func (s *Stream) Next(out []Response) []Response {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed {
		return out
	}
	s.dequeue()
	for _, w := range s.watches {
		if w == nil || w.awaiting || w.ts.version == "" || !w.hasPending() {
			continue
		}
		var r Response
		var ok bool
		var left []string
		if s.delta {
			r, ok, left = w.buildDelta()
		} else {
			r, ok, left = w.buildSotw()
		}
		w.pendingAll, w.first = false, false
		w.keepLeft(left)
		if !ok {
			continue
		}
		s.nonce++
		w.nonce = strconv.FormatUint(s.nonce, 10)
		w.awaiting = true
		r.TypeURL, r.Version, r.Nonce = w.ts.typeURL, w.ts.version, w.nonce
		out = append(out, r)
	}
	return out
}

// inScopeEntries is every resource w subscribes to that exists, by name.
func (w *Watch) inScopeEntries() []*Entry {
	if w.wildcard {
		return w.ts.allFor(w.g.zone, w.g.aud, w.g)
	}
	var out []*Entry
	for _, n := range w.scopeNames() {
		if e := w.get(n); e != nil {
			out = append(out, e)
		}
	}
	return out
}

func (w *Watch) sortedPending() []string {
	slices.Sort(w.pending)
	w.pending = slices.Compact(w.pending)
	return w.pending
}

// MaxResponseBytes bounds the resources one response carries when the
// protocol lets a response carry part of a client's resources (SotW
// endpoints and routes; every Delta type): the rest follow in the next
// responses, one per ACK. A client starting with 5,000 ClusterLoadAssignments
// then holds at most this much of them marshalled at once, instead of a
// whole multi-megabyte response per client while the transport drains it. A
// single larger resource still goes alone.
const MaxResponseBytes = 512 << 10

// chunk collects entries up to MaxResponseBytes; what does not fit is left.
type chunk struct {
	entries []*Entry
	size    int
	left    []string
}

// add takes e unless the chunk is full; a full chunk keeps name for later.
func (c *chunk) add(name string, e *Entry) {
	n := len(e.Any.GetValue())
	if len(c.left) > 0 || (len(c.entries) > 0 && c.size+n > MaxResponseBytes) {
		c.left = append(c.left, name)
		return
	}
	c.entries = append(c.entries, e)
	c.size += n
}

// fromScope fills the chunk from every resource in w's scope that exists.
func (c *chunk) fromScope(w *Watch) {
	if w.wildcard {
		for _, e := range w.ts.allFor(w.g.zone, w.g.aud, w.g) {
			c.add(e.Name, e)
		}
		return
	}
	for _, n := range w.scopeNames() {
		if e := w.get(n); e != nil {
			c.add(n, e)
		}
	}
}

// newChunk starts a chunk whose leftovers go into w.pending's own array:
// a name is left only after it is read, so when the names come from
// w.pending itself the writes never overtake the reads.
func (w *Watch) newChunk() chunk { return chunk{left: w.pending[:0]} }

// keepLeft makes what a chunk left w's pending names (sorted and unique).
func (w *Watch) keepLeft(left []string) {
	if left == nil { // a whole response: nothing left, the array kept
		left = w.pending[:0]
	}
	w.pending, w.compacted = left, len(left)
}

func (w *Watch) buildSotw() (Response, bool, []string) {
	if xdstype.At(w.ts.typ).FullState {
		entries := w.inScopeEntries()
		// A client that holds nothing and for which nothing exists still
		// needs an (empty) answer to finish starting, unless it already
		// holds this version or rejected it.
		if len(entries) == 0 && w.first && (w.reqNACK || w.reqVersion == w.ts.version) {
			return Response{}, false, nil
		}
		size := 0
		for _, e := range entries {
			size += len(e.Any.GetValue())
		}
		return Response{Entries: entries, Bytes: size}, true, nil
	}
	c := w.newChunk()
	if w.pendingAll {
		c.fromScope(w)
	} else {
		for _, n := range w.sortedPending() {
			if e := w.get(n); e != nil && w.inScope(n) {
				c.add(n, e)
			}
		}
	}
	return Response{Entries: c.entries, Bytes: c.size}, len(c.entries) > 0, c.left
}

func (w *Watch) buildDelta() (Response, bool, []string) {
	var r Response
	if w.pendingAll {
		// The whole scope says nothing of what was deleted meanwhile (the
		// chunk below reuses the pending names' array: read them first).
		for _, n := range w.sortedPending() {
			if w.inScope(n) && w.get(n) == nil {
				r.Removed = append(r.Removed, n)
			}
		}
	}
	c := w.newChunk()
	if w.pendingAll {
		c.fromScope(w)
	} else {
		for _, n := range w.sortedPending() {
			if !w.inScope(n) {
				continue
			}
			held, resumed := w.initial[n]
			if resumed {
				delete(w.initial, n) // settled once: later changes are sent as any
			}
			if e := w.get(n); e != nil {
				if !resumed || held != e.Version {
					c.add(n, e)
				}
			} else {
				r.Removed = append(r.Removed, n)
			}
		}
	}
	r.Entries, r.Bytes = c.entries, c.size
	return r, len(r.Entries) > 0 || len(r.Removed) > 0 || w.first, c.left
}

// Serving lists, for each type the stream watches, the resources it is
// served now (its class's variants in place of the base), in name order,
// at most limit of each type (with how many more there are), and only
// those named match when match is set: what `controlplane proxy-config`
// shows a client holds once it has ACKed the latest version.
func (s *Stream) Serving(limit int, match func(name string) bool) map[string]ServingType {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	out := map[string]ServingType{}
	for _, w := range s.watches {
		if w == nil {
			continue
		}
		st := ServingType{Version: w.ts.version, Awaiting: w.awaiting, Behind: w.behind()}
		var pending map[string]bool
		if !w.pendingAll && len(w.pending) > 0 {
			pending = make(map[string]bool, len(w.pending))
			for _, n := range w.pending {
				pending[n] = true
			}
		}
		for _, e := range w.inScopeEntries() {
			if match != nil && !match(e.Name) {
				continue
			}
			if len(st.Entries) == limit {
				st.More++
				continue
			}
			st.Entries = append(st.Entries, e)
			if w.pendingAll || pending[e.Name] {
				st.Unsent = append(st.Unsent, e.Name)
			}
		}
		out[w.ts.typeURL] = st
	}
	return out
}

// ServingType is what a stream is served of one type.
type ServingType struct {
	Version string
	Entries []*Entry
	More    int // left out by the limit
	// Unsent names the listed entries whose current content the stream
	// has not been sent yet: changed since its last response, waiting
	// for it to answer that one (or, for a stream never answered, all).
	Unsent []string
	// Awaiting: a response is out, neither ACKed nor NACKed yet. Behind:
	// as TypeSync.Behind, for the whole scope, listed or not.
	Awaiting, Behind bool
}

// TypeSync is where one type a stream watches stands against what the
// cache serves it now.
type TypeSync struct {
	// Current is the type's version in the stream's view: the version
	// any of its resources last changed at ("" while none is published).
	Current string
	// Behind: a change in the stream's scope waits to be sent, or the
	// last response waits for the client's answer. A NACKed response is
	// answered: the client keeps what it had, and is not Behind for it.
	Behind bool
}

// Sync says, by xdstype index, where each type the stream watches stands;
// watched[t] is false for a type it has not asked for.
func (s *Stream) Sync() (sync [xdstype.Count]TypeSync, watched [xdstype.Count]bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for t, w := range s.watches {
		if w == nil {
			continue
		}
		watched[t] = true
		sync[t] = TypeSync{Current: w.ts.version, Behind: w.behind()}
	}
	return sync, watched
}
