package publish

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// Census is what the publisher needs to know of the connected clients to
// render client-locality classes: the classes each view has streams of, the
// demand of each zone class for an upstream's endpoints, and a signal when
// either changes. *xdscache.Cache is one.
type Census interface {
	Zones(view int) map[string]int
	Demand(typeURL, name string) map[string]uint64
	ZonesChanged() <-chan struct{}
}

// Demand changes are applied to Balanced upstreams with hysteresis, so that
// client churn does not push to every client each time one connects: a
// new demand is applied once it has held for DemandQuiet (counted from the
// census's last change), or DemandMaxDelay after it first differed from
// the applied one, whichever comes first.
const (
	DemandQuiet    = 2 * time.Second
	DemandMaxDelay = 10 * time.Second
	// classRefreshEvery bounds how often connects and disconnects make the
	// publisher look at the census: a burst of them is handled at once.
	classRefreshEvery = 100 * time.Millisecond
)

// variantKey is one client class of one view (rendering).
type variantKey struct {
	view  int
	class string
}

// classState is what the publisher knows of client classes; p.mu guards it.
type classState struct {
	census Census
	// classes are the classes with streams in each view, as last applied.
	classes [translate.NumRenderings][]string
	// demand is the demand applied to each Balanced upstream; pending the
	// observed one waiting for its hysteresis.
	demand  map[topology.Key]demandReading
	pending map[topology.Key]*pendingDemand
	// loads, when set, reads the load reports of Balanced upstreams;
	// reading is what was last read for each, once a bucket.
	loads   *LoadDemand
	reading map[topology.Key]*loadReading
	// affine are the upstreams published with a mode other than None.
	affine map[topology.Key]struct{}
	seq    uint64 // class publications since the last revision
	now    func() time.Time
	// censusAt is when the census last changed (zero: not since start), so
	// a demand first seen after a long quiet is applied at once.
	censusAt time.Time
	// poke wakes RunClasses after a publication that touched an affinity
	// upstream: a Balanced one must start following its demand.
	poke chan struct{}
	// demandChanged is closed, and replaced, when a demand is applied.
	demandChanged chan struct{}
}

type pendingDemand struct {
	demandReading
	since, moved time.Time // first differed from the applied; last changed
}

// follow keeps track of a published upstream's mode.
func (c *classState) follow(k topology.Key, mode affinity.Mode) {
	switch mode {
	case affinity.None:
		c.forget(k)
	case affinity.Balanced:
		c.affine[k] = struct{}{}
		select {
		case c.poke <- struct{}{}:
		default:
		}
	default:
		c.affine[k] = struct{}{}
		delete(c.demand, k)
		delete(c.pending, k)
		delete(c.reading, k)
	}
}

// forget drops what is kept for an upstream that has no affinity now.
func (c *classState) forget(k topology.Key) {
	delete(c.affine, k)
	delete(c.demand, k)
	delete(c.pending, k)
	delete(c.reading, k)
}

// ClassOf is the locality a class key stands for: "region/zone", or a
// region alone for a region-level class.
func ClassOf(key string) affinity.Zone {
	region, zone, _ := strings.Cut(key, "/")
	return affinity.Zone{Region: region, Zone: zone}
}

// SetCensus makes the publisher render a variant of every affinity
// upstream's endpoints for each client class the census has streams of;
// call it before the first publication, then run RunClasses.
func (p *Publisher) SetCensus(c Census) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cls.census = c
}

// SetLoadDemand makes Balanced upstreams whose clients report load follow
// their reported request rates where the window holds enough reports
// (observeDemand); call it before RunClasses.
func (p *Publisher) SetLoadDemand(l LoadDemand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.Requests == nil || l.Bucket <= 0 {
		p.cls.loads = nil
		return
	}
	p.cls.loads = &l
}

// AppliedDemand is the demand the Balanced split of upstream k was last
// rendered with, by zone class (nil when none), and whether it is the
// zones' reported request shares (load reports) rather than the connected
// clients' demand weights.
func (p *Publisher) AppliedDemand(k topology.Key) (demand []affinity.Demand, fromLoads bool) {
	d, from := p.AppliedDemandFrom(k)
	return d, from.LoadReports
}

// AppliedDemandFrom is AppliedDemand and where that demand came from.
func (p *Publisher) AppliedDemandFrom(k topology.Key) ([]affinity.Demand, DemandOrigin) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.cls.demand[k]
	return slices.Clone(d.demand), d.origin
}

// DemandChanged returns a channel closed when the demand applied to some
// Balanced upstream changes next.
func (p *Publisher) DemandChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cls.demandChanged
}

// Classes lists the classes each view has variants rendered for.
func (p *Publisher) Classes() [translate.NumRenderings][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [translate.NumRenderings][]string
	for v := range out {
		out[v] = slices.Clone(p.cls.classes[v])
	}
	return out
}

// RunClasses follows the census until ctx is done: a class gets its
// variants when its first client connects and loses them when its last
// leaves; Balanced upstreams follow their demand with hysteresis.
func (p *Publisher) RunClasses(ctx context.Context) error {
	p.mu.Lock()
	census := p.cls.census
	p.mu.Unlock()
	if census == nil {
		<-ctx.Done()
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		changed := census.ZonesChanged()
		next := p.refreshClasses()
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			p.mu.Lock()
			p.cls.censusAt = p.cls.now()
			p.mu.Unlock()
		case <-timer.C:
		case <-p.cls.poke:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(classRefreshEvery):
		}
	}
}

// refreshClasses applies the census to what is published and returns how
// long until a pending demand is due (0 for none).
func (p *Publisher) refreshClasses() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &p.cls
	if c.census == nil {
		return 0
	}
	var classes [translate.NumRenderings][]string
	for v := range classes {
		classes[v] = slices.Sorted(maps.Keys(c.census.Zones(v)))
	}
	if p.last == nil {
		c.classes = classes
		return 0
	}
	now := c.now()
	// A class joining or leaving costs each affinity upstream that class's
	// derivation only; a demand that moved re-derives that upstream's all.
	added, removed := classDiff(classes, c.classes), classDiff(c.classes, classes)
	classesMoved := false
	for v := range added {
		classesMoved = classesMoved || len(added[v]) > 0 || len(removed[v]) > 0
	}
	var due time.Duration
	var rerender []topology.Key
	reports := false // some Balanced upstream's clients report load
	var window time.Duration
	if c.loads != nil {
		window = c.loads.Window
	}
	for k := range c.affine {
		pub := p.upstream[k]
		if pub == nil || pub.state.Upstream.ModeOf() != affinity.Balanced {
			continue
		}
		reading := c.readLoads(k, pub.name, now, classes, classesMoved)
		reports = reports || reading.ok
		observed := observeDemand(c.census.Demand(resource.EndpointType, pub.name), reading, window, c.demand[k].origin)
		if sameDemand(observed, c.demand[k]) {
			delete(c.pending, k)
			continue
		}
		pd := c.pending[k]
		switch {
		case pd == nil:
			// the census, and so this demand, has held since censusAt: an
			// upstream newly Balanced among settled clients is not kept
			// waiting, while one whose clients are churning is; load
			// reports move once a bucket, and a switch between the two
			// sources is a change of its own, now
			moved := c.censusAt
			if observed.origin.LoadReports || c.demand[k].origin.LoadReports {
				moved = now
			}
			pd = &pendingDemand{demandReading: observed, since: now, moved: moved}
			c.pending[k] = pd
		case !sameDemand(pd.demandReading, observed):
			pd.demandReading, pd.moved = observed, now
		default:
			pd.demandReading = observed // within the band: the latest figures
		}
		wait := min(DemandQuiet-now.Sub(pd.moved), DemandMaxDelay-now.Sub(pd.since))
		if wait <= 0 {
			c.demand[k] = pd.demandReading
			if len(pd.demand) == 0 {
				delete(c.demand, k)
			}
			delete(c.pending, k)
			rerender = append(rerender, k)
			continue
		}
		if due == 0 || wait < due {
			due = wait
		}
	}
	if reports {
		// look again when the next bucket's figures are in
		bucket := c.loads.Bucket
		next := bucket - time.Duration(now.UnixNano()%int64(bucket)) + time.Millisecond
		if due == 0 || next < due {
			due = next
		}
	}
	demandMoved := len(rerender) > 0
	if !classesMoved && !demandMoved {
		return due
	}
	c.classes = classes
	whole := make(map[topology.Key]bool, len(rerender))
	for _, k := range rerender {
		whole[k] = true
	}
	if classesMoved {
		for k := range c.affine {
			if !whole[k] {
				rerender = append(rerender, k)
			}
		}
	}
	slices.SortFunc(rerender, topology.Key.Compare)
	c.seq++
	version := p.Version(p.last.Revision) + "." + strconv.FormatUint(c.seq, 10)
	changes := p.changes[:0]
	for _, k := range rerender {
		pub := p.upstream[k]
		if pub == nil {
			continue
		}
		var next map[variantKey]*xdscache.Entry
		var err error
		if whole[k] {
			next, err = p.renderVariants(pub, pub.state, version, &p.scratch, false)
		} else {
			next, err = p.renderAdded(pub, version, added, removed)
		}
		if err != nil {
			p.log.Error("client-class variants not rendered; those clients keep what they have", "upstream", k, "error", err)
			continue
		}
		changes = appendVariantChanges(changes, pub, next)
		pub.variants = next
	}
	if len(changes) > 0 {
		p.cache.Apply(xdscache.Update{Version: version, Changes: changes})
	}
	if demandMoved {
		close(c.demandChanged)
		c.demandChanged = make(chan struct{})
	}
	clear(changes)
	p.changes = changes[:0]
	return due
}

// readLoads is the load reports of upstream k's clients (its cluster
// name), read at most once a bucket and again when the classes moved, kept
// for the connected zone classes only.
func (c *classState) readLoads(k topology.Key, name string, now time.Time, classes [translate.NumRenderings][]string, classesMoved bool) loadReading {
	if c.loads == nil {
		return loadReading{}
	}
	epoch := now.UnixNano() / int64(c.loads.Bucket)
	if r := c.reading[k]; r != nil && r.epoch == epoch && !classesMoved {
		return *r
	}
	requests, ok := c.loads.Requests(name, now)
	r := &loadReading{epoch: epoch, ok: ok}
	for class, n := range requests {
		if n > 0 && isZoneClass(class) && connectedIn(classes, class) {
			if r.requests == nil {
				r.requests = map[string]uint64{}
			}
			r.requests[class] = n
		}
	}
	c.reading[k] = r
	return *r
}

// connectedIn says whether some view of classes has class.
func connectedIn(classes [translate.NumRenderings][]string, class string) bool {
	for v := range classes {
		if _, ok := slices.BinarySearch(classes[v], class); ok {
			return true
		}
	}
	return false
}

// demandOf is a census demand as the Balanced split takes it, in zone order.
func demandOf(m map[string]uint64) []affinity.Demand {
	if len(m) == 0 {
		return nil
	}
	out := make([]affinity.Demand, 0, len(m))
	for k, w := range m {
		out = append(out, affinity.Demand{Zone: ClassOf(k), Weight: w})
	}
	slices.SortFunc(out, func(a, b affinity.Demand) int { return a.Zone.Compare(b.Zone) })
	return out
}

// classDiff lists, per view, the classes of a that b lacks.
func classDiff(a, b [translate.NumRenderings][]string) [translate.NumRenderings][]string {
	var out [translate.NumRenderings][]string
	for v := range a {
		for _, class := range a[v] {
			if _, found := slices.BinarySearch(b[v], class); !found {
				out[v] = append(out[v], class)
			}
		}
	}
	return out
}

// renderAdded is pub's variants after the classes removed left and those
// added joined: the others are kept as they are.
func (p *Publisher) renderAdded(pub *published, version string, added, removed [translate.NumRenderings][]string) (map[variantKey]*xdscache.Entry, error) {
	pub.forgetLeft(&p.cls)
	fresh, err := p.renderClasses(pub, pub.state, version, &p.scratch, false, added)
	if err != nil {
		return nil, err
	}
	var out map[variantKey]*xdscache.Entry
	keep := func(k variantKey, e *xdscache.Entry) {
		if out == nil {
			out = map[variantKey]*xdscache.Entry{}
		}
		out[k] = e
	}
	for k, e := range pub.variants {
		if _, gone := slices.BinarySearch(removed[k.view], k.class); !gone {
			keep(k, e)
		}
	}
	for k, e := range fresh {
		keep(k, e)
	}
	return out, nil
}

// renderVariants renders, for an affinity upstream, the endpoints each
// client class of each view receives where they differ from the base's
// (pub.endpoints, already built for cur). A class whose derivation fails
// (too many effective priorities) receives the base and is logged once.
// force makes every variant a new entry, as a changed cluster needs.
func (p *Publisher) renderVariants(pub *published, cur *topology.UpstreamState, version string, scratch *[]byte, force bool) (map[variantKey]*xdscache.Entry, error) {
	pub.forgetLeft(&p.cls)
	return p.renderClasses(pub, cur, version, scratch, force, p.cls.classes)
}

// forgetLeft drops the failures of classes no client is in any more, so
// what pub keeps stays within the classes connected.
func (pub *published) forgetLeft(c *classState) {
	for class := range pub.failed {
		if !c.connected(class) {
			delete(pub.failed, class)
		}
	}
}

// connected says whether some view has clients of class.
func (c *classState) connected(class string) bool {
	for v := range c.classes {
		if _, ok := slices.BinarySearch(c.classes[v], class); ok {
			return true
		}
	}
	return false
}

// renderClasses is renderVariants for the given classes of each view only.
func (p *Publisher) renderClasses(pub *published, cur *topology.UpstreamState, version string, scratch *[]byte, force bool,
	classes [translate.NumRenderings][]string) (map[variantKey]*xdscache.Entry, error) {
	if cur.Upstream.ModeOf() == affinity.None || p.cls.census == nil {
		return nil, nil
	}
	var out map[variantKey]*xdscache.Entry
	mode := cur.Upstream.ModeOf()
	derived := map[string]*topology.ClassState{}
	// under PreferSameRegion the zones of a region are one derivation and
	// share one encoding
	shared := map[variantKey]*xdscache.Entry{}
	for v := range translate.NumRenderings {
		for _, class := range classes[v] {
			from := ClassOf(class)
			if mode == affinity.PreferSameRegion {
				from.Zone = ""
			}
			if e, ok := shared[variantKey{int(v), from.String()}]; ok {
				if e != nil {
					out[variantKey{int(v), class}] = e
				}
				continue
			}
			cs, ok := derived[from.String()]
			if !ok {
				var err error
				cs, err = cur.ForClass(from, p.cls.demand[cur.Upstream.Key].demand)
				if err != nil {
					if !pub.failed[class] {
						p.log.Warn("a client class receives the base split", "upstream", cur.Upstream.Key, "class", class, "error", err)
					}
					pub.markFailed(class, true)
					cs = nil
				} else {
					pub.markFailed(class, false)
				}
				derived[from.String()] = cs
			}
			sharedKey := variantKey{int(v), from.String()}
			shared[sharedKey] = nil
			if cs == nil || cs.Base(cur) {
				continue
			}
			var err error
			if *scratch, err = translate.AppendEndpointsNamed((*scratch)[:0], pub.name, cs.State, v); err != nil {
				return nil, err
			}
			if bytes.Equal(pub.endpoints[v].Any.GetValue(), *scratch) {
				continue // the class receives what the base is
			}
			key := variantKey{int(v), class}
			var old *xdscache.Entry
			if !force {
				old = pub.variants[key]
			}
			if out == nil {
				out = map[variantKey]*xdscache.Entry{}
			}
			out[key] = entry(old, pub.name, version, resource.EndpointType, *scratch)
			shared[sharedKey] = out[key]
		}
	}
	return out, nil
}

func (pub *published) markFailed(class string, failed bool) {
	switch {
	case failed && pub.failed == nil:
		pub.failed = map[string]bool{class: true}
	case failed:
		pub.failed[class] = true
	default:
		delete(pub.failed, class)
	}
}

// appendVariantChanges appends the puts and deletes that take was's
// variants to next's, in a stable order.
func appendVariantChanges(changes []xdscache.Change, was *published, next map[variantKey]*xdscache.Entry) []xdscache.Change {
	var prev map[variantKey]*xdscache.Entry
	if was != nil {
		prev = was.variants
	}
	keys := slices.Collect(maps.Keys(next))
	for k := range prev {
		if _, ok := next[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b variantKey) int {
		if a.view != b.view {
			return a.view - b.view
		}
		return strings.Compare(a.class, b.class)
	})
	for _, k := range keys {
		e, old := next[k], prev[k]
		switch {
		case e == nil:
			changes = append(changes, xdscache.Change{View: k.view, TypeURL: resource.EndpointType, Name: old.Name, Zone: k.class})
		case e != old:
			changes = append(changes, xdscache.Change{View: k.view, TypeURL: resource.EndpointType, Name: e.Name, Zone: k.class, Entry: e})
		}
	}
	return changes
}
