package loadreport

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
)

// Buckets is the number of time buckets in the window: the window is
// Buckets × Config.Bucket, and a report counts in the bucket of the time it
// arrived. Counts older than the window are forgotten a bucket at a time.
const Buckets = 6

// Defaults and bounds.
const (
	// DefaultBucket makes a 30 s window.
	DefaultBucket = 5 * time.Second
	// DefaultMaxReporters is the DefaultMaxStreams of the xDS server: each
	// stream may be a reporter.
	DefaultMaxReporters = 25000
	// DefaultMaxCells is the hard cap of cells (one reporter's counts for
	// one endpoint): 2,000,000 cells of CellBytes are 144 MB.
	DefaultMaxCells = 2_000_000
	// MaxClusterStats, MaxLocalityStats and MaxEndpointStats bound what one
	// LoadStatsRequest is read for: its first MaxClusterStats clusters, of
	// each its first MaxLocalityStats localities, and its first
	// MaxEndpointStats endpoint stats in all; the rest is counted in
	// Drops.OverLimit. (gRPC already refuses a message over 4 MiB.)
	MaxClusterStats  = 10000
	MaxLocalityStats = 10000
	MaxEndpointStats = 200000
	// maxField bounds the bytes kept of a reporter's id, region and zone.
	maxField = 256
	// DefaultMaxRequests is the most requests one reporter's counts may
	// weigh in one cluster over the window (Config.MaxRequests): thirty
	// million, a million requests a second over the default 30 s window,
	// which no single client sends to one cluster in normal operation.
	DefaultMaxRequests = 30_000_000
	// MaxMaxRequests is the largest such cap: a cell counts 32 bits a
	// bucket, so under it no kept count saturates.
	MaxMaxRequests = 1<<32 - 1
	// cappedLogEvery bounds the log of capped reports: at most one line a
	// period, the others counted on the next line.
	cappedLogEvery = 10 * time.Second
	// maxScratch is the most endpoint stats of one cluster the store keeps
	// room for between reports (32 B each); a larger cluster's report
	// allocates its own.
	maxScratch = 1 << 14
)

// counts are one bucket's requests; they saturate rather than wrap.
type counts struct{ issued, success, errors uint32 }

// cell is one reporter's counts for one endpoint over the window.
type cell [Buckets]counts

// CellBytes is the size of one cell, the unit of the memory bound.
const CellBytes = int(unsafe.Sizeof(cell{}))

// Config bounds a Store; zero fields take the defaults.
type Config struct {
	Bucket       time.Duration
	MaxReporters int
	MaxCells     int
	// MaxRequests is the most requests one reporter's counts may weigh in
	// one cluster over the window (see Stream.Report): zero is
	// DefaultMaxRequests, and above MaxMaxRequests is MaxMaxRequests.
	MaxRequests uint64
	// Log, when set, receives a line for reports cut to MaxRequests, at
	// most one every 10 s.
	Log *slog.Logger
}

// Drops counts what reports carried that the store did not keep.
type Drops struct {
	// UnknownCluster: cluster stats for a cluster not in the catalog.
	UnknownCluster uint64 `json:"unknownCluster"`
	// UnknownEndpoint: endpoint stats (or a gRPC per-endpoint locality)
	// for an address the cluster does not have.
	UnknownEndpoint uint64 `json:"unknownEndpoint"`
	// NoEndpoint: locality stats that name no endpoint (no endpoint stats,
	// and a sub_zone that is not Poise's per-endpoint rendering).
	NoEndpoint uint64 `json:"noEndpoint"`
	// OverLimit: stats past the per-request bounds.
	OverLimit uint64 `json:"overLimit"`
	// OverCap: cluster stats not kept because the cell cap was reached and
	// no other reporter could be evicted.
	OverCap uint64 `json:"overCap"`
	// Evicted: reporters dropped whole, oldest report first, to make room.
	Evicted uint64 `json:"evicted"`
	// OldGeneration: endpoint stats not counted because their interval
	// began before the endpoint's generation did (the counts may be the
	// previous backend's at the address).
	OldGeneration uint64 `json:"oldGeneration,omitempty"`
	// Capped: requests (the weight of Load.Weight) reports carried past
	// their reporter's cap of Config.MaxRequests a cluster and window, and
	// CappedReports the cluster stats scaled down for it.
	Capped        uint64 `json:"capped"`
	CappedReports uint64 `json:"cappedReports"`
	// SpatialOverCap: requests to spatial clusters kept in the store but
	// not counted in poise_spatial_requests_total, which had
	// MaxSpatialSeries counters already.
	SpatialOverCap uint64 `json:"spatialOverCap,omitempty"`
}

// Reporter is who sends reports: an xDS node and its locality.
type Reporter struct {
	ID, Region, Zone string
}

// Class is the reporter's locality class: "region/zone", the region alone
// without a zone, or "" without a region.
func (r Reporter) Class() string {
	switch {
	case r.Region == "":
		return ""
	case r.Zone == "":
		return r.Region
	}
	return r.Region + "/" + r.Zone
}

type reporter struct {
	Reporter
	class   string
	streams int   // open streams of this node
	ended   int64 // when its last stream ended (unix ns), while streams == 0
	last    int64 // its last report, or its first stream (unix ns)
	gone    bool  // evicted; a stream that still holds it registers anew
	blocks  map[string]*block
}

// block is one reporter's cells for one cluster, in the cluster's endpoint
// order; stamps says which bucket (time / Bucket) each slot holds, and
// weights the weight the slot's reports were kept at (the sum over them of
// Load.Weight per endpoint stat), which the cap of Config.MaxRequests
// bounds over the window, so 32 bits hold it.
type block struct {
	cluster *catCluster
	stamps  [Buckets]int64
	weights [Buckets]uint32
	cells   []cell
}

// Store is the report store. Its memory is bounded by
//
//	cells × CellBytes + blocks × ~200 B + reporters × ~400 B + catalog
//
// where cells ≤ MaxCells (each block holds one cell for every endpoint of
// its cluster: a reporter's cells for a cluster it reports on are that
// cluster's endpoint count), blocks ≤ reporters × published clusters, and
// reporters ≤ MaxReporters. Past MaxCells or MaxReporters the reporter with
// the oldest last report is dropped whole and counted. A reporter whose
// streams have all ended is freed one window later. The spatial counters
// (spatial.go) add at most MaxSpatialSeries entries of ~150 B (1.2 MB), and
// MaxSpatialClientRegions region names per reporting domain; the scratch
// of the report being added keeps at most maxScratch stats (512 KiB)
// between reports.
//
// One reporter's counts weigh at most Config.MaxRequests per cluster over
// the window (see Stream.Report).
type Store struct {
	mu        sync.Mutex
	bucket    int64 // ns
	maxRep    int
	maxCells  int
	maxReq    uint64
	log       *slog.Logger
	capLog    capLog
	scratch   []stat // one cluster's endpoint stats of the report being added
	catalog   *Catalog
	reporters map[string]*reporter
	cells     int
	blocks    int
	drops     Drops
	swept     int64 // the bucket last swept
	latest    int64 // the latest report's time (unix ns)
	// the spatial counters (spatial.go), at most MaxSpatialSeries, and the
	// client regions each domain names in them
	spatialTotals  map[spatialKey]uint64
	spatialClients map[string]map[string]struct{}
}

// NewStore is an empty store with an empty catalog.
func NewStore(cfg Config) *Store {
	if cfg.Bucket <= 0 {
		cfg.Bucket = DefaultBucket
	}
	if cfg.MaxReporters <= 0 {
		cfg.MaxReporters = DefaultMaxReporters
	}
	if cfg.MaxCells <= 0 {
		cfg.MaxCells = DefaultMaxCells
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	return &Store{bucket: int64(cfg.Bucket), maxRep: cfg.MaxReporters, maxCells: cfg.MaxCells,
		maxReq: min(cfg.MaxRequests, MaxMaxRequests), log: cfg.Log,
		catalog: NewCatalog(nil, nil, nil), reporters: map[string]*reporter{},
		spatialTotals: map[spatialKey]uint64{}, spatialClients: map[string]map[string]struct{}{}}
}

// Window is the span the store keeps counts for.
func (s *Store) Window() time.Duration { return time.Duration(s.bucket) * Buckets }

// Catalog is the catalog reports are read against.
func (s *Store) Catalog() *Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.catalog
}

// SetCatalog replaces the catalog: cells of clusters no longer in it are
// freed, and those of clusters whose endpoints changed follow each endpoint
// to its new place (an endpoint that left loses its counts).
func (s *Store) SetCatalog(c *Catalog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catalog = c
	for _, r := range s.reporters {
		for name, b := range r.blocks {
			cc, ok := c.clusters[name]
			switch {
			case !ok:
				s.freeBlock(r, name, b)
			case cc != b.cluster:
				s.remap(b, cc)
			}
		}
	}
	s.evictOver(nil, 0)
	s.forgetSpatial()
}

func (s *Store) freeBlock(r *reporter, name string, b *block) {
	s.cells -= len(b.cells)
	s.blocks--
	delete(r.blocks, name)
}

func (s *Store) remap(b *block, cc *catCluster) {
	cells := make([]cell, len(cc.keys))
	for i, k := range b.cluster.keys {
		// a new generation at the address starts with no counts
		if j, ok := cc.index[k]; ok && cc.gen(int(j)) == b.cluster.gen(i) {
			cells[j] = b.cells[i]
		}
	}
	s.cells += len(cells) - len(b.cells)
	b.cluster, b.cells = cc, cells
	// what the slots keep now weighs at most what they kept
	for slot := range b.weights {
		var w uint64
		for i := range cells {
			w += cells[i][slot].weight()
		}
		b.weights[slot] = uint32(min(w, uint64(b.weights[slot])))
	}
}

// Stream is one reporting stream's hold on its reporter.
type Stream struct {
	s  *Store
	r  *reporter
	id Reporter
	// readable, when set, says which clusters the stream's client may
	// report on; stats of any other count as an unknown cluster's.
	readable func(cluster string) bool
}

// Only restricts the stream to reports on the clusters readable says its
// client may see: stats of any other are dropped as an unknown cluster's,
// so a client cannot weigh on load it is not sent. Set it before the first
// Report; readable is called outside the store's lock.
func (st *Stream) Only(readable func(cluster string) bool) { st.readable = readable }

// Open registers a stream of reporter id at now; Close ends it.
func (s *Store) Open(id Reporter, now time.Time) *Stream {
	id = Reporter{ID: clip(id.ID), Region: clip(id.Region), Zone: clip(id.Zone)}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &Stream{s: s, id: id}
	st.r = s.register(id, now.UnixNano())
	return st
}

func clip(v string) string {
	if len(v) > maxField {
		return v[:maxField]
	}
	return v
}

// register adds a stream to id's reporter, creating it (and making room) as needed.
func (s *Store) register(id Reporter, now int64) *reporter {
	r, ok := s.reporters[id.ID]
	if !ok {
		if len(s.reporters) >= s.maxRep {
			s.evictOldest(nil)
		}
		r = &reporter{Reporter: id, class: id.Class(), last: now, blocks: map[string]*block{}}
		s.reporters[id.ID] = r
	}
	// The node's latest stream says where it is.
	r.Reporter, r.class = id, id.Class()
	r.streams++
	return r
}

// Close ends the stream at now: its reporter's counts stay one window more
// (a node that reconnects, to this replica or another, keeps its history
// here until then).
func (st *Stream) Close(now time.Time) {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.r == nil || st.r.gone {
		st.r = nil
		return
	}
	st.r.streams--
	if st.r.streams == 0 {
		st.r.ended = now.UnixNano()
	}
	st.r = nil
}

// Report adds one LoadStatsRequest's counts, received at now, to the
// stream's reporter. It keeps only what the catalog publishes and counts
// the rest in Drops; it never fails.
//
// One reporter's counts are bounded per cluster and window: their weight,
// summed over the cluster's endpoints (Load.Weight: the larger of issued
// and finished requests), stays within Config.MaxRequests over any window.
// A cluster's stats that would pass it are scaled down to the room left,
// every count by the same fraction room / reported weight, rounded down:
// each kept count is within one request below its exact share, so the
// reporter's error ratio on each endpoint is kept (within 1 / its kept
// finished requests) while its weight is cut. Stats within the room are
// kept exactly as sent. What is cut is counted in Drops.Capped.
func (st *Stream) Report(req *lrs.LoadStatsRequest, now time.Time) {
	hidden := st.hidden(req)
	s := st.s
	s.mu.Lock()
	line := st.report(req, now, hidden)
	s.mu.Unlock()
	if line != nil && s.log != nil {
		s.log.Warn("load report capped: one reporter's requests to a cluster over the window exceed the cap; kept scaled down, its error ratio unchanged",
			"reporter", line.reporter, "cluster", line.cluster, "reportedRequests", line.reported, "keptRequests", line.kept,
			"maxRequests", s.maxReq, "window", time.Duration(s.bucket*Buckets).String(), "cappedNotLoggedSinceLastLine", line.unlogged)
	}
}

// report is Report under the store's lock; it returns the log line of a
// capped report when one is due.
func (st *Stream) report(req *lrs.LoadStatsRequest, now time.Time, hidden []bool) *capLine {
	s := st.s
	// Time never goes back for the buckets: a report stamped before the
	// latest one counts in the latest bucket.
	t := max(now.UnixNano(), s.latest)
	s.latest = t
	epoch := t / s.bucket
	s.sweep(epoch, t)
	if st.r == nil {
		return nil // closed
	}
	if st.r.gone {
		st.r = s.register(st.id, t)
	}
	r := st.r
	r.last = t
	endpoints := 0
	var line *capLine
	for i, cs := range req.GetClusterStats() {
		if i >= MaxClusterStats {
			s.drops.OverLimit += uint64(len(req.GetClusterStats()) - i)
			break
		}
		cc, ok := s.catalog.clusters[cs.GetClusterName()]
		if !ok || hidden != nil && hidden[i] {
			s.drops.UnknownCluster++
			continue
		}
		b := s.blockFor(r, cc)
		if b == nil {
			s.drops.OverCap++
			continue
		}
		slot := epoch % Buckets
		if b.stamps[slot] != epoch {
			for j := range b.cells {
				b.cells[j][slot] = counts{}
			}
			b.stamps[slot], b.weights[slot] = epoch, 0
		}
		var c *capLine
		endpoints, c = s.addCluster(r, b, cs, epoch, endpoints)
		if line == nil {
			line = c
		}
	}
	return line
}

// hidden marks the cluster stats of req (of the first MaxClusterStats) the
// stream's client may not report on; nil when it may report on all.
func (st *Stream) hidden(req *lrs.LoadStatsRequest) []bool {
	if st.readable == nil {
		return nil
	}
	stats := req.GetClusterStats()
	stats = stats[:min(len(stats), MaxClusterStats)]
	var hidden []bool
	for i, cs := range stats {
		if !st.readable(cs.GetClusterName()) {
			if hidden == nil {
				hidden = make([]bool, len(stats))
			}
			hidden[i] = true
		}
	}
	return hidden
}

// blockFor is r's block for cc, allocated (within the cap) if it has none.
func (s *Store) blockFor(r *reporter, cc *catCluster) *block {
	if b, ok := r.blocks[cc.name]; ok {
		return b
	}
	if !s.evictOver(r, len(cc.keys)) {
		return nil
	}
	b := &block{cluster: cc, cells: make([]cell, len(cc.keys))}
	for i := range b.stamps {
		b.stamps[i] = -1
	}
	r.blocks[cc.name] = b
	s.cells += len(b.cells)
	s.blocks++
	return b
}

// stat is one endpoint stat of a report: the endpoint's index in its
// cluster and the counts.
type stat struct {
	i                       int32
	issued, success, errors uint64
}

// addCluster adds one cluster's stats to b's slot of epoch, within the
// reporter's cap (see Report); endpoints counts the endpoint stats read so
// far in the request. When the stats were capped, it says what for the
// log, if a line is due.
func (s *Store) addCluster(r *reporter, b *block, cs *endpoint.ClusterStats, epoch int64, endpoints int) (int, *capLine) {
	stats, w, endpoints := s.collect(b, cs, endpoints)
	slot := int(epoch % Buckets)
	room := s.room(b, epoch)
	if w.hi == 0 && w.lo <= room {
		for _, x := range stats {
			s.add(r, b, x.i, slot, x.issued, x.success, x.errors)
		}
		b.weights[slot] += uint32(w.lo) // w.lo ≤ room: the slot stays within the cap
		s.keepScratch()
		return endpoints, nil
	}
	var kept uint64
	for _, x := range stats {
		issued, success, errs := scale(x.issued, room, w), scale(x.success, room, w), scale(x.errors, room, w)
		s.add(r, b, x.i, slot, issued, success, errs)
		kept += max(issued, success+errs)
	}
	s.keepScratch()
	b.weights[slot] += uint32(kept) // kept ≤ room
	cut := w.minus(kept).saturated()
	s.drops.Capped = sat64(s.drops.Capped, cut)
	s.drops.CappedReports++
	return endpoints, s.capLog.note(r.ID, b.cluster.name, w.saturated(), kept, s.latest)
}

// collect reads one cluster's stats into the store's scratch: the stats of
// the cluster's endpoints, within the request's bounds, and their weight
// (the sum of Load.Weight over them, exactly); the rest is counted in
// Drops.
func (s *Store) collect(b *block, cs *endpoint.ClusterStats, endpoints int) ([]stat, u128, int) {
	s.scratch = s.scratch[:0]
	var w u128
	// the interval the stats cover began at begin; without one, at the
	// report (nothing is known to be older)
	begin := s.latest
	if d := int64(cs.GetLoadReportInterval().AsDuration()); d > 0 {
		begin = math.MinInt64
		if s.latest >= math.MinInt64+d {
			begin = s.latest - d
		}
	}
	for i, ls := range cs.GetUpstreamLocalityStats() {
		if i >= MaxLocalityStats {
			s.drops.OverLimit += uint64(len(cs.GetUpstreamLocalityStats()) - i)
			break
		}
		eps := ls.GetUpstreamEndpointStats()
		if len(eps) == 0 {
			k, ok := endpointOfSubZone(ls.GetLocality().GetSubZone())
			if !ok {
				s.drops.NoEndpoint++
				continue
			}
			if endpoints >= MaxEndpointStats {
				s.drops.OverLimit++
				continue
			}
			endpoints++
			s.take(b, k, begin, ls.GetTotalIssuedRequests(), ls.GetTotalSuccessfulRequests(), ls.GetTotalErrorRequests(), &w)
			continue
		}
		for j, es := range eps {
			if endpoints >= MaxEndpointStats {
				s.drops.OverLimit += uint64(len(eps) - j)
				break
			}
			endpoints++
			k, ok := socketKey(es.GetAddress())
			if !ok {
				s.drops.UnknownEndpoint++
				continue
			}
			s.take(b, k, begin, es.GetTotalIssuedRequests(), es.GetTotalSuccessfulRequests(), es.GetTotalErrorRequests(), &w)
		}
	}
	return s.scratch, w, endpoints
}

// take adds one endpoint's stat, over an interval that began at begin, to
// the scratch and its weight to w, or counts it dropped when the cluster
// has no such endpoint or the interval began before the endpoint's
// generation did.
func (s *Store) take(b *block, k endpointKey, begin int64, issued, success, errs uint64, w *u128) {
	i, ok := b.cluster.index[k]
	if !ok {
		s.drops.UnknownEndpoint++
		return
	}
	if begin < b.cluster.notBefore(int(i)) {
		s.drops.OldGeneration++
		return
	}
	s.scratch = append(s.scratch, stat{i, issued, success, errs})
	*w = w.plus128(max128(u128{0, issued}, u128{0, success}.plus(errs)))
}

// keepScratch lets a large scratch go once used, so one huge report does
// not hold its memory for good.
func (s *Store) keepScratch() {
	if cap(s.scratch) > maxScratch {
		s.scratch = nil
	}
}

// room is what b's reporter may still add to the window ending in the
// bucket epoch: the cap less the weight the window keeps.
func (s *Store) room(b *block, epoch int64) uint64 {
	var used uint64 // at most Buckets × MaxMaxRequests
	for slot, stamp := range b.stamps {
		if stamp > epoch-Buckets && stamp <= epoch {
			used += uint64(b.weights[slot])
		}
	}
	return s.maxReq - min(used, s.maxReq)
}

func socketKey(a *core.Address) (endpointKey, bool) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return endpointKey{}, false
	}
	return endpointKey{sa.GetAddress(), sa.GetPortValue()}, true
}

func (s *Store) add(r *reporter, b *block, i int32, slot int, issued, success, errs uint64) {
	c := &b.cells[i][slot]
	c.issued = sat32(c.issued, issued)
	c.success = sat32(c.success, success)
	c.errors = sat32(c.errors, errs)
	if b.cluster.spatial != nil {
		s.countSpatial(b.cluster, i, r, issued)
	}
}

// weight is the counts' weight, as Load.Weight's.
func (c counts) weight() uint64 {
	return max(uint64(c.issued), uint64(c.success)+uint64(c.errors))
}

// sat32 is a + b, saturating at the largest uint32.
func sat32(a uint32, b uint64) uint32 {
	if b >= 1<<32 || uint64(a)+b >= 1<<32 {
		return 1<<32 - 1
	}
	return a + uint32(b)
}

func sat64(a, b uint64) uint64 {
	if a+b < a {
		return 1<<64 - 1
	}
	return a + b
}

// evictOver makes room for n more cells by evicting the reporters with the
// oldest reports, never keep; it says whether there is room.
func (s *Store) evictOver(keep *reporter, n int) bool {
	for s.cells+n > s.maxCells {
		if !s.evictOldest(keep) {
			return false
		}
	}
	return true
}

// evictOldest drops the reporter (other than keep) with the oldest last
// report, ties by id, and says whether there was one.
func (s *Store) evictOldest(keep *reporter) bool {
	var victim *reporter
	for _, r := range s.reporters {
		if r == keep {
			continue
		}
		if victim == nil || r.last < victim.last || (r.last == victim.last && r.ID < victim.ID) {
			victim = r
		}
	}
	if victim == nil {
		return false
	}
	s.drop(victim)
	s.drops.Evicted++
	return true
}

func (s *Store) drop(r *reporter) {
	for name, b := range r.blocks {
		s.freeBlock(r, name, b)
	}
	r.gone = true
	delete(s.reporters, r.ID)
}

// sweep frees, at most once a bucket, the reporters whose streams all
// ended a window ago.
func (s *Store) sweep(epoch, now int64) {
	if epoch == s.swept {
		return
	}
	s.swept = epoch
	window := s.bucket * Buckets
	for _, r := range s.reporters {
		if r.streams == 0 && now-r.ended >= window {
			s.drop(r)
		}
	}
}

// Usage is what the store holds.
type Usage struct {
	Reporters, Blocks, Cells int
	// Bytes is the estimate of the bound's formula.
	Bytes int
	Drops Drops
}

// Usage says what the store holds now.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Usage{Reporters: len(s.reporters), Blocks: s.blocks, Cells: s.cells,
		Bytes: s.cells*CellBytes + s.blocks*blockBytes + len(s.reporters)*reporterBytes, Drops: s.drops}
}

// The fixed costs per block and per reporter in the bound, map entries included.
const (
	blockBytes    = int(unsafe.Sizeof(block{})) + 24 + 64
	reporterBytes = int(unsafe.Sizeof(reporter{})) + 3*maxField/2 + 48 + 64
)

// EndpointLoad is one endpoint's load over the window, summed over reporters.
type EndpointLoad struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// Generation is the endpoint's generation, when it has one, and
	// GenerationSince when this store's catalog first held it: the counts
	// are that generation's only.
	Generation      string     `json:"generation,omitempty"`
	GenerationSince *time.Time `json:"generationSince,omitempty"`
	Load
	// Reporters is how many distinct reporters reported requests to it.
	Reporters int `json:"reporters"`
	// Classes is the same by reporter locality class, by class name.
	Classes []ClassLoad `json:"classes,omitempty"`
}

// Load is a count of requests: issued, and finished successfully or in error.
type Load struct {
	Issued    uint64 `json:"issued"`
	Successes uint64 `json:"successes"`
	Errors    uint64 `json:"errors"`
}

func (l *Load) add(c counts) {
	l.Issued = sat64(l.Issued, uint64(c.issued))
	l.Successes = sat64(l.Successes, uint64(c.success))
	l.Errors = sat64(l.Errors, uint64(c.errors))
}

func (l *Load) plus(o Load) {
	l.Issued = sat64(l.Issued, o.Issued)
	l.Successes = sat64(l.Successes, o.Successes)
	l.Errors = sat64(l.Errors, o.Errors)
}

func (l Load) zero() bool { return l == Load{} }

// Weight is what the load weighs against a reporter's cap
// (Config.MaxRequests): the larger of its issued and its finished
// (successful and failed) requests, saturating. Demand reads the issued
// requests and outlier detection the finished ones, so the cap bounds
// both.
func (l Load) Weight() uint64 { return max(l.Issued, sat64(l.Successes, l.Errors)) }

// ClassLoad is the load reported by the reporters of one locality class.
type ClassLoad struct {
	Class string `json:"class"`
	Load
	Reporters int `json:"reporters"`
}

// window is endpoint i's load in the block over the window ending in the
// bucket epoch.
func (b *block) window(i int, epoch int64) Load {
	var l Load
	for slot, stamp := range b.stamps {
		if stamp > epoch-Buckets && stamp <= epoch {
			l.add(b.cells[i][slot])
		}
	}
	return l
}

// Cluster is the load of each endpoint of a cluster over the window ending
// at now, in the catalog's (canonical) endpoint order, every endpoint
// listed; nil when the cluster is not in the catalog. The figures depend
// only on what was reported, never on map order.
func (s *Store) Cluster(name string, now time.Time) []EndpointLoad {
	return s.cluster(name, now, true)
}

// cluster is Cluster, with the endpoints' generations when gens is set.
func (s *Store) cluster(name string, now time.Time, gens bool) []EndpointLoad {
	epoch := now.UnixNano() / s.bucket
	s.mu.Lock()
	defer s.mu.Unlock()
	cc, ok := s.catalog.clusters[name]
	if !ok {
		return nil
	}
	out := make([]EndpointLoad, len(cc.keys))
	for i, k := range cc.keys {
		out[i].Address, out[i].Port = k.addr, k.port
		if g := cc.gen(i); gens && g != "" {
			since := time.Unix(0, cc.since[i]).UTC()
			out[i].Generation, out[i].GenerationSince = g, &since
		}
	}
	for _, r := range s.reporters {
		b, ok := r.blocks[name]
		if !ok || b.cluster != cc {
			continue
		}
		for i := range b.cells {
			l := b.window(i, epoch)
			if l.zero() {
				continue
			}
			e := &out[i]
			e.plus(l)
			e.Reporters++
			j, found := slices.BinarySearchFunc(e.Classes, r.class, func(c ClassLoad, class string) int { return cmp.Compare(c.Class, class) })
			if !found {
				e.Classes = slices.Insert(e.Classes, j, ClassLoad{Class: r.class})
			}
			e.Classes[j].plus(l)
			e.Classes[j].Reporters++
		}
	}
	return out
}

// ClassRequests is the requests issued to the endpoints of a cluster over
// the window ending at now, summed per reporter locality class
// (Reporter.Class), saturating: what a Balanced upstream's demand from load
// reports reads (docs/weights.md). Each reporter weighs at most
// Config.MaxRequests in it. ok is false for a cluster not in the catalog.
func (s *Store) ClassRequests(cluster string, now time.Time) (requests map[string]uint64, ok bool) {
	return classRequests(s.cluster(cluster, now, false))
}

// classRequests sums endpoint loads' issued requests per reporter class,
// saturating; ok is false for a cluster the store does not know (nil).
func classRequests(eps []EndpointLoad) (map[string]uint64, bool) {
	if eps == nil {
		return nil, false
	}
	out := map[string]uint64{}
	for _, e := range eps {
		for _, c := range e.Classes {
			out[c.Class] = sat64(out[c.Class], c.Issued)
		}
	}
	return out, true
}

// Drops says what the store has dropped since it began.
func (s *Store) Drops() Drops {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops
}

// ClusterReports is each reporter's own load on each endpoint of one
// cluster over the window: what the fleet outlier detector needs to tell a
// failing endpoint from a failing client. Endpoints are in the catalog's
// (canonical) order; Reporters are sorted by id and hold only reporters
// with some load on the cluster in the window, each with one Load per
// endpoint (Loads[i] is Endpoints[i]'s). Its size is bounded by the
// store's: reporters × endpoints ≤ the cells the store holds.
type ClusterReports struct {
	Endpoints []Endpoint
	Reporters []ReporterLoads
}

// Endpoint names an endpoint of a cluster, with its generation
// (topology Endpoint.Generation).
type Endpoint struct {
	Address    string
	Port       uint32
	Generation string
}

// ReporterLoads is one reporter's load on each endpoint of a cluster.
type ReporterLoads struct {
	ID    string
	Loads []Load
}

// Reports is the per-reporter load of each endpoint of a cluster over the
// window ending at now; ok is false when the cluster is not in the catalog.
// Like Cluster, it depends only on what was reported, never on map order.
func (s *Store) Reports(name string, now time.Time) (ClusterReports, bool) {
	epoch := now.UnixNano() / s.bucket
	s.mu.Lock()
	defer s.mu.Unlock()
	cc, ok := s.catalog.clusters[name]
	if !ok {
		return ClusterReports{}, false
	}
	out := ClusterReports{Endpoints: make([]Endpoint, len(cc.keys))}
	for i, k := range cc.keys {
		out.Endpoints[i] = Endpoint{k.addr, k.port, cc.gen(i)}
	}
	for _, r := range s.reporters {
		b, ok := r.blocks[name]
		if !ok || b.cluster != cc {
			continue
		}
		var loads []Load
		for i := range b.cells {
			l := b.window(i, epoch)
			if l.zero() {
				continue
			}
			if loads == nil {
				loads = make([]Load, len(cc.keys))
			}
			loads[i] = l
		}
		if loads != nil {
			out.Reporters = append(out.Reporters, ReporterLoads{ID: r.ID, Loads: loads})
		}
	}
	slices.SortFunc(out.Reporters, func(a, b ReporterLoads) int { return cmp.Compare(a.ID, b.ID) })
	return out, true
}
