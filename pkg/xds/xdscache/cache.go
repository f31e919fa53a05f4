package xdscache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/xds/xdstype"
)

// Publisher is what the control plane writes published resources to.
type Publisher interface {
	// Apply publishes a set of changes atomically at a new version.
	Apply(Update)
	// Resources lists what one view publishes now, by type URL, sorted by name.
	Resources(view int) map[string][]*Entry
}

// TypeOrder is the served type URLs in the order in which changes reach a
// client (xdstype's order); a type's index there is its TypeIndex.
var TypeOrder = xdstype.URLs()

// TypeIndex is the index of a served type URL (see xdstype), or -1.
func TypeIndex(typeURL string) int { return xdstype.Index(typeURL) }

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

// Entry is one resource at one version, marshalled once and shared by every
// view and every client it is sent to. Only its bytes are kept; Decode
// reads them back for the rare reader that needs the message. Visible says
// which clients may read it: to every other the resource does not exist.
type Entry struct {
	Name    string
	Version string
	Any     *anypb.Any
	Visible Visibility
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
		return fmt.Errorf("%s %s: %w", xdstype.Short(e.Any.GetTypeUrl()), e.Name, err)
	}
	return nil
}

// Change puts (Entry != nil) or deletes one named resource of a type in a view.
//
// With a Zone ("region/zone", see ZoneKey) it puts or deletes the zone's
// variant of the resource instead: streams of that zone are sent the
// variant where one exists, every other stream the base resource (Zone "").
// A variant exists only beside its base: a variant of a name that has no
// base is ignored (put the base first, in the same Update or before), and
// deleting the base deletes its variants. The cache gives each variant its
// own per-resource version (the entry's, "@" and the zone), so a Delta
// client moving between base and variant content always sees a change.
//
// Audiences, on a put of a base, are the resource's audience variants: one
// resource name whose content depends on who reads it (the spatial route,
// which holds the virtual hosts of the domains its reader may read). Each
// is sent, instead of the base and of any zone variant, to the clients of
// the namespaces its Visible names; their visibilities are disjoint (a
// namespace two name reads the first's), and an entry visible to every
// client or to none is no variant. Every other client reads the base, if
// its Visible allows. They replace the variants the name had: a put
// without them drops them, as does deleting the base. The cache gives each
// its own per-resource version (the entry's, "@" and a digest of its bytes,
// maphash with the cache's Seed, in hex), and a change wakes only the
// streams whose content changed.
type Change struct {
	View      int
	TypeURL   string
	Name      string
	Zone      string
	Entry     *Entry
	Audiences []*Entry
}

// Update is a set of changes published together at Version. Of several
// changes of one resource (the same View, TypeURL, Name and Zone) the last
// is the one published: clients are told of the difference between what
// they held before the Update and that one, never of the changes between.
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

	zones zoneCensus

	published publications // when the last versions were applied
	moved     bool         // the current Apply moved a type's version
	reads     []groupRead  // scratch for audience variants; reused

	backlog backlog // streams woken and not yet served

	epoch  uint64    // counts Applies, to notify each stream once per Apply
	notify []*Stream // streams to wake after the current Apply; reused
	// onSignal, when set (by tests), is called with each stream woken, in order.
	onSignal func(*Stream)
	scope    []string // scratch for diffs; reused
	// last and deduped are scratch for lastOfEach; reused, last is
	// dropped after an Update larger than maxKeptLast changes.
	last    map[changeKey]int
	deduped []Change
}

type view struct {
	types [xdstype.Count]*typeState
}

// typeState is one type in one view.
type typeState struct {
	typ       int
	typeURL   string
	version   string // the version at which any resource of this type last changed
	resources map[string]*Entry
	sorted    []*Entry // every resource by name; nil when stale; never modified once built
	// gen counts the times sorted went stale or an audience variant
	// changed: a group's visible list of another gen is stale too.
	gen uint64
	// restricted counts the resources some audience may not read: while it
	// is 0 every group shares sorted.
	restricted int
	// lists are the groups' visible lists built at listsGen, by a hash of the
	// restricted resources each holds, for groups that may read the same
	// resources to share one (share).
	lists    map[uint64][][]*Entry
	listsGen uint64
	seed     maphash.Seed

	// variants holds the zone variants of a name, by name then zone; a name
	// is here only while its base is in resources. perZone counts them by zone.
	variants map[string]map[string]variant
	perZone  map[string]int

	// zones holds the watches of each zone's streams ("" for streams without
	// one), a group per audience; a group goes with its last watch.
	zones map[string]map[Audience]*group

	// audiences holds the audience variants of a name, while its base is in
	// resources: what each namespace they name reads instead of the base.
	audiences map[string]*audienceVariants
}

// groupRead is what one group read of a name before a change.
type groupRead struct {
	g *group
	e *Entry
}

// variant is one zone's variant of a resource: the entry published and the
// one sent, which shares its bytes under a version of its own.
type variant struct {
	src, e *Entry
}

// group is the watches of one type in one view whose streams share a zone
// and an audience, with their reverse index. Nothing a group holds or
// builds is read by a watch of another audience.
type group struct {
	zone     string
	aud      Audience
	watches  int // how many, wildcard or not
	wildcard map[*Watch]struct{}
	// wildcardDemand sums the demand weights of the wildcard watches.
	wildcardDemand uint64
	subsets        map[uint64][]*subset // by hash of the sorted names
	index          map[string][]*subset // name → the subsets that hold it
	// visible is what of the type's sorted resources the audience may read,
	// built at visibleGen (the type's gen) while some are restricted.
	visible    []*Entry
	visibleGen uint64
}

func newGroup(zone string, aud Audience) *group {
	return &group{zone: zone, aud: aud, wildcard: map[*Watch]struct{}{}, subsets: map[uint64][]*subset{}, index: map[string][]*subset{}}
}

// subset is a subscription set shared by every watch that subscribes to
// exactly these names.
type subset struct {
	hash    uint64
	names   []string // sorted, unique
	members map[*Watch]struct{}
	demand  uint64 // the members' summed demand weights
}

// Option configures a Cache.
type Option func(*Cache)

// WithMaxZones bounds the distinct zones the cache keeps streams of (at
// least 0; DefaultMaxZones without it).
func WithMaxZones(n int) Option {
	return func(c *Cache) { c.zones.max = max(n, 0) }
}

// New returns a cache with n views; viewFor maps a client to its view.
func New(n int, viewFor func(*core.Node) int, opts ...Option) *Cache {
	c := &Cache{viewFor: viewFor, seed: maphash.MakeSeed()}
	c.zones.init(n)
	for _, o := range opts {
		o(c)
	}
	for range n {
		v := &view{}
		for t, typ := range xdstype.All() {
			v.types[t] = &typeState{typ: t, typeURL: typ.URL, resources: map[string]*Entry{},
				variants: map[string]map[string]variant{}, perZone: map[string]int{},
				zones: map[string]map[Audience]*group{}, gen: 1, seed: c.seed}
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
	for _, ch := range c.lastOfEach(u.Changes) {
		t := xdstype.Index(ch.TypeURL)
		if t < 0 || ch.View < 0 || ch.View >= len(c.views) {
			continue
		}
		ts := c.views[ch.View].types[t]
		if ch.Zone != "" {
			c.applyVariant(ts, ch, u.Version)
			continue
		}
		old := ts.resources[ch.Name]
		if oldAV := ts.audiences[ch.Name]; oldAV != nil || (ch.Entry != nil && len(ch.Audiences) > 0) {
			c.applyAudiences(ts, ch, old, oldAV, u.Version)
			continue
		}
		if ch.Entry == nil {
			if old == nil {
				continue
			}
			delete(ts.resources, ch.Name)
			ts.dropVariants(ch.Name)
		} else {
			if old == ch.Entry {
				continue
			}
			ts.resources[ch.Name] = ch.Entry
			if ch.Entry.Visible.Restricted() {
				ts.restricted++
			}
		}
		if old != nil && old.Visible.Restricted() {
			ts.restricted--
		}
		ts.sorted = nil
		ts.gen++
		c.setVersion(ts, u.Version)
		c.interested(ts, ch.Name, old, ch.Entry)
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
	// Recorded before any stream is woken, so each finds the time of the
	// version it is sent. An Apply that moved no version is never sent.
	if c.moved {
		c.published.add(u.Version, time.Now())
		c.moved = false
	}
	// Signalling never blocks (a stream has a one-slot wake channel), so it
	// is done under the lock and the list is reused. Streams that share a
	// connection are woken one after another, so that their responses
	// leave in one write and reach the client in one read.
	if len(c.notify) > 1 {
		slices.SortFunc(c.notify, func(a, b *Stream) int { return cmp.Compare(a.conn, b.conn) })
	}
	for i, s := range c.notify {
		if c.onSignal != nil {
			c.onSignal(s)
		}
		s.signal()
		c.notify[i] = nil
	}
	c.notify = c.notify[:0]
	c.mu.Unlock()
}

// changeKey names the resource a change is of.
type changeKey struct {
	view       int
	typeURL    string
	name, zone string
}

// maxKeptLast bounds the scratch map lastOfEach keeps between Updates: a
// large first publication does not leave a large map behind.
const maxKeptLast = 1024

// lastOfEach is changes with only the last change of each resource, in
// their order: changes itself, untouched, when no resource changes twice,
// which is what publishers send. c.mu is held.
func (c *Cache) lastOfEach(changes []Change) []Change {
	if len(changes) < 2 {
		return changes
	}
	if c.last == nil {
		// sized for the update at once: a full rebuild's tens of
		// thousands of changes would otherwise grow it step by step
		c.last = make(map[changeKey]int, len(changes))
	}
	defer func() {
		if len(c.last) > maxKeptLast {
			c.last = nil
		} else {
			clear(c.last)
		}
	}()
	dup := false
	for i, ch := range changes {
		k := changeKey{ch.View, ch.TypeURL, ch.Name, ch.Zone}
		if _, seen := c.last[k]; seen {
			dup = true
		}
		c.last[k] = i
	}
	if !dup {
		return changes
	}
	c.deduped = c.deduped[:0]
	for i, ch := range changes {
		if c.last[changeKey{ch.View, ch.TypeURL, ch.Name, ch.Zone}] == i {
			c.deduped = append(c.deduped, ch)
		}
	}
	out := c.deduped
	if cap(c.deduped) > maxKeptLast {
		c.deduped = nil
	}
	return out
}

// setVersion moves a type's version. Its first version wakes every watch of
// the type: until then none could be answered.
func (c *Cache) setVersion(ts *typeState, version string) {
	if ts.version == "" {
		ts.forEachWatch(c.wake)
	}
	ts.version = version
	c.moved = true
}

// PublishedAt is when the Apply of version ran, while version is among
// the last MaxPublishedVersions applied; ok is false for an older or
// unknown one. Convergence metrics measure from it.
func (c *Cache) PublishedAt(version string) (at time.Time, ok bool) {
	return c.published.at(version)
}

// MaxPublishedVersions bounds the versions whose publication time the
// cache keeps: a client still unacknowledged that many versions later is
// not measured, and memory stays constant however long the cache runs.
const MaxPublishedVersions = 256

// publications is a ring of the last versions applied and their times,
// with its own lock: every stream reads it per response, and the cache's
// lock is the publication's.
type publications struct {
	mu    sync.Mutex
	times map[string]time.Time
	ring  [MaxPublishedVersions]string
	next  int
}

func (p *publications) add(version string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.times == nil {
		p.times = make(map[string]time.Time, MaxPublishedVersions)
	}
	if _, ok := p.times[version]; ok || version == "" {
		return // the first publication of a version is when it became current
	}
	if old := p.ring[p.next]; old != "" {
		delete(p.times, old)
	}
	p.ring[p.next] = version
	p.next = (p.next + 1) % MaxPublishedVersions
	p.times[version] = at
}

func (p *publications) at(version string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.times[version]
	return t, ok
}

// interested marks a base resource's name pending on every watch that
// wants it and whose audience may read it, before (old) or now (cur), except
// in the zones that have their own variant of it, unless who may read it
// changed: then those zones' watches are sent the variant, or its removal.
// An entry that only changes who may read it (the same bytes) is news only
// to the audiences that gain or lose it.
func (c *Cache) interested(ts *typeState, name string, old, cur *Entry) {
	revisited := old == nil || cur == nil || old.Visible != cur.Visible
	restamped := revisited && old != nil && cur != nil && old.Any == cur.Any
	vs := ts.variants[name]
	for zone, auds := range ts.zones {
		if _, ok := vs[zone]; ok && zone != "" && !revisited {
			continue
		}
		for aud, g := range auds {
			before, now := old != nil && old.VisibleTo(aud), cur != nil && cur.VisibleTo(aud)
			if (before || now) && !(restamped && before && now) {
				c.interestedIn(g, name)
			}
		}
	}
}

// interestedIn marks name pending on every watch of g that wants it.
func (c *Cache) interestedIn(g *group, name string) {
	for w := range g.wildcard {
		w.mark(name)
		c.wake(w)
	}
	for _, ss := range g.index[name] {
		for w := range ss.members {
			w.mark(name)
			c.wake(w)
		}
	}
}

// applyVariant puts or deletes one zone's variant and wakes only that
// zone's watches that want the name.
func (c *Cache) applyVariant(ts *typeState, ch Change, version string) {
	vs := ts.variants[ch.Name]
	old, had := vs[ch.Zone]
	switch {
	case ch.Entry == nil:
		if !had {
			return
		}
		delete(vs, ch.Zone)
		if len(vs) == 0 {
			delete(ts.variants, ch.Name)
		}
		if ts.perZone[ch.Zone]--; ts.perZone[ch.Zone] == 0 {
			delete(ts.perZone, ch.Zone)
		}
	case ts.resources[ch.Name] == nil || (had && old.src == ch.Entry):
		return
	default:
		if vs == nil {
			vs = map[string]variant{}
			ts.variants[ch.Name] = vs
		}
		if !had {
			ts.perZone[ch.Zone]++
		}
		e := ch.Entry
		vs[ch.Zone] = variant{src: e, e: &Entry{Name: e.Name, Version: e.Version + "@" + ch.Zone, Any: e.Any}}
	}
	c.setVersion(ts, version)
	base := ts.resources[ch.Name]
	for aud, g := range ts.zones[ch.Zone] {
		if base != nil && base.VisibleTo(aud) && ts.audienceVariant(ch.Name, aud) == nil {
			c.interestedIn(g, ch.Name)
		}
	}
}

// applyAudiences puts or deletes a base that has audience variants, before
// (oldAV) or with this change, and the variants with it, then wakes the
// watches that want the name in every group whose content of it changed:
// what the group's zone and audience read before and now differ in bytes
// or existence. A variant that moves to other namespaces with the same
// bytes wakes only the clients that move to or from it.
func (c *Cache) applyAudiences(ts *typeState, ch Change, old *Entry, oldAV *audienceVariants, version string) {
	var av *audienceVariants
	if ch.Entry != nil {
		av = newAudienceVariants(ch.Name, ch.Audiences, oldAV, ts.seed)
	}
	if (ch.Entry == nil && old == nil) || (old == ch.Entry && oldAV.same(av)) {
		return
	}
	reads := c.reads[:0]
	for zone, auds := range ts.zones {
		for aud, g := range auds {
			reads = append(reads, groupRead{g, ts.get(ch.Name, zone, aud)})
		}
	}
	if old != nil && old.Visible.Restricted() {
		ts.restricted--
	}
	if ch.Entry == nil {
		delete(ts.resources, ch.Name)
		ts.dropVariants(ch.Name)
	} else {
		ts.resources[ch.Name] = ch.Entry
		if ch.Entry.Visible.Restricted() {
			ts.restricted++
		}
	}
	if av == nil {
		delete(ts.audiences, ch.Name)
	} else {
		if ts.audiences == nil {
			ts.audiences = map[string]*audienceVariants{}
		}
		ts.audiences[ch.Name] = av
	}
	if old != ch.Entry {
		ts.sorted = nil
	}
	ts.gen++
	c.setVersion(ts, version)
	for i, r := range reads {
		if now := ts.get(ch.Name, r.g.zone, r.g.aud); bytesOf(now) != bytesOf(r.e) {
			c.interestedIn(r.g, ch.Name)
		}
		reads[i] = groupRead{}
	}
	c.reads = reads[:0]
}

// bytesOf is what tells two contents of a resource apart: entries that
// share their Any (a variant, its base or a restamp of either) send the
// same bytes.
func bytesOf(e *Entry) *anypb.Any {
	if e == nil {
		return nil
	}
	return e.Any
}

// dropVariants deletes every variant of name (its base is gone).
func (ts *typeState) dropVariants(name string) {
	for zone := range ts.variants[name] {
		if ts.perZone[zone]--; ts.perZone[zone] == 0 {
			delete(ts.perZone, zone)
		}
	}
	delete(ts.variants, name)
}

// get is the resource a stream of zone and audience aud is sent for name,
// or nil: nil too when aud may not read it. An audience variant comes
// first; a zone variant is read by whom its base may be.
func (ts *typeState) get(name, zone string, aud Audience) *Entry {
	if e := ts.audienceVariant(name, aud); e != nil {
		return e
	}
	base := ts.resources[name]
	if base == nil || !base.VisibleTo(aud) {
		return nil
	}
	if zone != "" {
		if v, ok := ts.variants[name][zone]; ok {
			return v.e
		}
	}
	return base
}

// allFor is every resource a stream of zone and audience aud is sent,
// sorted by name; the slice may be shared, with every group that reads the
// same (an audience class), or with every group when aud may read every
// resource and no audience variant is its. g, when not nil, is the group
// of (zone, aud), which keeps the audience's list.
func (ts *typeState) allFor(zone string, aud Audience, g *group) []*Entry {
	all := ts.all()
	if ts.restricted > 0 || len(ts.audiences) > 0 {
		all = ts.visibleTo(aud, g)
	}
	return ts.withVariants(all, zone, aud)
}

// withVariants is all with zone's variants in place of their bases, save
// where aud reads an audience variant.
func (ts *typeState) withVariants(all []*Entry, zone string, aud Audience) []*Entry {
	if zone == "" || ts.perZone[zone] == 0 {
		return all
	}
	out := slices.Clone(all)
	for i, e := range out {
		if v, ok := ts.variants[e.Name][zone]; ok && ts.audienceVariant(e.Name, aud) == nil {
			out[i] = v.e
		}
	}
	return out
}

// visibleTo is what of the sorted resources aud may read, its audience
// variants in place of their bases: the sorted list itself when that is
// all of them. g, when not nil, keeps it until the resources change.
func (ts *typeState) visibleTo(aud Audience, g *group) []*Entry {
	if g != nil && g.visibleGen == ts.gen {
		return g.visible
	}
	all := ts.all()
	var out []*Entry
	for i, e := range all {
		read := e
		if v := ts.audienceVariant(e.Name, aud); v != nil {
			read = v
		} else if !e.VisibleTo(aud) {
			read = nil
		}
		if read == e {
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		if out == nil {
			out = make([]*Entry, i, len(all))
			copy(out, all[:i])
		}
		if read != nil {
			out = append(out, read)
		}
	}
	if out == nil {
		out = all // it may read every one
	}
	if g != nil {
		g.visible, g.visibleGen = ts.share(out), ts.gen
	}
	return out
}

// share is list, or an equal list another group built at the same gen:
// audiences that may read the same resources (an audience class) keep one
// list between them, so what an audience costs is its groups, not a list
// per audience.
func (ts *typeState) share(list []*Entry) []*Entry {
	if ts.listsGen != ts.gen {
		clear(ts.lists)
		ts.listsGen = ts.gen
	}
	if ts.lists == nil {
		ts.lists = map[uint64][][]*Entry{}
	}
	var h maphash.Hash
	h.SetSeed(ts.seed)
	for _, e := range list {
		if e.Visible.Restricted() { // what tells the lists of a gen apart
			_, _ = h.WriteString(e.Name)
			_ = h.WriteByte(0)
			_, _ = h.WriteString(e.Version) // an audience variant's is its own
			_ = h.WriteByte(0)
		}
	}
	k := h.Sum64()
	for _, l := range ts.lists[k] {
		if slices.Equal(l, list) {
			return l
		}
	}
	ts.lists[k] = append(ts.lists[k], list)
	return list
}

// groupFor is the group of the watches of zone and aud, made when missing.
func (ts *typeState) groupFor(zone string, aud Audience) *group {
	auds := ts.zones[zone]
	if auds == nil {
		auds = map[Audience]*group{}
		ts.zones[zone] = auds
	}
	g := auds[aud]
	if g == nil {
		g = newGroup(zone, aud)
		auds[aud] = g
	}
	return g
}

// wake queues w's stream to be signalled at the end of the Apply.
func (c *Cache) wake(w *Watch) {
	if s := w.stream; s.epoch != c.epoch {
		s.epoch = c.epoch
		c.notify = append(c.notify, s)
	}
}

func (ts *typeState) forEachWatch(f func(*Watch)) {
	for _, auds := range ts.zones {
		for _, g := range auds {
			g.forEachWatch(f)
		}
	}
}

func (g *group) forEachWatch(f func(*Watch)) {
	for w := range g.wildcard {
		f(w)
	}
	for _, list := range g.subsets {
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

// intern returns the group's shared subset for sorted, unique names.
func (c *Cache) intern(g *group, names []string) *subset {
	h := c.HashNames(names)
	for _, ss := range g.subsets[h] {
		if slices.Equal(ss.names, names) {
			return ss
		}
	}
	ss := &subset{hash: h, names: slices.Clone(names), members: map[*Watch]struct{}{}}
	g.subsets[h] = append(g.subsets[h], ss)
	for _, n := range ss.names {
		g.index[n] = append(g.index[n], ss)
	}
	return ss
}

// release drops w from its subset, and the subset when it was the last member.
func (g *group) release(w *Watch) {
	ss := w.subset
	if ss == nil {
		return
	}
	w.subset = nil
	delete(ss.members, w)
	ss.demand -= w.stream.demand
	if len(ss.members) > 0 {
		return
	}
	g.subsets[ss.hash] = deleteFrom(g.subsets[ss.hash], ss)
	if len(g.subsets[ss.hash]) == 0 {
		delete(g.subsets, ss.hash)
	}
	for _, n := range ss.names {
		if l := deleteFrom(g.index[n], ss); len(l) == 0 {
			delete(g.index, n)
		} else {
			g.index[n] = l
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

// Resources lists what one view publishes now: the base resources.
func (c *Cache) Resources(view int) map[string][]*Entry {
	return c.ZoneResources(view, "")
}

// ZoneResources lists what one view sends a stream of zone now: the base
// resources with the zone's variants in their place (their entries carry
// the variant's version). Zone "" is the base. It is every audience's: each
// entry says who may read it, and a resource with audience variants is its
// base (see AudienceVariants and ResourcesFor).
func (c *Cache) ZoneResources(view int, zone string) map[string][]*Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*Entry{}
	for _, ts := range c.views[view].types {
		if len(ts.resources) > 0 {
			out[ts.typeURL] = slices.Clone(ts.withVariants(ts.all(), zone, Anonymous))
		}
	}
	return out
}

// ResourcesFor lists what one view sends a wildcard stream of audience aud
// and no zone now: what aud may read, its audience variants in place of
// their bases (their entries carry the variant's version).
func (c *Cache) ResourcesFor(view int, aud Audience) map[string][]*Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*Entry{}
	for _, ts := range c.views[view].types {
		if all := ts.allFor("", aud, nil); len(all) > 0 {
			out[ts.typeURL] = slices.Clone(all)
		}
	}
	return out
}

// AudienceVariants lists the audience variants of a resource in a view as
// they were put (see Change), in their order; nil when it has none.
func (c *Cache) AudienceVariants(view int, typeURL, name string) []*Entry {
	t := xdstype.Index(typeURL)
	if t < 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if av := c.views[view].types[t].audiences[name]; av != nil {
		return slices.Clone(av.src)
	}
	return nil
}

// VariantZones lists, sorted, the zones that have a variant of some
// resource in a view.
func (c *Cache) VariantZones(view int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ts := range c.views[view].types {
		for zone := range ts.perZone {
			out = append(out, zone)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Fetch answers a one-shot (REST-style) request of a client of audience aud
// in locality class class (ZoneKey of its node, unless the client is placed
// elsewhere: see Stream.Place) with the current resources of a type it may
// read, its class's variants where there are: those named, or all of them.
// It returns no entries and ok=false when nothing is published yet or the
// client holds the current version.
func (c *Cache) Fetch(_ context.Context, aud Audience, class string, node *core.Node, typeURL, version string, names []string) (entries []*Entry, current string, ok bool, err error) {
	t := xdstype.Index(typeURL)
	if t < 0 {
		return nil, "", false, ErrUnknownType
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.views[c.viewOf(node)].types[t]
	if ts.version == "" || version == ts.version {
		return nil, ts.version, false, nil
	}
	zone := class
	if len(names) == 0 {
		return slices.Clone(ts.allFor(zone, aud, nil)), ts.version, true, nil
	}
	for _, n := range names {
		if e := ts.get(n, zone, aud); e != nil {
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(entries, func(a, b *Entry) bool { return a == b }), ts.version, true, nil
}

// Readable reports whether a client of audience aud, with node, may read
// the resource of typeURL named name: false too when there is none.
func (c *Cache) Readable(aud Audience, node *core.Node, typeURL, name string) bool {
	t := xdstype.Index(typeURL)
	if t < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.views[c.viewOf(node)].types[t].get(name, "", aud) != nil
}

// ShortType names a type URL for people and metric labels: its xdstype
// short name (CDS, EDS, LDS, RDS), or the URL itself when it is not served.
func ShortType(typeURL string) string { return xdstype.Short(typeURL) }
