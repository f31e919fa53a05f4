package demand

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// Census is what the signal reads of the connected clients (the xDS
// cache's census, through the wiring).
type Census interface {
	// Zones is how many open streams each class has in view v.
	Zones(view int) map[string]int
	// Demand is, for one published cluster, the summed demand weight of
	// the streams of each zone class that subscribe to its endpoints.
	Demand(cluster string) map[string]uint64
	// ZonesChanged is closed by the next change of Zones or Demand.
	ZonesChanged() <-chan struct{}
}

// LoadReports is how the signal reads the load reports of a Balanced
// upstream's clients.
type LoadReports struct {
	// Requests is the number of requests the clients of each locality class
	// ("region/zone", a region, or "") reported to the endpoints of the
	// published cluster over the window ending at now; ok is false when
	// that cluster's clients do not report load.
	Requests func(cluster string, now time.Time) (requests map[string]uint64, ok bool)
	// Bucket is how often the figures move; the signal reads them once a
	// bucket per upstream. Window is the span they cover.
	Bucket, Window time.Duration
}

// Demand changes are applied with hysteresis, so that client churn does not
// push to every client each time one connects: a new demand is applied once
// it has held for Quiet (counted from the census's last change), or
// MaxDelay after it first differed from the applied one, whichever comes
// first.
const (
	Quiet    = 2 * time.Second
	MaxDelay = 10 * time.Second
	// refreshEvery bounds how often connects and disconnects make the
	// signal look at the census: a burst of them is handled at once.
	refreshEvery = 100 * time.Millisecond
)

// Config is what a Signal reads and how.
type Config struct {
	Census Census
	// Views is how many views (renderings) the census counts classes in.
	Views int
	// Loads, when its Requests is set, makes Balanced upstreams whose
	// clients report load follow their reported request rates where the
	// window holds enough reports (observeDemand).
	Loads LoadReports
	Log   *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Signal follows the census and the load reports and hands the Directory
// the client classes and the demand of each Balanced upstream, as batches.
// Run drives it; it is not safe for concurrent use.
type Signal struct {
	dir    *topology.Directory
	census Census
	views  int
	loads  *LoadReports
	log    *slog.Logger
	now    func() time.Time

	// seen is the snapshot last followed; balanced the Balanced upstreams
	// in it.
	seen     *topology.Snapshot
	balanced map[topology.Key]followed
	// classes and applied are what the Directory holds, as last handed
	// over; pending the observed demands waiting for their hysteresis.
	classes *topology.ClientClasses
	applied map[topology.Key]reading
	pending map[topology.Key]*pending
	// loadsRead is what was last read of each upstream's load reports,
	// once a bucket.
	loadsRead map[topology.Key]*loadReading
	// censusAt is when the census last changed (zero: not since start), so
	// a demand first seen after a long quiet is applied at once.
	censusAt time.Time
}

// followed is a Balanced upstream as last seen.
type followed struct {
	cluster         string // its published cluster's name
	clusterRevision uint64
}

type pending struct {
	reading
	since, moved time.Time // first differed from the applied; last changed
}

// New returns a Signal that hands its batches to dir.
func New(dir *topology.Directory, cfg Config) *Signal {
	s := &Signal{dir: dir, census: cfg.Census, views: cfg.Views, log: cfg.Log, now: cfg.Now,
		balanced: map[topology.Key]followed{}, classes: topology.NewClientClasses(nil),
		applied: map[topology.Key]reading{}, pending: map[topology.Key]*pending{}, loadsRead: map[topology.Key]*loadReading{}}
	if cfg.Loads.Requests != nil && cfg.Loads.Bucket > 0 {
		loads := cfg.Loads
		s.loads = &loads
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Run follows the census, the load reports and the Directory until ctx is
// done: a class is handed over when its first client connects and taken
// back when its last leaves; each Balanced upstream's demand follows its
// clients with hysteresis, and an upstream that becomes Balanced follows
// them at once.
func (s *Signal) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		changed := s.census.ZonesChanged()
		if next := s.step(); next > 0 {
			timer.Reset(next)
		}
		if !s.wait(ctx, changed, timer.C) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(refreshEvery):
		}
	}
}

// wait waits for a change of the census, the timer, or a snapshot that
// brings a Balanced upstream to follow; false when ctx ended.
func (s *Signal) wait(ctx context.Context, census <-chan struct{}, timer <-chan time.Time) bool {
	for {
		// the channel is taken before the snapshot is looked at, so a
		// snapshot published after step's look and before this one is
		// followed here, not missed until the next change
		dirChanged := s.dir.Changed()
		// most snapshots (an endpoint flip, this signal's own demand)
		// change no Balanced upstream's demand
		if s.follow(s.dir.Current()) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-census:
			s.censusAt = s.now()
			return true
		case <-timer:
			return true
		case <-dirChanged:
		}
	}
}

// follow keeps the set of Balanced upstreams up to date with snap, taking
// back the demand of those that left it, and reports whether one joined the
// set or changed its Upstream object (who may read it, and so its demand).
func (s *Signal) follow(snap *topology.Snapshot) bool {
	if snap == s.seen {
		return false
	}
	var keys []topology.Key
	ok := false
	if s.seen != nil {
		keys, ok = snap.ChangedSince(s.seen.Revision)
	}
	if !ok { // first, or too far behind: every upstream, and every one followed
		keys = nil // never append to ChangedSince's list: the snapshot keeps it
		for _, u := range snap.Upstreams() {
			keys = append(keys, u.Upstream.Key)
		}
		keys = append(keys, slices.Collect(maps.Keys(s.balanced))...)
		slices.SortFunc(keys, topology.Key.Compare)
		keys = slices.Compact(keys)
	}
	s.seen = snap
	joined := false
	var left topology.Batch
	for _, k := range keys {
		u := snap.Upstream(k)
		if u == nil || u.Upstream.ModeOf() != affinity.Balanced {
			if _, was := s.balanced[k]; was {
				delete(s.balanced, k)
				if _, had := s.applied[k]; had {
					left.PutDemand(k, topology.AppliedDemand{})
				}
				delete(s.applied, k)
				delete(s.pending, k)
				delete(s.loadsRead, k)
			}
			continue
		}
		f := followed{cluster: xdsname.Cluster(k), clusterRevision: u.ClusterRevision}
		if old, was := s.balanced[k]; !was || old != f {
			joined = true
		}
		s.balanced[k] = f
	}
	if left.Len() > 0 {
		// an upstream that is not Balanced takes no demand: this changes
		// no snapshot, and a Balanced upstream again starts afresh
		if _, err := s.dir.Apply(left); err != nil {
			s.log.Error("client demand not withdrawn", "error", err)
		}
	}
	return joined
}

// step looks at the census and the load reports now, hands the Directory
// the classes and the demands that are due, in one batch, and returns how
// long until a pending demand is due or the load reports move (0: never).
func (s *Signal) step() time.Duration {
	s.follow(s.dir.Current())
	now := s.now()
	views := make([][]string, s.views)
	for v := range views {
		views[v] = slices.Collect(maps.Keys(s.census.Zones(v)))
	}
	classes := topology.NewClientClasses(views)
	classesMoved := !classes.Equal(s.classes)
	var (
		b       topology.Batch
		due     time.Duration
		reports bool // some Balanced upstream's clients report load
		window  time.Duration
		applied = map[topology.Key]reading{}
	)
	if s.loads != nil {
		window = s.loads.Window
	}
	for k, f := range s.balanced {
		loads := s.readLoads(k, f.cluster, now, classes, classesMoved)
		reports = reports || loads.ok
		cur := s.applied[k]
		observed := observeDemand(s.census.Demand(f.cluster), loads, window, cur.LoadReports)
		if sameDemand(observed, cur) {
			delete(s.pending, k)
			continue
		}
		pd := s.pending[k]
		switch {
		case pd == nil:
			// the census, and so this demand, has held since censusAt: an
			// upstream newly Balanced among settled clients is not kept
			// waiting, while one whose clients are churning is; load
			// reports move once a bucket, and a switch between the two
			// sources is a change of its own, now
			moved := s.censusAt
			if observed.LoadReports || cur.LoadReports {
				moved = now
			}
			pd = &pending{reading: observed, since: now, moved: moved}
			s.pending[k] = pd
		case !sameDemand(pd.reading, observed):
			pd.reading, pd.moved = observed, now
		default:
			pd.reading = observed // within the band: the latest figures
		}
		wait := min(Quiet-now.Sub(pd.moved), MaxDelay-now.Sub(pd.since))
		if wait <= 0 {
			b.PutDemand(k, pd.reading)
			applied[k] = pd.reading
			delete(s.pending, k)
			continue
		}
		if due == 0 || wait < due {
			due = wait
		}
	}
	if reports {
		// look again when the next bucket's figures are in
		bucket := s.loads.Bucket
		next := bucket - time.Duration(now.UnixNano()%int64(bucket)) + time.Millisecond
		if due == 0 || next < due {
			due = next
		}
	}
	if !classesMoved && len(applied) == 0 {
		return due
	}
	if classesMoved {
		b.SetClientClasses(classes)
	}
	// Only the Balanced upstreams whose demand moved are resolved again;
	// the classes alone change no upstream's state.
	if _, err := s.dir.Apply(b); err != nil {
		s.log.Error("client classes and demand refused; clients keep what they have, and the next change retries", "error", err)
		return due
	}
	s.classes = classes
	for k, r := range applied {
		if r.None() {
			delete(s.applied, k)
		} else {
			s.applied[k] = r
		}
	}
	return due
}

// readLoads is the load reports of upstream k's clients (its cluster
// name), read at most once a bucket and again when the classes moved, kept
// for the connected zone classes only.
func (s *Signal) readLoads(k topology.Key, cluster string, now time.Time, classes *topology.ClientClasses, classesMoved bool) loadReading {
	if s.loads == nil {
		return loadReading{}
	}
	epoch := now.UnixNano() / int64(s.loads.Bucket)
	if r := s.loadsRead[k]; r != nil && r.epoch == epoch && !classesMoved {
		return *r
	}
	requests, ok := s.loads.Requests(cluster, now)
	r := &loadReading{epoch: epoch, ok: ok}
	for class, n := range requests {
		if n > 0 && topology.IsZoneClass(class) && classes.Has(class) {
			if r.requests == nil {
				r.requests = map[string]uint64{}
			}
			r.requests[class] = n
		}
	}
	s.loadsRead[k] = r
	return *r
}
