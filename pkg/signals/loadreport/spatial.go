package loadreport

import (
	"cmp"
	"slices"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// The spatial cross-region metric (docs/spatial.md, "Cross-region
// requests"): the clusters of a SpatialDomain with spec.loadReporting — one
// per replica, one pool per product — report their load; every endpoint of
// them belongs to a replica, so each reported request has a client region
// (the reporter's) and a replica region. Requests are the reports'
// total_issued_requests.
const (
	// SpatialNoRegion is the client region of a reporter whose node has no
	// locality region. A Kubernetes region label never contains '~', so
	// neither label can be a real region.
	SpatialNoRegion = "~none"
	// SpatialOtherRegion is the client region of the requests of a domain's
	// client regions past MaxSpatialClientRegions.
	SpatialOtherRegion = "~other"
	// MaxSpatialClientRegions bounds the client regions named per domain,
	// SpatialNoRegion included; the rest are counted as SpatialOtherRegion.
	MaxSpatialClientRegions = 32
	// MaxSpatialSeries bounds the (domain, client region, replica region)
	// counters in all; requests that would need another are counted in
	// Drops.SpatialOverCap instead (the window's figures still have them).
	MaxSpatialSeries = 8192
)

// spatialOf says what a spatial cluster's load counts for: its domain, and the
// region of the replica each endpoint belongs to.
type spatialOf struct {
	domain string                    // "namespace/name"
	state  *topology.SpatialState    // the domain state it was built from
	ups    []*topology.UpstreamState // the upstreams of its replicas, as built
	// region[i] is the replica region of endpoint i (catalog order).
	region []string
}

// addSpatial adds the clusters of every serving domain with load reporting.
// A cluster built from the same domain state and replica upstreams as in prev
// is taken from prev, so a store keeps its cells without remapping them.
func (c *Catalog) addSpatial(prev *Catalog, snap *topology.Snapshot) {
	c.spatial = snap.Spatial()
	for _, st := range c.spatial {
		if !st.Serving() || st.Domain.LoadReportInterval <= 0 {
			continue
		}
		k := st.Domain.Key
		c.domains[k.String()] = true
		ups := make([]*topology.UpstreamState, len(st.Replicas))
		for i, r := range st.Replicas {
			ups[i] = snap.Upstream(r.Upstream)
		}
		for i, r := range st.Replicas {
			if ups[i] != nil {
				c.addSpatialCluster(prev, xdsname.ReplicaCluster(k, r.Name), st, ups, []int{i})
			}
		}
		for _, p := range st.Map.Domain().Products {
			var held []int
			for _, name := range st.Map.Lawful(p.Name) {
				if i := st.Map.ReplicaIndex(name); i >= 0 && i < len(ups) && ups[i] != nil {
					held = append(held, i)
				}
			}
			c.addSpatialCluster(prev, xdsname.PoolCluster(k, p.Name), st, ups, held)
		}
	}
}

// addSpatialCluster adds the cluster name of domain st holding the endpoints of
// the replicas held (indexes in st.Replicas, in order): an address two replicas
// share counts for the first.
func (c *Catalog) addSpatialCluster(prev *Catalog, name string, st *topology.SpatialState, ups []*topology.UpstreamState, held []int) {
	if prev != nil {
		if old, ok := prev.clusters[name]; ok && old.spatial != nil && old.spatial.state == st && slices.Equal(old.spatial.ups, ups) {
			c.clusters[name] = old
			return
		}
	}
	cc := &catCluster{name: name, interval: st.Domain.LoadReportInterval, index: map[endpointKey]int32{},
		spatial: &spatialOf{domain: st.Domain.Key.String(), state: st, ups: ups}}
	for _, i := range held {
		for _, e := range ups[i].Endpoints {
			k := endpointKey{e.Address, e.Port}
			if _, dup := cc.index[k]; dup {
				continue
			}
			cc.index[k] = int32(len(cc.keys))
			cc.keys = append(cc.keys, k)
			cc.spatial.region = append(cc.spatial.region, st.Replicas[i].Region)
		}
	}
	c.clusters[name] = cc
}

// SpatialChanged says whether snap's spatial domains are not those the catalog
// was built from: a domain that turns load reporting on or off, or changes its
// replicas, changes no upstream, yet changes the catalog.
func (c *Catalog) SpatialChanged(snap *topology.Snapshot) bool {
	return snap != nil && !slices.Equal(c.spatial, snap.Spatial())
}

// spatialKey is one counter of poise_spatial_requests_total.
type spatialKey struct{ domain, client, replica string }

// clientLabel is the client region a reporter's requests to domain are
// counted under: its region, SpatialNoRegion without one, SpatialOtherRegion
// past the domain's MaxSpatialClientRegions (the first ones reported keep
// their names).
func (s *Store) clientLabel(domain, region string) string {
	if region == "" {
		region = SpatialNoRegion
	}
	seen := s.spatialClients[domain]
	if _, ok := seen[region]; ok {
		return region
	}
	if len(seen) >= MaxSpatialClientRegions {
		return SpatialOtherRegion
	}
	if seen == nil {
		seen = map[string]struct{}{}
		s.spatialClients[domain] = seen
	}
	seen[region] = struct{}{}
	return region
}

// countSpatial adds issued requests of reporter r to endpoint i of spatial
// cluster cc to the counters.
func (s *Store) countSpatial(cc *catCluster, i int32, r *reporter, issued uint64) {
	if issued == 0 {
		return
	}
	sp := cc.spatial
	k := spatialKey{sp.domain, s.clientLabel(sp.domain, r.Region), sp.region[i]}
	n, ok := s.spatialTotals[k]
	if !ok && len(s.spatialTotals) >= MaxSpatialSeries {
		s.drops.SpatialOverCap = sat64(s.drops.SpatialOverCap, issued)
		return
	}
	s.spatialTotals[k] = sat64(n, issued)
}

// forgetSpatial drops the counters of domains the catalog no longer reports on.
func (s *Store) forgetSpatial() {
	for k := range s.spatialTotals {
		if !s.catalog.domains[k.domain] {
			delete(s.spatialTotals, k)
		}
	}
	for d := range s.spatialClients {
		if !s.catalog.domains[d] {
			delete(s.spatialClients, d)
		}
	}
}

// SpatialCount is one counter: the requests clients in ClientRegion sent
// to replicas of Domain in ReplicaRegion since the domain began to report.
type SpatialCount struct {
	Domain        string `json:"domain"`
	ClientRegion  string `json:"clientRegion"`
	ReplicaRegion string `json:"replicaRegion"`
	Requests      uint64 `json:"requests"`
}

// SpatialTotals is every counter, by domain, client region, replica region.
// A counter only grows while its domain reports; it is forgotten when the
// domain stops (is deleted, stops serving, or drops spec.loadReporting).
func (s *Store) SpatialTotals() []SpatialCount {
	s.mu.Lock()
	out := make([]SpatialCount, 0, len(s.spatialTotals))
	for k, n := range s.spatialTotals {
		out = append(out, SpatialCount{Domain: k.domain, ClientRegion: k.client, ReplicaRegion: k.replica, Requests: n})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b SpatialCount) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.ClientRegion, b.ClientRegion), cmp.Compare(a.ReplicaRegion, b.ReplicaRegion))
	})
	return out
}

// SpatialLoad is a domain's reported requests over the store's window.
type SpatialLoad struct {
	Domain string `json:"domain"`
	// Requests by client region and replica region, in that order; at most
	// MaxSpatialClientRegions client regions are named (the busiest, ties by
	// name), the rest summed under SpatialOtherRegion.
	Requests []SpatialRequests `json:"requests"`
	// Total is every request reported for the domain in the window.
	Total uint64 `json:"total"`
	// CrossRegion is the requests whose client region is known and is not
	// the region of the replica that served them.
	CrossRegion uint64 `json:"crossRegion"`
	// CrossRegionShare is CrossRegion over the requests whose client region
	// is known (reporters without a locality region are left out of both);
	// absent when there are none.
	CrossRegionShare *float64 `json:"crossRegionShare,omitempty"`
	// Reporters is how many distinct clients reported requests for it.
	Reporters int `json:"reporters"`
}

// SpatialRequests is one cell of a domain's matrix.
type SpatialRequests struct {
	ClientRegion  string `json:"clientRegion"`
	ReplicaRegion string `json:"replicaRegion"`
	Requests      uint64 `json:"requests"`
}

// Spatial is, for every domain that reports load, its requests over the
// window ending at now, by domain name. The figures depend only on what was
// reported, never on map order.
func (s *Store) Spatial(now time.Time) []SpatialLoad { return s.spatialLoads(now, "") }

// SpatialDomain is the requests of one domain ("namespace/name") over the
// window ending at now; false when the domain does not report load.
func (s *Store) SpatialDomain(domain string, now time.Time) (SpatialLoad, bool) {
	if domain == "" {
		return SpatialLoad{}, false
	}
	l := s.spatialLoads(now, domain)
	if len(l) == 0 {
		return SpatialLoad{}, false
	}
	return l[0], true
}

// spatialLoads is Spatial of every domain, or of only that one. It reads a
// reporter's blocks of spatial clusters only: by name when the catalog has
// fewer spatial clusters than the reporter has blocks.
func (s *Store) spatialLoads(now time.Time, only string) []SpatialLoad {
	epoch := now.UnixNano() / s.bucket
	type acc struct {
		cells     map[cellKey]uint64
		known     uint64
		reporters int
		load      SpatialLoad
	}
	s.mu.Lock()
	byDomain := make(map[string]*acc, len(s.catalog.domains))
	for d := range s.catalog.domains {
		if only == "" || d == only {
			byDomain[d] = &acc{cells: map[cellKey]uint64{}, load: SpatialLoad{Domain: d, Requests: []SpatialRequests{}}}
		}
	}
	var names []string // the spatial clusters of the domains asked for
	for _, cc := range s.catalog.clusters {
		if cc.spatial != nil && byDomain[cc.spatial.domain] != nil {
			names = append(names, cc.name)
		}
	}
	var blocks []*block
	var reported map[string]bool // domains r reported on
	for _, r := range s.reporters {
		clear(reported)
		blocks = blocks[:0]
		if len(names) < len(r.blocks) {
			for _, name := range names {
				if b, ok := r.blocks[name]; ok {
					blocks = append(blocks, b)
				}
			}
		} else {
			for _, b := range r.blocks {
				blocks = append(blocks, b)
			}
		}
		for _, b := range blocks {
			sp := b.cluster.spatial
			if sp == nil || byDomain[sp.domain] == nil {
				continue
			}
			a := byDomain[sp.domain]
			client := r.Region
			if client == "" {
				client = SpatialNoRegion
			}
			for i := range b.cells {
				var issued uint64
				for slot, stamp := range b.stamps {
					if stamp > epoch-Buckets && stamp <= epoch {
						issued = sat64(issued, uint64(b.cells[i][slot].issued))
					}
				}
				if issued == 0 {
					continue
				}
				k := cellKey{client, sp.region[i]}
				a.cells[k] = sat64(a.cells[k], issued)
				a.load.Total = sat64(a.load.Total, issued)
				if r.Region != "" {
					a.known = sat64(a.known, issued)
					if r.Region != sp.region[i] {
						a.load.CrossRegion = sat64(a.load.CrossRegion, issued)
					}
				}
				if reported == nil {
					reported = map[string]bool{}
				}
				if !reported[sp.domain] {
					reported[sp.domain] = true
					a.reporters++
				}
			}
		}
	}
	s.mu.Unlock()
	out := make([]SpatialLoad, 0, len(byDomain))
	for _, a := range byDomain {
		a.load.Reporters = a.reporters
		if a.known > 0 {
			share := float64(a.load.CrossRegion) / float64(a.known)
			a.load.CrossRegionShare = &share
		}
		a.load.Requests = foldClients(a.cells)
		out = append(out, a.load)
	}
	slices.SortFunc(out, func(a, b SpatialLoad) int { return cmp.Compare(a.Domain, b.Domain) })
	return out
}

// cellKey is one cell of a domain's matrix.
type cellKey struct{ client, replica string }

// foldClients lists cells by client and replica region, keeping the
// MaxSpatialClientRegions client regions with the most requests (ties by
// name) and summing the others under SpatialOtherRegion.
func foldClients(cells map[cellKey]uint64) []SpatialRequests {
	perClient := map[string]uint64{}
	for k, n := range cells {
		perClient[k.client] = sat64(perClient[k.client], n)
	}
	clients := make([]string, 0, len(perClient))
	for c := range perClient {
		clients = append(clients, c)
	}
	slices.SortFunc(clients, func(a, b string) int { return cmp.Or(cmp.Compare(perClient[b], perClient[a]), cmp.Compare(a, b)) })
	named := map[string]bool{}
	for i, c := range clients {
		if i >= MaxSpatialClientRegions {
			break
		}
		named[c] = true
	}
	rows := map[cellKey]uint64{}
	for k, n := range cells {
		if !named[k.client] {
			k.client = SpatialOtherRegion
		}
		rows[k] = sat64(rows[k], n)
	}
	out := make([]SpatialRequests, 0, len(rows))
	for k, n := range rows {
		out = append(out, SpatialRequests{ClientRegion: k.client, ReplicaRegion: k.replica, Requests: n})
	}
	slices.SortFunc(out, func(a, b SpatialRequests) int {
		return cmp.Or(cmp.Compare(a.ClientRegion, b.ClientRegion), cmp.Compare(a.ReplicaRegion, b.ReplicaRegion))
	})
	return out
}
