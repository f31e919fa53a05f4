package upstreamgauges

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// DefaultMaxUpstreams is how many upstreams have per-upstream gauges
// unless the Options say otherwise.
const DefaultMaxUpstreams = 1000

// Options bound the gauges' cardinality.
type Options struct {
	// Localities: the locality gauges (poise_upstream_locality_traffic),
	// the most numerous, are exported.
	Localities bool
	// MaxUpstreams is how many upstreams at most have gauges (0 or less:
	// none).
	MaxUpstreams int
	// Log receives the one line saying upstreams go unexported (nil: nowhere).
	Log *slog.Logger
}

// Gauges are the gauges of each upstream's computed figures: priority
// loads, locality traffic, dropped fraction and panic state. They follow
// the publications: Queue takes the upstreams a publication changed (cheap,
// under the publisher's lock), Run applies them on its own goroutine, so
// the gauges' cost never delays a publication. Their cardinality is
// bounded: at most max upstreams are exported (the first seen; a slot
// frees when one is removed) and the locality gauges, the most numerous,
// can be turned off.
type Gauges struct {
	PriorityLoad    *prometheus.GaugeVec // namespace, upstream, priority
	PriorityPanic   *prometheus.GaugeVec // namespace, upstream, priority
	TotalPanic      *prometheus.GaugeVec // namespace, upstream
	Dropped         *prometheus.GaugeVec // namespace, upstream
	LocalityTraffic *prometheus.GaugeVec // namespace, upstream, priority, region, zone, subzone

	mu         sync.Mutex
	pending    map[topology.Key]*topology.UpstreamState // nil: removed
	kick       chan struct{}
	localities bool
	max        int
	log        *slog.Logger

	// Used by Flush only (flushing serializes on it).
	flush    sync.Mutex
	exported map[topology.Key]*series
	capped   bool // the line saying upstreams go unexported is logged
}

// series are the label values one upstream's gauges were set with, so an
// update deletes exactly those that are gone.
type series struct {
	priorities []string
	localities [][4]string // priority, region, zone, subzone
}

// New returns the gauges, bounded by o; register them (they are one
// prometheus.Collector) and Run them.
func New(o Options) *Gauges {
	up := []string{"namespace", "upstream"}
	pri := append(slices.Clone(up), "priority")
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gauges{
		PriorityLoad: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_upstream_priority_load", Help: "Fraction (0 to 1) of an upstream's traffic its priority receives, as published.",
		}, pri),
		PriorityPanic: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_upstream_priority_panic", Help: "1 while a priority of an upstream is in panic (too few eligible endpoints: its load goes to every endpoint, or is dropped under FailClosed).",
		}, pri),
		TotalPanic: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_upstream_total_panic", Help: "1 while an upstream is in total panic: its priorities together lack the eligible endpoints to carry its traffic.",
		}, up),
		Dropped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_upstream_dropped_fraction", Help: "Fraction (0 to 1) of an upstream's traffic dropped by FailClosed panic handling.",
		}, up),
		LocalityTraffic: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_upstream_locality_traffic", Help: "Fraction (0 to 1) of all of an upstream's traffic a (priority, locality) group receives. Off with --metrics-locality-gauges=false.",
		}, append(slices.Clone(pri), "region", "zone", "subzone")),
		pending: map[topology.Key]*topology.UpstreamState{}, kick: make(chan struct{}, 1),
		localities: o.Localities, max: max(o.MaxUpstreams, 0), log: log,
		exported: map[topology.Key]*series{},
	}
}

func (u *Gauges) vecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{u.PriorityLoad, u.PriorityPanic, u.TotalPanic, u.Dropped, u.LocalityTraffic}
}

func (u *Gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range u.vecs() {
		v.Describe(ch)
	}
}

func (u *Gauges) Collect(ch chan<- prometheus.Metric) {
	for _, v := range u.vecs() {
		v.Collect(ch)
	}
}

// Queue takes the upstreams a publication changed: a map insert each, the
// latest state of an upstream replacing one not yet applied.
func (u *Gauges) Queue(old, cur *topology.UpstreamState) {
	k := cur
	if k == nil {
		k = old
	}
	if k == nil {
		return
	}
	u.mu.Lock()
	u.pending[k.Upstream.Key] = cur
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Run applies what is queued until ctx is done.
func (u *Gauges) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-u.kick:
			u.Flush()
		}
	}
}

// Flush applies what is queued now, in key order (so which upstreams fit
// under the bound does not depend on map order).
func (u *Gauges) Flush() {
	u.flush.Lock()
	defer u.flush.Unlock()
	u.mu.Lock()
	pending := u.pending
	u.pending = make(map[topology.Key]*topology.UpstreamState, len(pending))
	localities, maxUpstreams, log := u.localities, u.max, u.log
	u.mu.Unlock()
	keys := make([]topology.Key, 0, len(pending))
	for k := range pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, topology.Key.Compare)
	for _, k := range keys {
		st := pending[k]
		was := u.exported[k]
		if st == nil || st.Result == nil {
			if was != nil {
				u.delete(k, was, nil)
				delete(u.exported, k)
			}
			continue
		}
		if was == nil && len(u.exported) >= maxUpstreams {
			if !u.capped {
				u.capped = true
				log.Warn("per-upstream gauges are exported for at most --metrics-max-upstreams upstreams; the others have none (their figures are in /debug/explain and status)",
					"max", maxUpstreams, "firstLeftOut", k.String())
			}
			continue
		}
		now := u.set(k, st.Result, localities)
		if was != nil {
			u.delete(k, was, now)
		}
		u.exported[k] = now
	}
}

// set sets an upstream's gauges and returns their label values.
func (u *Gauges) set(k topology.Key, r *weights.Result, localities bool) *series {
	s := &series{priorities: make([]string, 0, len(r.Priorities))}
	ns, name := k.Namespace, k.Name
	u.TotalPanic.WithLabelValues(ns, name).Set(flag(r.TotalPanic))
	u.Dropped.WithLabelValues(ns, name).Set(fraction(r.DroppedMillionths))
	for _, p := range r.Priorities {
		pr := strconv.FormatUint(uint64(p.Priority), 10)
		s.priorities = append(s.priorities, pr)
		u.PriorityLoad.WithLabelValues(ns, name, pr).Set(fraction(p.Load))
		u.PriorityPanic.WithLabelValues(ns, name, pr).Set(flag(p.InPanic))
	}
	if localities {
		for _, l := range r.Localities {
			lv := [4]string{strconv.FormatUint(uint64(l.Priority), 10), l.Locality.Region, l.Locality.Zone, l.Locality.SubZone}
			s.localities = append(s.localities, lv)
			u.LocalityTraffic.WithLabelValues(ns, name, lv[0], lv[1], lv[2], lv[3]).Set(fraction(l.Traffic))
		}
	}
	return s
}

// delete deletes the series of was that now does not have (all of them
// when now is nil).
func (u *Gauges) delete(k topology.Key, was, now *series) {
	ns, name := k.Namespace, k.Name
	if now == nil {
		u.TotalPanic.DeleteLabelValues(ns, name)
		u.Dropped.DeleteLabelValues(ns, name)
		now = &series{}
	}
	for _, pr := range was.priorities {
		if !slices.Contains(now.priorities, pr) {
			u.PriorityLoad.DeleteLabelValues(ns, name, pr)
			u.PriorityPanic.DeleteLabelValues(ns, name, pr)
		}
	}
	for _, lv := range was.localities {
		if !slices.Contains(now.localities, lv) {
			u.LocalityTraffic.DeleteLabelValues(ns, name, lv[0], lv[1], lv[2], lv[3])
		}
	}
}

func fraction(millionths uint64) float64 { return float64(millionths) / float64(weights.Million) }

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
