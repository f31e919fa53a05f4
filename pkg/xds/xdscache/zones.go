package xdscache

import (
	"maps"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// DefaultMaxZones is how many distinct zones the cache keeps streams of
// when New is given no WithMaxZones.
const DefaultMaxZones = 64

// MaxZoneKey bounds the length of a zone key a stream may have (a
// Kubernetes label value, as region and zone are, has at most 63 bytes).
const MaxZoneKey = 256

// ZoneKey is the zone of a client: its node's locality "region/zone", or ""
// when the node has no region. Sub-zones are ignored.
func ZoneKey(n *core.Node) string {
	l := n.GetLocality()
	if l.GetRegion() == "" {
		return ""
	}
	return l.GetRegion() + "/" + l.GetZone()
}

// zoneCensus counts the open streams of each zone. A stream's zone is
// admitted when it is seen first: while maxZones distinct zones have
// streams, a stream of another zone (or one whose key is longer than
// MaxZoneKey) gets zone "" for its life and counts as overflow, so what
// the cache keeps per zone stays bounded whatever clients claim.
type zoneCensus struct {
	max      int
	streams  map[string]int   // zone → open streams, over every view
	perView  []map[string]int // view → zone → open streams
	overflow int
	changed  chan struct{} // closed, and replaced, when a count changes
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

// admit counts a new stream of view claiming key; it returns the zone the
// stream gets and whether it overflowed.
func (z *zoneCensus) admit(view int, key string) (zone string, overflow bool) {
	if key == "" {
		return "", false
	}
	if len(key) > MaxZoneKey || (z.streams[key] == 0 && len(z.streams) >= z.max) {
		z.overflow++
		z.notify()
		return "", true
	}
	z.streams[key]++
	z.perView[view][key]++
	z.notify()
	return key, false
}

// leave uncounts a stream that admit counted.
func (z *zoneCensus) leave(view int, zone string, overflow bool) {
	switch {
	case overflow:
		z.overflow--
	case zone != "":
		if z.streams[zone]--; z.streams[zone] == 0 {
			delete(z.streams, zone)
		}
		if z.perView[view][zone]--; z.perView[view][zone] == 0 {
			delete(z.perView[view], zone)
		}
	default:
		return
	}
	z.notify()
}

// Zones is the census of one view: how many open streams each zone has
// (streams without a zone, and overflow, are not in it). The map is a copy.
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

// ZonesChanged returns a channel closed by the next change of Zones (in
// any view) or ZoneOverflow.
func (c *Cache) ZonesChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zones.changed
}
