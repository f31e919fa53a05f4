package loadreport

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// Catalog is what reports may be about: the published clusters whose load
// is reported, and each one's endpoints in canonical order. It is immutable;
// NewCatalog builds the next one from a snapshot, sharing what did not change.
type Catalog struct {
	clusters map[string]*catCluster
	// spatial are the snapshot's domain states it was built from, and
	// domains the names ("namespace/name") of those that report load.
	spatial []*topology.SpatialState
	domains map[string]bool
	// built: made from a snapshot; the first such catalog's endpoints are
	// not fresh (catCluster.fresh)
	built bool
	// reporting are the clusters with an interval, shortest interval
	// first (then by name): Shortest's candidates
	reporting []*catCluster
}

// catCluster is one cluster's endpoints: index gives an endpoint's position
// in keys (the snapshot's canonical order), which the store's cells follow.
type catCluster struct {
	name     string
	upstream *topology.UpstreamState // the state it was built from: unchanged upstreams are shared between snapshots
	interval time.Duration           // the upstream's spec.loadReporting.interval; 0 when unset
	index    map[endpointKey]int32
	keys     []endpointKey
	// gens[i] is keys[i]'s endpoint generation (topology
	// Endpoint.Generation), since[i] when a catalog first held it (unix
	// ns), and fresh[i] whether it began while Poise was publishing the
	// upstream: a new generation at an address the previous catalog held,
	// or a named generation at a new address after the first catalog. A
	// fresh endpoint's reports whose interval began before since[i] are
	// not counted for it (they may be the previous backend's), and a new
	// generation of an address starts with no counts (SetCatalog). nil on
	// spatial clusters, whose endpoints have none.
	gens  []string
	since []int64
	fresh []bool
	// spatial is set on the clusters of a SpatialDomain (replicas, pools).
	spatial *spatialOf
}

// gen is endpoint i's generation.
func (cc *catCluster) gen(i int) string {
	if i < len(cc.gens) {
		return cc.gens[i]
	}
	return ""
}

// notBefore is the earliest start of a report interval counted for
// endpoint i (unix ns): its generation's start when it is fresh, else no
// bound.
func (cc *catCluster) notBefore(i int) int64 {
	if i < len(cc.fresh) && cc.fresh[i] {
		return cc.since[i]
	}
	return math.MinInt64
}

type endpointKey struct {
	addr string
	port uint32
}

// NewCatalog is the catalog of snap's upstreams for which include says
// yes (nil includes all), and of the replica and pool clusters of its
// serving SpatialDomains with spec.loadReporting. Clusters of upstreams that
// are the same object as in prev are taken from prev as they are, so a
// store keeps their cells without remapping them.
func NewCatalog(prev *Catalog, snap *topology.Snapshot, include func(*topology.UpstreamState) bool) *Catalog {
	return NewCatalogAt(prev, snap, include, time.Now())
}

// NewCatalogAt is NewCatalog at now: an endpoint generation the previous
// catalog did not hold at the same address began at now; one it held keeps
// the time it began.
func NewCatalogAt(prev *Catalog, snap *topology.Snapshot, include func(*topology.UpstreamState) bool, now time.Time) *Catalog {
	c := &Catalog{clusters: map[string]*catCluster{}, domains: map[string]bool{}}
	if snap == nil {
		return c
	}
	c.built = true
	later := prev != nil && prev.built
	for _, u := range snap.Upstreams() {
		if include != nil && !include(u) {
			continue
		}
		name := xdsname.Cluster(u.Upstream.Key)
		if prev != nil {
			if old, ok := prev.clusters[name]; ok && old.upstream == u {
				c.clusters[name] = old
				continue
			}
		}
		cc := &catCluster{name: name, upstream: u, interval: u.Upstream.LoadReportInterval, index: make(map[endpointKey]int32, len(u.Endpoints)),
			keys: make([]endpointKey, 0, len(u.Endpoints)), gens: make([]string, 0, len(u.Endpoints)), since: make([]int64, 0, len(u.Endpoints)),
			fresh: make([]bool, 0, len(u.Endpoints))}
		var old *catCluster
		if prev != nil {
			old = prev.clusters[name]
		}
		for i, e := range u.Endpoints {
			k := endpointKey{e.Address, e.Port}
			if _, dup := cc.index[k]; dup {
				continue // the first place of an address names it
			}
			gen := u.Origins[i].Generation
			since, fresh := now.UnixNano(), later && gen != ""
			if old != nil {
				if j, ok := old.index[k]; ok {
					if old.gen(int(j)) == gen && j < int32(len(old.since)) {
						since, fresh = old.since[j], old.fresh[j]
					} else {
						fresh = later // a new backend at a known address
					}
				}
			}
			cc.index[k] = int32(len(cc.keys))
			cc.keys = append(cc.keys, k)
			cc.gens = append(cc.gens, gen)
			cc.since = append(cc.since, since)
			cc.fresh = append(cc.fresh, fresh)
		}
		c.clusters[name] = cc
	}
	c.addSpatial(prev, snap)
	for _, cc := range c.clusters {
		if cc.interval > 0 {
			c.reporting = append(c.reporting, cc)
		}
	}
	slices.SortFunc(c.reporting, func(a, b *catCluster) int {
		return cmp.Or(cmp.Compare(a.interval, b.interval), strings.Compare(a.name, b.name))
	})
	return c
}

// Shortest is the shortest load-report interval of the clusters in the
// catalog that readable says yes to (nil: any), zero when none has one:
// what a client that names no cluster yet is asked for. grpc-go's first
// request carries only its node, and it reads only the first answer, so
// that answer's interval is the one it keeps; the shortest is never longer
// than any cluster the client may report on asks for. Only the clusters
// the client may read count, so a hidden cluster's interval reaches no
// one who may not read it.
func (c *Catalog) Shortest(readable func(cluster string) bool) time.Duration {
	for _, cc := range c.reporting {
		if readable == nil || readable(cc.name) {
			return cc.interval
		}
	}
	return 0
}

// Generation is the generation of an endpoint of a cluster and when the
// catalog first held it; ok is false when the cluster or the endpoint is
// not in the catalog.
func (c *Catalog) Generation(cluster, address string, port uint32) (generation string, since time.Time, ok bool) {
	cc, found := c.clusters[cluster]
	if !found {
		return "", time.Time{}, false
	}
	i, found := cc.index[endpointKey{address, port}]
	if !found || int(i) >= len(cc.since) {
		return "", time.Time{}, false
	}
	return cc.gens[i], time.Unix(0, cc.since[i]).UTC(), true
}

// Len is the number of clusters in the catalog.
func (c *Catalog) Len() int { return len(c.clusters) }

// Interval is the shortest load-report interval of the named clusters
// that the catalog has (each its upstream's spec.loadReporting.interval),
// zero when none has one. One LRS stream has one interval for all the
// clusters it reports on, so a client reporting on several is asked for
// the shortest: no cluster is reported less often than it asks.
func (c *Catalog) Interval(names []string) time.Duration {
	var d time.Duration
	for _, name := range names {
		if cc, ok := c.clusters[name]; ok && cc.interval > 0 && (d == 0 || cc.interval < d) {
			d = cc.interval
		}
	}
	return d
}

// Published adds to names (sorted, kept as it is) the clusters req
// reports on that the catalog has and readable says yes to (nil: all), and
// says whether any was added. A cluster readable refuses is left out as one
// the catalog does not have, so the answer is the same for a name that is
// hidden from the client and one that does not exist. Only the request's
// first MaxClusterStats clusters are read.
func (c *Catalog) Published(names []string, req *lrs.LoadStatsRequest, readable func(cluster string) bool) ([]string, bool) {
	grew := false
	for i, cs := range req.GetClusterStats() {
		if i >= MaxClusterStats {
			break
		}
		name := cs.GetClusterName()
		if _, ok := c.clusters[name]; !ok {
			continue
		}
		j, found := slices.BinarySearch(names, name)
		if found || (readable != nil && !readable(name)) {
			continue
		}
		if !grew {
			names = slices.Clone(names)
			grew = true
		}
		names = slices.Insert(names, j, name)
	}
	return names, grew
}

// endpointOfSubZone is the endpoint a gRPC client's per-endpoint locality
// names: Poise renders one locality per endpoint for gRPC clients with the
// sub_zone "<subZone>~ep~<address>:<port>" (an IPv6 address in brackets).
func endpointOfSubZone(subZone string) (endpointKey, bool) {
	i := strings.LastIndex(subZone, xdsname.EndpointSuffix)
	if i < 0 {
		return endpointKey{}, false
	}
	hp := subZone[i+len(xdsname.EndpointSuffix):]
	colon := strings.LastIndexByte(hp, ':')
	if colon <= 0 {
		return endpointKey{}, false
	}
	port, err := strconv.ParseUint(hp[colon+1:], 10, 32)
	if err != nil {
		return endpointKey{}, false
	}
	host := hp[:colon]
	if strings.HasPrefix(host, "[") {
		if len(host) < 2 || host[len(host)-1] != ']' {
			return endpointKey{}, false
		}
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") {
		return endpointKey{}, false // an IPv6 address is always bracketed
	}
	return endpointKey{host, uint32(port)}, true
}
