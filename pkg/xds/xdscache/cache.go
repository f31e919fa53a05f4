package xdscache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Publisher is what the control plane writes published resources to.
type Publisher interface {
	// Apply publishes a set of changes atomically at a new version.
	Apply(Update)
	// Resources lists what one view publishes now, by type URL, sorted by name.
	Resources(view int) map[string][]*Entry
}

// TypeOrder is the order in which changes reach a client: clusters before
// their endpoints, listeners before their routes (make before break).
var TypeOrder = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// numTypes is the number of types the cache publishes; a type's index is its
// place in TypeOrder.
const numTypes = 4

// TypeIndex is the index of a published type URL in TypeOrder, or -1.
func TypeIndex(typeURL string) int {
	switch typeURL {
	case resource.ClusterType:
		return 0
	case resource.EndpointType:
		return 1
	case resource.ListenerType:
		return 2
	case resource.RouteType:
		return 3
	}
	return -1
}

// ErrUnknownType is returned for a request of a type the cache does not
// publish; the cache keeps no state for it.
var ErrUnknownType = errors.New("type not served")

// MaxSubscribedNames bounds what one stream may subscribe to of one type:
// what it subscribes to is kept, and a Delta stream adds to it request by
// request. A million endpoints in upstreams of 20 are 50,000 names.
const MaxSubscribedNames = 1 << 18

// ErrTooManyNames is returned for a request that would subscribe one stream
// to more than MaxSubscribedNames names of a type; nothing of it is applied.
var ErrTooManyNames = fmt.Errorf("more than %d resource names subscribed", MaxSubscribedNames)

// fullState types are sent whole in SotW: a resource missing from a
// response is deleted on the client. They also allow the legacy wildcard
// (an empty first request).
func fullState(t int) bool { return t == 0 || t == 2 }

// Entry is one resource at one version, marshalled once and shared by every
// view and every client it is sent to. Only its bytes are kept; Decode
// reads them back for the rare reader that needs the message.
type Entry struct {
	Name    string
	Version string
	Any     *anypb.Any
}

// NewEntry marshals a resource deterministically.
func NewEntry(name, version string, m proto.Message) (*Entry, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	return NewEntryBytes(name, version, "type.googleapis.com/"+string(m.ProtoReflect().Descriptor().FullName()), b), nil
}

// NewEntryBytes makes an entry of already marshalled bytes, which it keeps.
func NewEntryBytes(name, version, typeURL string, b []byte) *Entry {
	// one allocation for the entry and its Any
	ea := &struct {
		e Entry
		a anypb.Any
	}{}
	ea.a.TypeUrl, ea.a.Value = typeURL, b
	ea.e = Entry{Name: name, Version: version, Any: &ea.a}
	return &ea.e
}

// Decode unmarshals the entry into m.
func (e *Entry) Decode(m proto.Message) error {
	if err := proto.Unmarshal(e.Any.GetValue(), m); err != nil {
		return fmt.Errorf("%s %s: %w", ShortType(e.Any.GetTypeUrl()), e.Name, err)
	}
	return nil
}

// Change puts (Entry != nil) or deletes one named resource of a type in a view.
type Change struct {
	View    int
	TypeURL string
	Name    string
	Entry   *Entry
}

// Update is a set of changes published together at Version.
type Update struct {
	Version string
	Changes []Change
}

// Cache holds what every view publishes and the watches of every connected
// stream. A change visits only the watches interested in the changed
// resource: a reverse index maps each name to the shared subscription sets
// that hold it, and each set to its watches. Nothing here is per client and
// per resource: a client's state is its subscription set (shared with every
// client that subscribes to the same names) and the names pending for it.
type Cache struct {
	mu      sync.Mutex
	views   []*view
	viewFor func(*core.Node) int
	seed    maphash.Seed

	epoch  uint64    // counts Applies, to notify each stream once per Apply
	notify []*Stream // streams to wake after the current Apply; reused
	scope  []string  // scratch for diffs; reused
}

type view struct {
	types [numTypes]*typeState
}

// typeState is one type in one view.
type typeState struct {
	typ       int
	typeURL   string
	version   string // the version at which any resource of this type last changed
	resources map[string]*Entry
	sorted    []*Entry // every resource by name; nil when stale; never modified once built

	wildcard map[*Watch]struct{}
	subsets  map[uint64][]*subset // by hash of the sorted names
	index    map[string][]*subset // name → the subsets that hold it
}

// subset is a subscription set shared by every watch that subscribes to
// exactly these names.
type subset struct {
	hash    uint64
	names   []string // sorted, unique
	members map[*Watch]struct{}
}

// New returns a cache with n views; viewFor maps a client to its view.
func New(n int, viewFor func(*core.Node) int) *Cache {
	c := &Cache{viewFor: viewFor, seed: maphash.MakeSeed()}
	for range n {
		v := &view{}
		for t, url := range TypeOrder {
			v.types[t] = &typeState{typ: t, typeURL: url, resources: map[string]*Entry{},
				wildcard: map[*Watch]struct{}{}, subsets: map[uint64][]*subset{}, index: map[string][]*subset{}}
		}
		c.views = append(c.views, v)
	}
	return c
}

var _ Publisher = (*Cache)(nil)

func (c *Cache) viewOf(n *core.Node) int {
	v := c.viewFor(n)
	if v < 0 || v >= len(c.views) {
		return 0
	}
	return v
}

// Apply publishes the changes, then wakes every stream with a watch
// interested in a changed resource. Its cost grows with the changes and the
// watches interested in them, not with what is published or subscribed.
func (c *Cache) Apply(u Update) {
	c.mu.Lock()
	c.epoch++
	for _, ch := range u.Changes {
		t := TypeIndex(ch.TypeURL)
		if t < 0 || ch.View < 0 || ch.View >= len(c.views) {
			continue
		}
		ts := c.views[ch.View].types[t]
		if ch.Entry == nil {
			if _, ok := ts.resources[ch.Name]; !ok {
				continue
			}
			delete(ts.resources, ch.Name)
		} else {
			if ts.resources[ch.Name] == ch.Entry {
				continue
			}
			ts.resources[ch.Name] = ch.Entry
		}
		ts.sorted = nil
		c.setVersion(ts, u.Version)
		c.interested(ts, ch.Name)
	}
	// The first publication publishes every type in every view, if only as
	// empty: a client waiting for its first answer (Envoy holds its start for
	// CDS and LDS) gets one even when its view has nothing of that type.
	for _, v := range c.views {
		for _, ts := range v.types {
			if ts.version == "" {
				c.setVersion(ts, u.Version)
			}
		}
	}
	// Signalling never blocks (a stream has a one-slot wake channel), so it
	// is done under the lock and the list is reused.
	for i, s := range c.notify {
		s.signal()
		c.notify[i] = nil
	}
	c.notify = c.notify[:0]
	c.mu.Unlock()
}

// setVersion moves a type's version. Its first version wakes every watch of
// the type: until then none could be answered.
func (c *Cache) setVersion(ts *typeState, version string) {
	if ts.version == "" {
		ts.forEachWatch(c.wake)
	}
	ts.version = version
}

// interested marks name pending on every watch that wants it.
func (c *Cache) interested(ts *typeState, name string) {
	for w := range ts.wildcard {
		w.mark(name)
		c.wake(w)
	}
	for _, ss := range ts.index[name] {
		for w := range ss.members {
			w.mark(name)
			c.wake(w)
		}
	}
}

// wake queues w's stream to be signalled at the end of the Apply.
func (c *Cache) wake(w *Watch) {
	if s := w.stream; s.epoch != c.epoch {
		s.epoch = c.epoch
		c.notify = append(c.notify, s)
	}
}

func (ts *typeState) forEachWatch(f func(*Watch)) {
	for w := range ts.wildcard {
		f(w)
	}
	for _, list := range ts.subsets {
		for _, ss := range list {
			for w := range ss.members {
				f(w)
			}
		}
	}
}

// all returns every resource sorted by name; the slice is shared.
func (ts *typeState) all() []*Entry {
	if ts.sorted == nil {
		list := make([]*Entry, 0, len(ts.resources))
		for _, e := range ts.resources {
			list = append(list, e)
		}
		slices.SortFunc(list, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
		ts.sorted = list
	}
	return ts.sorted
}

// intern returns the shared subset for sorted, unique names.
func (c *Cache) intern(ts *typeState, names []string) *subset {
	h := c.HashNames(names)
	for _, ss := range ts.subsets[h] {
		if slices.Equal(ss.names, names) {
			return ss
		}
	}
	ss := &subset{hash: h, names: slices.Clone(names), members: map[*Watch]struct{}{}}
	ts.subsets[h] = append(ts.subsets[h], ss)
	for _, n := range ss.names {
		ts.index[n] = append(ts.index[n], ss)
	}
	return ss
}

// release drops w from its subset, and the subset when it was the last member.
func (ts *typeState) release(w *Watch) {
	ss := w.subset
	if ss == nil {
		return
	}
	w.subset = nil
	delete(ss.members, w)
	if len(ss.members) > 0 {
		return
	}
	ts.subsets[ss.hash] = deleteFrom(ts.subsets[ss.hash], ss)
	if len(ts.subsets[ss.hash]) == 0 {
		delete(ts.subsets, ss.hash)
	}
	for _, n := range ss.names {
		if l := deleteFrom(ts.index[n], ss); len(l) == 0 {
			delete(ts.index, n)
		} else {
			ts.index[n] = l
		}
	}
}

func deleteFrom(list []*subset, ss *subset) []*subset {
	if i := slices.Index(list, ss); i >= 0 {
		list[i] = list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
	}
	return list
}

// Resources lists what one view publishes now.
func (c *Cache) Resources(view int) map[string][]*Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*Entry{}
	for _, ts := range c.views[view].types {
		if len(ts.resources) > 0 {
			out[ts.typeURL] = slices.Clone(ts.all())
		}
	}
	return out
}

// Fetch answers a one-shot (REST-style) request with the current resources
// of a type: those named, or all of them. It returns no entries and
// ok=false when nothing is published yet or the client holds the current version.
func (c *Cache) Fetch(_ context.Context, node *core.Node, typeURL, version string, names []string) (entries []*Entry, current string, ok bool, err error) {
	t := TypeIndex(typeURL)
	if t < 0 {
		return nil, "", false, ErrUnknownType
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.views[c.viewOf(node)].types[t]
	if ts.version == "" || version == ts.version {
		return nil, ts.version, false, nil
	}
	if len(names) == 0 {
		return slices.Clone(ts.all()), ts.version, true, nil
	}
	for _, n := range names {
		if e := ts.resources[n]; e != nil {
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(entries, func(a, b *Entry) bool { return a == b }), ts.version, true, nil
}

// ShortType names a type URL for people and metric labels: CDS, EDS, LDS, RDS.
func ShortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "CDS"
	case resource.EndpointType:
		return "EDS"
	case resource.ListenerType:
		return "LDS"
	case resource.RouteType:
		return "RDS"
	}
	return typeURL
}
