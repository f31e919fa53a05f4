package controlplane

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// outliers runs fleet outlier detection (spec.outlierDetection) in files
// mode, where this replica alone decides and keeps its decisions in memory
// (docs/health.md, "Who decides"): every period it summarizes each
// detecting upstream's window of load reports, decides, and applies what
// changed to the Directory in one Apply.
type outliers struct {
	dir     *topology.Directory
	loads   *loadreport.Store
	decider *outlier.Decider
	m       *metrics.Outliers
	log     *slog.Logger
	// published is the ejections the Directory holds, by upstream: what
	// the next Apply is computed against, so a refused Apply is retried.
	published map[topology.Key]map[outlier.Endpoint]ejected

	mu     sync.Mutex
	status map[topology.Key]outlier.Status // the last evaluation's, by upstream with a detection
}

func newOutliers(dir *topology.Directory, loads *loadreport.Store, m *metrics.Outliers, log *slog.Logger) *outliers {
	return &outliers{dir: dir, loads: loads, decider: outlier.NewDecider(loads.Window()), m: m, log: log,
		published: map[topology.Key]map[outlier.Endpoint]ejected{}, status: map[topology.Key]outlier.Status{}}
}

// run evaluates every period until ctx ends.
func (o *outliers) run(ctx context.Context, period time.Duration) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			o.evaluate(now)
		}
	}
}

// evaluate decides every upstream with spec.outlierDetection at now, and
// withdraws the ejections of upstreams that lost it.
func (o *outliers) evaluate(now time.Time) {
	snap := o.dir.Current()
	var b topology.Batch
	want := map[topology.Key]map[outlier.Endpoint]ejected{}
	status := map[topology.Key]outlier.Status{}
	for _, u := range snap.Upstreams() {
		od := u.Upstream.OutlierDetection
		if od == nil {
			continue
		}
		k := u.Upstream.Key
		if _, known := o.published[k]; !known {
			o.m.Init(k.String())
			o.published[k] = map[outlier.Endpoint]ejected{}
		}
		// an upstream not yet in the store's catalog has no reports
		reports, _ := o.loads.Reports(xdsname.Cluster(k), now)
		agg := outlier.Summarize(reports, od.ErrorPercent)
		label := k.String()
		for _, v := range o.decider.Decide(k, *od, agg, outlier.EndpointsOf(u), now) {
			if v.Ejected {
				o.m.Ejections.WithLabelValues(label).Inc()
			}
			v.Log(o.log, label)
		}
		cur := map[outlier.Endpoint]ejected{}
		ejections := o.decider.Ejections(k)
		for _, e := range ejections {
			cur[outlier.Endpoint{Address: e.Address, Port: e.Port}] = ejected{e.Origin, e.Generation}
		}
		status[k] = outlier.Status{EvaluatedAt: now, Reporters: agg.Reporters, Untrusted: agg.Untrusted, Ejections: ejections}
		want[k] = cur
		o.m.Ejected.WithLabelValues(label).Set(float64(len(cur)))
		o.m.UntrustedReporters.WithLabelValues(label).Set(float64(agg.Untrusted))
	}
	for k := range o.published {
		if _, ok := want[k]; !ok {
			o.decider.Forget(k)
			o.m.Forget(k.String())
		}
	}
	o.mu.Lock()
	o.status = status
	o.mu.Unlock()
	changed := false
	for k, had := range o.published {
		vs := diffEjections(had, want[k])
		if len(vs) > 0 {
			b.PutOutlierVerdicts(k, vs)
			changed = true
		}
	}
	for k, cur := range want {
		if _, had := o.published[k]; !had {
			if vs := diffEjections(nil, cur); len(vs) > 0 {
				b.PutOutlierVerdicts(k, vs)
				changed = true
			}
		}
	}
	if changed {
		// An ejection only re-resolves an upstream that resolved before,
		// so a refusal is not expected; it is logged, and the next
		// evaluation retries from what the Directory holds.
		if _, err := o.dir.Apply(b); err != nil {
			o.log.Error("outlier verdicts refused", "error", err)
			return
		}
	}
	o.published = want
}

// ejected is an ejection as the Directory holds it: its evidence and the
// endpoint generation it applies to.
type ejected struct{ origin, generation string }

// diffEjections is the verdicts that turn the ejections had into want,
// sorted; an address names one verdict (a new generation's ejection
// replaces the old one's).
func diffEjections(had, want map[outlier.Endpoint]ejected) []topology.OutlierVerdict {
	var out []topology.OutlierVerdict
	for e, w := range want {
		if o, ok := had[e]; !ok || o != w {
			out = append(out, topology.OutlierVerdict{Address: e.Address, Port: e.Port, Ejected: true, Origin: w.origin, Generation: w.generation})
		}
	}
	for e, h := range had {
		if _, ok := want[e]; !ok {
			out = append(out, topology.OutlierVerdict{Address: e.Address, Port: e.Port, Generation: h.generation})
		}
	}
	slices.SortFunc(out, func(a, b topology.OutlierVerdict) int {
		if a.Address != b.Address {
			if a.Address < b.Address {
				return -1
			}
			return 1
		}
		return int(a.Port) - int(b.Port)
	})
	return out
}

// Status is upstream k's last evaluation, for /debug/loads; false when the
// upstream has no detection.
func (o *outliers) Status(k topology.Key) (outlier.Status, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st, ok := o.status[k]
	return st, ok
}
