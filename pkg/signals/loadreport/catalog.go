package loadreport

import (
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
	spatial  []*topology.SpatialState
	domains  map[string]bool
	shortest time.Duration // the shortest interval of any cluster; 0 when none has one
}

// catCluster is one cluster's endpoints: index gives an endpoint's position
// in keys (the snapshot's canonical order), which the store's cells follow.
type catCluster struct {
	name     string
	upstream *topology.UpstreamState // the state it was built from: unchanged upstreams are shared between snapshots
	interval time.Duration           // the upstream's spec.loadReporting.interval; 0 when unset
	index    map[endpointKey]int32
	keys     []endpointKey
	// spatial is set on the clusters of a SpatialDomain (replicas, pools).
	spatial *spatialOf
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
	c := &Catalog{clusters: map[string]*catCluster{}, domains: map[string]bool{}}
	if snap == nil {
		return c
	}
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
			keys: make([]endpointKey, 0, len(u.Endpoints))}
		for _, e := range u.Endpoints {
			k := endpointKey{e.Address, e.Port}
			if _, dup := cc.index[k]; dup {
				continue // the first place of an address names it
			}
			cc.index[k] = int32(len(cc.keys))
			cc.keys = append(cc.keys, k)
		}
		c.clusters[name] = cc
	}
	c.addSpatial(prev, snap)
	for _, cc := range c.clusters {
		if cc.interval > 0 && (c.shortest == 0 || cc.interval < c.shortest) {
			c.shortest = cc.interval
		}
	}
	return c
}

// Shortest is the shortest load-report interval of any cluster in the
// catalog, zero when none has one: what a client that names no cluster
// yet is asked for. grpc-go's first request carries only its node, and it
// reads only the first answer, so that answer's interval is the one it
// keeps; the shortest of all is never longer than any cluster asks for.
func (c *Catalog) Shortest() time.Duration { return c.shortest }

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
// reports on that the catalog has, and says whether any was added. Only
// the request's first MaxClusterStats clusters are read.
func (c *Catalog) Published(names []string, req *lrs.LoadStatsRequest) ([]string, bool) {
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
		if found {
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
