package xdscache

import (
	"maps"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/xds/xdstype"
)

// DefaultMaxZones is how many distinct zones the cache keeps streams of
// when New is given no WithMaxZones.
const DefaultMaxZones = 64

// MaxZoneKey bounds the length of a zone key a stream may have (a
// Kubernetes label value, as region and zone are, has at most 63 bytes).
const MaxZoneKey = 256

// ZoneKey is the locality class of a client: "region/zone" from its node's
// locality (sub-zones are ignored), the region alone when the node names a
// region but no zone, or "" when it names no region. A region holding "/"
// has no class ("" too): its keys could not be told apart.
func ZoneKey(n *core.Node) string {
	l := n.GetLocality()
	return ClassKey(l.GetRegion(), l.GetZone())
}

// ClassKey is the locality class of a region and a zone, by ZoneKey's rule:
// "region/zone", the region alone when there is no zone, "" when there is
// no region or it holds "/".
func ClassKey(region, zone string) string {
	if region == "" || strings.Contains(region, "/") {
		return ""
	}
	if zone == "" {
		return region
	}
	return region + "/" + zone
}

// IsRegionKey says whether a class key is a region-level class.
func IsRegionKey(key string) bool { return key != "" && !strings.Contains(key, "/") }

// Admission says how a stream's claimed class was admitted.
type Admission uint8

const (
	// Admitted: the stream is in the class it claims (or claims none).
	Admitted Admission = iota
	// RegionFallback: its zone class was over the bound, so it is in its
	// region's class.
	RegionFallback
	// Overflow: neither its zone nor its region class fit the bound; it is
	// sent the base resources.
	Overflow
)

func (a Admission) String() string {
	return [...]string{"admitted", "region-level: zone classes are over the bound", "none: zone and region classes are over the bound"}[a]
}

// zoneCensus counts the open streams of each class. A stream's class is
// admitted when it is seen first: while maxZones distinct zone classes have
// streams, a stream of another zone gets its region's class instead, and
// while maxZones region classes have streams too (or its key is longer than
// MaxZoneKey), class "" for its life, counted as overflow. What the cache
// keeps per class stays bounded whatever clients claim.
type zoneCensus struct {
	max      int
	streams  map[string]int   // class → open streams, over every view
	perView  []map[string]int // view → class → open streams
	zones    int              // classes in streams that are zones
	overflow int
	fallback int           // streams in a region class because their zone did not fit
	changed  chan struct{} // closed, and replaced, when a count or a demand changes

	// instances counts the streams of each workload instance that
	// WeighDemand named; shared is how many have more than one.
	instances map[string]int
	shared    int
}

func (z *zoneCensus) init(views int) {
	z.max = DefaultMaxZones
	z.streams = map[string]int{}
	for range views {
		z.perView = append(z.perView, map[string]int{})
	}
	z.changed = make(chan struct{})
}

func (z *zoneCensus) notify() {
	close(z.changed)
	z.changed = make(chan struct{})
}

// fits says whether a stream may join class key.
func (z *zoneCensus) fits(key string) bool {
	if len(key) > MaxZoneKey {
		return false
	}
	if z.streams[key] > 0 {
		return true
	}
	if IsRegionKey(key) {
		return len(z.streams)-z.zones < z.max
	}
	return z.zones < z.max
}

// admit counts a new stream of view claiming key; it returns the class the
// stream gets and how.
func (z *zoneCensus) admit(view int, key string) (class string, how Admission) {
	if key == "" {
		return "", Admitted
	}
	switch {
	case z.fits(key):
	case !IsRegionKey(key) && z.fits(key[:strings.IndexByte(key, '/')]):
		key, how = key[:strings.IndexByte(key, '/')], RegionFallback
		z.fallback++
	default:
		z.overflow++
		z.notify()
		return "", Overflow
	}
	if z.streams[key]++; z.streams[key] == 1 && !IsRegionKey(key) {
		z.zones++
	}
	z.perView[view][key]++
	z.notify()
	return key, how
}

// leave uncounts a stream that admit counted.
func (z *zoneCensus) leave(view int, class string, how Admission) {
	switch {
	case how == Overflow:
		z.overflow--
	case class != "":
		if how == RegionFallback {
			z.fallback--
		}
		if z.streams[class]--; z.streams[class] == 0 {
			delete(z.streams, class)
			if !IsRegionKey(class) {
				z.zones--
			}
		}
		if z.perView[view][class]--; z.perView[view][class] == 0 {
			delete(z.perView[view], class)
		}
	default:
		return
	}
	z.notify()
}

// Zones is the census of one view: how many open streams each class has
// (streams without a class, and overflow, are not in it). The map is a copy.
func (c *Cache) Zones(view int) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.zones.perView[view])
}

// ZoneOverflow is how many open streams claimed a zone beyond the bound
// (WithMaxZones, MaxZoneKey) and are sent the base resources.
func (c *Cache) ZoneOverflow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zones.overflow
}

// ZoneFallback is how many open streams are in their region's class
// because their zone class was over the bound.
func (c *Cache) ZoneFallback() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zones.fallback
}

// WeighDemand says what the stream counts for in Demand: weigh gives the
// demand weight of its node (the server's reading of the node's claim,
// within what the client's identity is granted), and instance names the
// workload instance the stream is of, so Demand counts an instance once,
// however many streams it opens. It takes effect at SetNode, so it is
// called before it; a stream never weighed counts 1, and "" counts the
// stream on its own.
func (s *Stream) WeighDemand(weigh func(*core.Node) uint64, instance string) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.weigh, s.instance = weigh, instance
}

// Place puts the stream in locality class key (see ClassKey), whatever
// its node claims: where the client's proven identity says it runs (a
// pod-bound token names the pod's node, whose topology labels give its
// region and zone). Its class, the variants it is sent and the zone its
// demand counts in follow from key as they would from a claim. It takes
// effect at SetNode, so it is called before it; a stream never placed is
// classed by its node's claim (ZoneKey).
func (s *Stream) Place(key string) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.placed, s.isPlaced = key, true
}

// classKey is the class s claims with node n: where it is placed, else
// what n says; s.c.mu is held.
func (s *Stream) classKey(n *core.Node) string {
	if s.isPlaced {
		return s.placed
	}
	return ZoneKey(n)
}

// joinInstance counts an open stream of a workload instance.
func (z *zoneCensus) joinInstance(instance string) {
	if z.instances == nil {
		z.instances = map[string]int{}
	}
	z.instances[instance]++
	if z.instances[instance] == 2 {
		z.shared++
	}
}

// leaveInstance uncounts a stream joinInstance counted.
func (z *zoneCensus) leaveInstance(instance string) {
	z.instances[instance]--
	switch z.instances[instance] {
	case 1:
		z.shared--
	case 0:
		delete(z.instances, instance)
	}
}

// instanceDemand is what one workload instance of several streams counts
// for in a Demand: the largest weight of its streams that subscribe, in
// that stream's class (the least class on a tie, so a Demand does not
// depend on the order it meets them).
type instanceDemand struct {
	zone   string
	demand uint64
}

func (d *instanceDemand) offer(zone string, demand uint64) {
	if demand > d.demand || demand == d.demand && zone < d.zone {
		d.zone, d.demand = zone, demand
	}
}

// Demand is, for one resource name of a type, the summed demand weight
// (WeighDemand) of the streams of each zone class that subscribe to it,
// over every view; the streams of one workload instance count once. Region-level
// classes and streams with no class are not counted: the Balanced mode
// gives them the None split.
func (c *Cache) Demand(typeURL, name string) map[string]uint64 {
	t := xdstype.Index(typeURL)
	if t < 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[string]uint64
	var shared map[string]*instanceDemand // instances of several streams: counted once, after
	// take out of d a watch of an instance of several streams, to count it once
	once := func(w *Watch, zone string, d *uint64) {
		s := w.stream
		if c.zones.shared == 0 || s.instance == "" || c.zones.instances[s.instance] < 2 {
			return
		}
		*d -= s.demand
		if shared == nil {
			shared = map[string]*instanceDemand{}
		}
		id := shared[s.instance]
		if id == nil {
			id = &instanceDemand{}
			shared[s.instance] = id
		}
		id.offer(zone, s.demand)
	}
	for _, v := range c.views {
		ts := v.types[t]
		e := ts.resources[name]
		for zone, auds := range ts.zones {
			if zone == "" || IsRegionKey(zone) {
				continue
			}
			for aud, g := range auds {
				if e != nil && ts.get(name, "", aud) == nil {
					continue // a client cannot want what it may not read
				}
				d := g.wildcardDemand
				for _, ss := range g.index[name] {
					d += ss.demand
				}
				if c.zones.shared > 0 {
					for w := range g.wildcard {
						once(w, zone, &d)
					}
					for _, ss := range g.index[name] {
						for w := range ss.members {
							once(w, zone, &d)
						}
					}
				}
				if d > 0 {
					if out == nil {
						out = map[string]uint64{}
					}
					out[zone] += d
				}
			}
		}
	}
	for _, id := range shared {
		if id.demand > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[id.zone] += id.demand
		}
	}
	return out
}

// demandMoved notes that a watch of g changed what it subscribes to; for
// the endpoints of a zone class this is a change of Demand.
func (c *Cache) demandMoved(w *Watch) {
	if w.ts.typ == xdstype.Endpoints && w.g.zone != "" && !IsRegionKey(w.g.zone) {
		c.zones.notify()
	}
}

// ZonesChanged returns a channel closed by the next change of Zones (in
// any view), ZoneOverflow, ZoneFallback or Demand.
func (c *Cache) ZonesChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zones.changed
}
