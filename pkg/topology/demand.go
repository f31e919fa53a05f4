package topology

import (
	"slices"
	"strings"
	"time"

	"poise.dev/poise/pkg/affinity"
)

// What the connected clients add to the topology: the locality classes that
// have clients (each affinity upstream is rendered once per class), and the
// demand a Balanced upstream's split is divided by (docs/weights.md,
// "Balanced"). Both reach the Directory as batches from the demand signal
// (pkg/signals/demand), which watches the clients and the load reports with
// its hysteresis, so what a client is sent is a function of one snapshot.

// AppliedDemand is the demand in force for a Balanced upstream: each client
// zone's weight, from the connected clients' demand weights or, once their
// load reports hold enough requests, each zone's per-mille share of them.
type AppliedDemand struct {
	// Zones is each zone's demand, in zone order, every weight at least 1;
	// empty: no demand, and every class receives the upstream's split.
	Zones []affinity.Demand
	// LoadReports: Zones are the zones' shares of Requests reported over
	// Window; otherwise the connected clients' demand weights.
	LoadReports bool
	Requests    uint64
	Window      time.Duration
}

// None reports whether there is no demand.
func (d AppliedDemand) None() bool { return len(d.Zones) == 0 }

// Equal reports whether two demands are the same, origin included.
func (d AppliedDemand) Equal(o AppliedDemand) bool {
	return d.LoadReports == o.LoadReports && d.Requests == o.Requests && d.Window == o.Window && slices.Equal(d.Zones, o.Zones)
}

// PutDemand records the demand applied to upstream u; an empty demand
// withdraws it. The Directory keeps the demand of an upstream that is not
// Balanced (or does not exist) without effect, as it keeps verdicts, and an
// upstream's state carries its demand only while it is Balanced.
func (b *Batch) PutDemand(u Key, d AppliedDemand) {
	if b.demand == nil {
		b.demand = map[Key]AppliedDemand{}
	}
	d.Zones = slices.Clone(d.Zones)
	b.demand[u] = d
}

// ClientClasses are the locality classes that have connected clients, per
// view (a view is a rendering clients receive, numbered by the publisher):
// "region/zone", or a region alone for clients placed at region level.
// Every affinity upstream is rendered for each of them. It is immutable.
type ClientClasses struct {
	views [][]string // each sorted, without duplicates
}

// NewClientClasses is the classes of each view (views[v] lists view v's);
// the lists are copied, sorted and deduplicated.
func NewClientClasses(views [][]string) *ClientClasses {
	c := &ClientClasses{views: make([][]string, len(views))}
	for v, list := range views {
		if len(list) > 0 {
			c.views[v] = slices.Compact(slices.Sorted(slices.Values(list)))
		}
	}
	return c
}

// noClasses is the classes of a Directory no batch has set any for.
var noClasses = &ClientClasses{}

// Views is how many views the classes are given for.
func (c *ClientClasses) Views() int { return len(c.views) }

// Of is the classes of view v, sorted (nil for a view not given). The slice
// is shared: do not modify it.
func (c *ClientClasses) Of(v int) []string {
	if v < 0 || v >= len(c.views) {
		return nil
	}
	return c.views[v]
}

// Has reports whether some view has clients of class.
func (c *ClientClasses) Has(class string) bool {
	for _, list := range c.views {
		if _, ok := slices.BinarySearch(list, class); ok {
			return true
		}
	}
	return false
}

// Len is the number of (view, class) pairs.
func (c *ClientClasses) Len() int {
	n := 0
	for _, list := range c.views {
		n += len(list)
	}
	return n
}

// Equal reports whether two sets of classes are the same, view by view
// (a view with none equals a view not given).
func (c *ClientClasses) Equal(o *ClientClasses) bool {
	if c == o {
		return true
	}
	for v := range max(len(c.views), len(o.views)) {
		if !slices.Equal(c.Of(v), o.Of(v)) {
			return false
		}
	}
	return true
}

// SetClientClasses makes c the classes that have clients, replacing the
// previous ones whole.
func (b *Batch) SetClientClasses(c *ClientClasses) { b.classes = c }

// ClassZone is the locality a class stands for: "region/zone", or a region
// alone (Zone empty) for a region-level class.
func ClassZone(class string) affinity.Zone {
	region, zone, _ := strings.Cut(class, "/")
	return affinity.Zone{Region: region, Zone: zone}
}

// IsZoneClass reports whether a class names a zone ("region/zone"): the
// only classes that receive a Balanced split, and so count demand.
func IsZoneClass(class string) bool {
	region, zone, ok := strings.Cut(class, "/")
	return ok && region != "" && zone != ""
}

// stageDemand keeps the batch's demands that change something, and marks
// affected the Balanced upstreams whose demand changed; a new set of
// classes is kept when it differs.
func (st *staged) stageDemand(b Batch) {
	for u, dm := range b.demand {
		old, had := st.d.demand[u]
		if (dm.None() && !had) || (had && old.Equal(dm)) {
			continue
		}
		if st.demand == nil {
			st.demand = map[Key]AppliedDemand{}
		}
		st.demand[u] = dm
		if up, ok := st.upstream(u); ok && up.ModeOf() == affinity.Balanced {
			st.affected[u] = struct{}{}
		}
	}
	if b.classes != nil && !b.classes.Equal(st.d.classes) {
		st.classes = b.classes
	}
}

// demandFor is the demand u's state carries after the batch: its applied
// demand while it is Balanced, else none.
func (st *staged) demandFor(u Upstream) AppliedDemand {
	if u.ModeOf() != affinity.Balanced {
		return AppliedDemand{}
	}
	if dm, ok := st.demand[u.Key]; ok {
		return dm
	}
	return st.d.demand[u.Key]
}

// commitDemand writes the staged demands and classes; an empty demand deletes.
func (d *Directory) commitDemand(st *staged) {
	for u, dm := range st.demand {
		if dm.None() {
			delete(d.demand, u)
		} else {
			d.demand[u] = dm
		}
	}
	if st.classes != nil {
		d.classes = st.classes
	}
}
