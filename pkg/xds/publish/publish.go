package publish

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/pkg/xds/xdstype"
)

// NewInstanceID returns a random identifier for this process; versions are
// prefixed with it so they never repeat across restarts or replicas.
func NewInstanceID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; a clock is a fallback.
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b[:])
}

// Stats describes one publication, for metrics and logs.
type Stats struct {
	Revision uint64
	Version  string
	// Upstreams translated, and of those how many only for their endpoints.
	Upstreams, EndpointOnly int
	// Changes per type: resources put or deleted.
	Changes  Counts
	Duration time.Duration
	// Changed are the upstreams the publication changed, in the order it
	// took them. The slice is the publisher's, reused by the next
	// publication: it is valid only during BeforeApply and OnPublish, which copy what they keep.
	Changed []UpstreamChange
	// Snapshot is the snapshot published.
	Snapshot *topology.Snapshot
}

// Counts is a number for each published type, by xdstype index.
type Counts [xdstype.Count]int

// Of is the count of one type URL.
func (c *Counts) Of(typeURL string) int {
	if t := xdstype.Index(typeURL); t >= 0 {
		return c[t]
	}
	return 0
}

func (c *Counts) add(typeURL string) {
	if t := xdstype.Index(typeURL); t >= 0 {
		c[t]++
	}
}

// Types is how many types have a count.
func (c *Counts) Types() int {
	n := 0
	for _, v := range c {
		if v > 0 {
			n++
		}
	}
	return n
}

// Publisher publishes topology snapshots to a cache. Publish calls are
// serialized; it keeps what it last published to translate only what changed.
type Publisher struct {
	mu       sync.Mutex
	cache    xdscache.Publisher
	instance string
	log      *slog.Logger

	last     *topology.Snapshot
	upstream map[topology.Key]*published
	spatial  spatialSet

	spatialOptions translate.SpatialOptions
	// export is the default visibility of an object that sets no exportTo
	// (not set: every namespace).
	export  topology.Export
	enc     *translate.Encoder
	scratch []byte // the wire encoding of the CLA being built
	// changes and next are reused by every publication
	changes []xdscache.Change
	next    map[topology.Key]*published
	pairs   []UpstreamChange
	pubs    []*published
	// BeforeApply, when set, is called with each publication's changes and
	// snapshot just before its resources reach the cache, and so its
	// clients: what must know a resource before any client can name it
	// (the load-report catalog) follows here. Duration is not set yet.
	BeforeApply func(Stats)
	// OnPublish, when set, is called after each publication.
	OnPublish func(Stats)
	// OnReject, when set, is called when a snapshot cannot be published.
	OnReject func(rev uint64, err error)

	changed chan struct{} // closed after each publication

	cls classState
}

// published is what was last published for one upstream.
type published struct {
	state     *topology.UpstreamState
	name      string // of the cluster, and of its endpoints
	clusters  [translate.NumRenderings]*xdscache.Entry
	endpoints [translate.NumRenderings]*xdscache.Entry
	listener  *xdscache.Entry
	route     *xdscache.Entry
	// variants are the endpoints of client classes that differ from the
	// base (nil without affinity); failed the classes that could not be
	// derived and receive the base.
	variants map[variantKey]*xdscache.Entry
	failed   map[string]bool
}

// New returns a Publisher writing to c with version prefix instance.
func New(c xdscache.Publisher, instance string, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cache: c, instance: instance, log: log, upstream: map[topology.Key]*published{}, changed: make(chan struct{}),
		enc: translate.NewEncoder(),
		cls: classState{classes: topology.NewClientClasses(nil), affine: map[topology.Key]struct{}{}}}
}

// SetSpatialOptions says where Envoy's spatial listener listens; call it before the
// first publication.
func (p *Publisher) SetSpatialOptions(o translate.SpatialOptions) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spatialOptions = o
}

// SetDefaultExport sets who may read an Upstream or SpatialDomain that sets
// no spec.exportTo; call it before the first publication. Without it, every
// client may.
func (p *Publisher) SetDefaultExport(def topology.Export) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.export = def
}

// visibility is who may read what is rendered of an object of namespace
// own whose rule in force is e (set: ExportOf's).
func visibility(e topology.Export, own string) xdscache.Visibility {
	if !e.Set || e.All {
		return xdscache.Visibility{}
	}
	ns := e.Namespaces()
	if e.Own {
		ns = append(ns, own)
	}
	return xdscache.VisibleToNamespaces(ns...)
}

// stamp makes every entry of pub say that vis is who may read it; an
// entry that already says so is kept, and entries shared by renderings
// stay shared.
func (pub *published) stamp(vis xdscache.Visibility) {
	for _, list := range []*[translate.NumRenderings]*xdscache.Entry{&pub.clusters, &pub.endpoints} {
		first := list[0]
		for v := range translate.NumRenderings {
			if v > 0 && list[v] == first {
				list[v] = list[0]
				continue
			}
			list[v] = list[v].WithVisibility(vis)
		}
	}
	pub.listener = pub.listener.WithVisibility(vis)
	pub.route = pub.route.WithVisibility(vis)
}

// Version is the version string of a topology revision.
func (p *Publisher) Version(rev uint64) string {
	b := make([]byte, 0, len(p.instance)+21)
	b = append(append(b, p.instance...), '-')
	return string(strconv.AppendUint(b, rev, 10))
}

// LastRevision is the last revision published, 0 before the first.
func (p *Publisher) LastRevision() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return 0
	}
	return p.last.Revision
}

// Changed returns a channel closed by the next publication.
func (p *Publisher) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// Published reports whether any snapshot has been published.
func (p *Publisher) Published() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last != nil
}

// Run publishes the directory's current snapshot, then every newer one,
// until ctx is done. A slow publication skips straight to the newest revision.
func (p *Publisher) Run(ctx context.Context, d *topology.Directory) error {
	for {
		changed := d.Changed()
		if _, err := p.Publish(d.Current()); err != nil {
			p.log.Error("snapshot not published; the last good one keeps serving", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Publish translates what changed between the last published snapshot and
// s, and applies it to the cache as one update. On any error nothing is
// published and the last good publication keeps serving.
func (p *Publisher) Publish(s *topology.Snapshot) (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := time.Now()
	st := Stats{Revision: s.Revision, Version: p.Version(s.Revision)}
	if p.last != nil && p.last.Revision >= s.Revision && p.last != s {
		return st, nil // an older or equal revision: already covered
	}
	if p.last == s {
		return st, nil
	}
	if p.next == nil {
		p.next = map[topology.Key]*published{}
	}
	var (
		changes = p.changes[:0]
		next    = p.next
		gone    []topology.Key
	)
	defer func() {
		// keep the scratch small after a first publication of everything
		if cap(changes) > 1024 {
			changes = nil
		}
		clear(changes[:cap(changes)])
		p.changes = changes[:0]
		if len(next) > 1024 {
			p.next = nil
		} else {
			clear(next)
		}
	}()
	emit := func(ch xdscache.Change) {
		changes = append(changes, ch)
		st.Changes.add(ch.TypeURL)
	}
	put := func(view int, typeURL string, old, e *xdscache.Entry) {
		if old == e {
			return
		}
		emit(xdscache.Change{View: view, TypeURL: typeURL, Name: e.Name, Entry: e})
	}
	del := func(view int, typeURL string, e *xdscache.Entry) {
		if e != nil {
			changes = append(changes, xdscache.Change{View: view, TypeURL: typeURL, Name: e.Name})
			st.Changes.add(typeURL)
		}
	}
	pairs := p.pairs[:0]
	err := p.changedUpstreams(s, func(old, cur *topology.UpstreamState) error {
		pairs = append(pairs, UpstreamChange{Old: old, Cur: cur})
		return nil
	})
	defer func() { p.pairs, p.pubs = clearSlice(pairs), clearSlice(p.pubs) }()
	var pubs []*published
	if err == nil {
		pubs, err = p.translateAll(pairs, s.ClientClasses())
	}
	for i := 0; err == nil && i < len(pairs); i++ {
		old, cur, pub := pairs[i].Old, pairs[i].Cur, pubs[i]
		var prev *published
		if old != nil {
			prev = p.upstream[old.Upstream.Key]
		}
		if cur == nil {
			gone = append(gone, old.Upstream.Key)
			for v := range translate.NumRenderings {
				del(int(v), resource.ClusterType, prev.clusters[v])
				del(int(v), resource.EndpointType, prev.endpoints[v])
				del(int(v), resource.RouteType, prev.route)
			}
			del(int(translate.PerEndpoint), resource.ListenerType, prev.listener)
			continue
		}
		next[cur.Upstream.Key] = pub
		st.Upstreams++
		if prev != nil && prev.clusters == pub.clusters && prev.listener == pub.listener && prev.route == pub.route {
			st.EndpointOnly++
		}
		var was published
		if prev != nil {
			was = *prev
		}
		for v := range translate.NumRenderings {
			put(int(v), resource.ClusterType, was.clusters[v], pub.clusters[v])
			put(int(v), resource.EndpointType, was.endpoints[v], pub.endpoints[v])
			put(int(v), resource.RouteType, was.route, pub.route)
		}
		// API listeners are for proxyless gRPC; an Envoy would reject them.
		put(int(translate.PerEndpoint), resource.ListenerType, was.listener, pub.listener)
		n := len(changes)
		changes = appendVariantChanges(changes, &was, pub.variants)
		st.Changes[xdstype.Endpoints] += len(changes) - n
	}
	var spatial spatialSet
	if err == nil {
		spatial, err = p.spatialUpdate(s, put, del, emit)
	}
	if err != nil {
		if p.OnReject != nil {
			p.OnReject(s.Revision, err)
		}
		return st, fmt.Errorf("revision %d: %w", s.Revision, err)
	}
	var rerendered map[topology.Key]*published
	if !s.ClientClasses().Equal(p.cls.classes) {
		n := len(changes)
		changes, rerendered = p.rerenderClasses(s, next, changes)
		st.Changes[xdstype.Endpoints] += len(changes) - n
	}
	p.spatial = spatial
	for k, pub := range next {
		p.upstream[k] = pub
		p.cls.follow(k, pub.state.Upstream.ModeOf())
	}
	for k, pub := range rerendered {
		p.upstream[k] = pub
	}
	for _, k := range gone {
		delete(p.upstream, k)
		p.cls.follow(k, affinity.None)
	}
	p.cls.classes = s.ClientClasses()
	st.Changed = pairs
	st.Snapshot = s
	if p.BeforeApply != nil {
		p.BeforeApply(st)
	}
	p.cache.Apply(xdscache.Update{Version: st.Version, Changes: changes})
	p.last = s
	close(p.changed)
	p.changed = make(chan struct{})
	st.Duration = time.Since(start)
	if p.OnPublish != nil {
		p.OnPublish(st)
	}
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.log.Debug("published", "revision", st.Revision, "version", st.Version, "upstreams", st.Upstreams,
			"endpointOnly", st.EndpointOnly, "changes", len(changes), "duration", st.Duration)
	}
	return st, nil
}

// changedUpstreams calls fn for every upstream that differs between the last
// published snapshot and s: from the keys s says changed since, or by
// comparing the two whole lists when s no longer remembers that far.
func (p *Publisher) changedUpstreams(s *topology.Snapshot, fn func(old, cur *topology.UpstreamState) error) error {
	if p.last == nil {
		return diff(nil, s.Upstreams(), fn)
	}
	keys, ok := s.ChangedSince(p.last.Revision)
	if !ok {
		return diff(p.last.Upstreams(), s.Upstreams(), fn)
	}
	for _, k := range keys {
		old, cur := p.last.Upstream(k), s.Upstream(k)
		if old == cur {
			continue
		}
		if err := fn(old, cur); err != nil {
			return err
		}
	}
	return nil
}

// diff calls fn for every upstream that differs between two key-sorted
// lists: (nil, cur) added, (old, nil) removed, (old, cur) changed. States
// are immutable and shared while unchanged, so a pointer compare suffices.
func diff(prev, cur []*topology.UpstreamState, fn func(old, cur *topology.UpstreamState) error) error {
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(cur):
			c = -1
		default:
			c = prev[i].Upstream.Key.Compare(cur[j].Upstream.Key)
		}
		var err error
		switch {
		case c < 0:
			err = fn(prev[i], nil)
			i++
		case c > 0:
			err = fn(nil, cur[j])
			j++
		default:
			if prev[i] != cur[j] {
				err = fn(prev[i], cur[j])
			}
			i++
			j++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// UpstreamChange is one upstream to publish: (nil, Cur) added, (Old, nil)
// removed, else changed.
type UpstreamChange struct{ Old, Cur *topology.UpstreamState }

// parallelTranslation is how many changed upstreams make a publication
// translate them on every core: a first publication, or a large batch.
const parallelTranslation = 256

// translateAll translates every changed upstream (nil for a removed one),
// checking each one's references; on several cores when there are many. The
// first error in key order is returned, whatever the scheduling.
func (p *Publisher) translateAll(pairs []UpstreamChange, classes *topology.ClientClasses) ([]*published, error) {
	pubs := p.pubs[:0]
	for range pairs {
		pubs = append(pubs, nil)
	}
	p.pubs = pubs
	job := translateJob{p: p, pairs: pairs, pubs: pubs, classes: classes}
	workers := min(runtime.GOMAXPROCS(0), len(pairs)/parallelTranslation+1)
	if workers <= 1 {
		for i := range pairs {
			if err := job.one(i, &p.scratch); err != nil {
				return nil, err
			}
		}
		return pubs, nil
	}
	shared := job // only the parallel path's copy goes to the heap
	errs := make([]error, len(pairs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var scratch []byte
			for i := w; i < len(pairs); i += workers {
				errs[i] = shared.one(i, &scratch)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pubs, nil
}

// translateJob is what translateAll translates: a method rather than a
// closure, so that translating one upstream on the caller's goroutine
// allocates nothing for it.
type translateJob struct {
	p       *Publisher
	pairs   []UpstreamChange
	pubs    []*published
	classes *topology.ClientClasses
}

func (j *translateJob) one(i int, scratch *[]byte) error {
	old, cur := j.pairs[i].Old, j.pairs[i].Cur
	if cur == nil {
		return nil
	}
	var prev *published
	if old != nil {
		prev = j.p.upstream[old.Upstream.Key]
	}
	pub, err := j.p.translate(prev, cur, j.classes, scratch)
	if err == nil {
		err = pub.references(cur.Upstream.Key)
	}
	if err != nil {
		return fmt.Errorf("upstream %s: %w", cur.Upstream.Key, err)
	}
	j.pubs[i] = pub
	return nil
}

// translate builds the entries of one upstream, reusing a previous entry
// (and its version) wherever the encoded bytes did not change. An upstream
// whose Upstream object did not change is translated only for its
// endpoints; a cluster change always re-sends the endpoints too. Every
// resource is encoded straight to the wire, in scratch.
func (p *Publisher) translate(prev *published, cur *topology.UpstreamState, classes *topology.ClientClasses, scratch *[]byte) (pub *published, err error) {
	pub = &published{state: cur}
	if prev != nil {
		pub.name = prev.name
	} else {
		pub.name = xdsname.Cluster(cur.Upstream.Key)
	}
	clusterChanged := prev == nil || prev.state.ClusterRevision != cur.ClusterRevision
	if clusterChanged {
		// each rendering has its own cluster: the load-balancing policy a
		// client kind can carry out (translate.LbPolicyOf)
		for v := range translate.NumRenderings {
			if *scratch, err = p.enc.AppendCluster((*scratch)[:0], cur, v); err != nil {
				return nil, err
			}
			if v > 0 && bytes.Equal(pub.clusters[0].Any.GetValue(), *scratch) {
				pub.clusters[v] = pub.clusters[0] // the same bytes: one entry
				continue
			}
			pub.clusters[v] = entry(prev.get(resource.ClusterType, v), pub.name, resource.ClusterType, *scratch)
		}
		k := cur.Upstream.Key
		for _, r := range []struct {
			typeURL, name string
			append        func([]byte, *topology.UpstreamState) ([]byte, error)
			entry         **xdscache.Entry
		}{
			{resource.ListenerType, translate.ListenerName(k), p.enc.AppendListener, &pub.listener},
			{resource.RouteType, translate.RouteName(k), p.enc.AppendRoute, &pub.route},
		} {
			if *scratch, err = r.append((*scratch)[:0], cur); err != nil {
				return nil, err
			}
			*r.entry = entry(prev.get(r.typeURL, 0), r.name, r.typeURL, *scratch)
		}
	} else {
		pub.clusters, pub.listener, pub.route = prev.clusters, prev.listener, prev.route
	}
	for v := range translate.NumRenderings {
		if *scratch, err = translate.AppendEndpointsNamed((*scratch)[:0], pub.name, cur, v); err != nil {
			return nil, err
		}
		var old *xdscache.Entry
		if !clusterChanged { // a changed cluster makes clients re-fetch its endpoints: always send them
			old = prev.get(resource.EndpointType, v)
		}
		pub.endpoints[v] = entry(old, pub.name, resource.EndpointType, *scratch)
	}
	if prev != nil {
		pub.variants, pub.failed = prev.variants, maps.Clone(prev.failed)
	}
	if pub.variants, err = p.renderVariants(pub, cur, classes, scratch, clusterChanged); err != nil {
		return nil, err
	}
	// Who may read them is part of each entry: a change of exportTo alone
	// changes no bytes, yet moves the resources in or out of what clients
	// are sent.
	pub.stamp(visibility(cur.Upstream.ExportOf(p.export), cur.Upstream.Key.Namespace))
	return pub, nil
}

// entry is old when it holds b, else a new entry of a copy of b.
func entry(old *xdscache.Entry, name, typeURL string, b []byte) *xdscache.Entry {
	if old != nil && old.Name == name && bytes.Equal(old.Any.GetValue(), b) {
		return old
	}
	return xdscache.NewEntryBytes(name, contentVersion(b), typeURL, bytes.Clone(b))
}

// contentVersion is a resource's version: 16 hex digits of the xxHash64
// of its bytes. It is what a Delta client holding the resource says it
// holds (initial_resource_versions) when it reconnects, so it must name
// the content, not the publication: every replica, and a replica
// restarted, gives the same bytes the same version, and a client
// reconnecting to either is sent only what it lacks. (Versions made of
// the publication's instance and revision named a restarted replica's
// unchanged resources anew, and a reconnect storm re-sent every resource
// to every Delta client.)
func contentVersion(b []byte) string {
	var sum [8]byte
	var out [16]byte
	binary.BigEndian.PutUint64(sum[:], xxhash.Sum64(b))
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

func clearSlice[S ~[]E, E any](s S) S {
	if cap(s) > 1024 {
		return nil
	}
	clear(s[:cap(s)])
	return s[:0]
}

// references checks what one upstream's resources refer to by name: the
// cluster's endpoints and the route's cluster are the upstream's cluster
// name, and the listener's routes are the route (the encoder writes
// exactly these names; a mismatch here is a bug, and is never published).
func (p *published) references(k topology.Key) error {
	var missing []string
	for v := range translate.NumRenderings {
		if e := p.endpoints[v]; e == nil || e.Name != p.clusters[v].Name {
			missing = append(missing, fmt.Sprintf("cluster %s needs EDS %q (%s)", p.clusters[v].Name, p.clusters[v].Name, v))
		}
		if p.clusters[v].Name != xdsname.Cluster(k) {
			missing = append(missing, fmt.Sprintf("route %s needs CDS %q (%s)", p.route.Name, xdsname.Cluster(k), v))
		}
	}
	if p.route.Name != translate.RouteName(k) {
		missing = append(missing, fmt.Sprintf("route %s needs CDS %q", p.route.Name, xdsname.Cluster(k)))
	}
	if p.listener.Name != translate.ListenerName(k) {
		missing = append(missing, fmt.Sprintf("listener %s needs RDS %q", p.listener.Name, translate.RouteName(k)))
	}
	if len(missing) > 0 {
		return &InconsistencyError{Missing: missing}
	}
	return nil
}

func (p *published) get(typeURL string, v translate.Rendering) *xdscache.Entry {
	if p == nil {
		return nil
	}
	switch typeURL {
	case resource.ClusterType:
		return p.clusters[v]
	case resource.EndpointType:
		return p.endpoints[v]
	case resource.ListenerType:
		return p.listener
	case resource.RouteType:
		return p.route
	}
	return nil
}

type named interface {
	proto.Message
	GetName() string
}

func reuse(old *xdscache.Entry, m proto.Message, force bool) (*xdscache.Entry, error) {
	e, err := xdscache.NewEntry(resourceName(m), "", m)
	if err != nil {
		return nil, err
	}
	e.Version = contentVersion(e.Any.GetValue())
	if old != nil && !force && bytes.Equal(old.Any.GetValue(), e.Any.GetValue()) {
		return old, nil
	}
	return e, nil
}

func resourceName(m proto.Message) string {
	if n, ok := m.(named); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}
