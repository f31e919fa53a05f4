package controlplane

import (
	"context"
	"log/slog"
	"time"

	"poise.dev/poise/pkg/kube/shares"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// shareLoads is a Kubernetes replica's part of fleet outlier detection
// (docs/health.md, "Who decides"): once a period it summarizes its own
// clients' load reports of every upstream with spec.outlierDetection and
// writes the aggregates where the leader reads them. With no such upstream
// it shares nothing, and on its way out it deletes its share.
func shareLoads(ctx context.Context, dir *topology.Directory, loads *loadreport.Store, store *shares.Store, period time.Duration, log *slog.Logger) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	shared := false
	var lastErr time.Time
	for {
		select {
		case <-ctx.Done():
			if shared {
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := store.Delete(dctx); err != nil {
					log.Warn("deleting this replica's load aggregate failed; the leader ignores it once it is stale", "error", err)
				}
			}
			return nil
		case now := <-tick.C:
			aggs := summarizeAll(dir.Current(), loads, now)
			var err error
			switch {
			case len(aggs) == 0 && shared:
				if err = store.Delete(ctx); err == nil {
					shared = false
				}
			case len(aggs) > 0:
				var payload []byte
				if payload, err = outlier.EncodeShare(aggs, shares.MaxPayload); err == nil {
					if err = store.Put(ctx, payload, now); err == nil {
						shared = true
					}
				}
			}
			if err != nil && ctx.Err() == nil && time.Since(lastErr) > time.Minute {
				lastErr = time.Now()
				log.Warn("sharing this replica's load aggregate failed; retried every period", "error", err)
			}
		}
	}
}

// summarizeAll is this replica's aggregate of each upstream with a
// detection, each endpoint's failing instances cut to the minReporters
// smallest: all the leader needs to count distinct instances over the
// replicas.
func summarizeAll(snap *topology.Snapshot, loads *loadreport.Store, now time.Time) map[string]outlier.Aggregate {
	aggs := map[string]outlier.Aggregate{}
	for _, u := range snap.Upstreams() {
		od := u.Upstream.OutlierDetection
		if od == nil {
			continue
		}
		// an upstream not yet in the store's catalog has no reports
		reports, _ := loads.Reports(xdsname.Cluster(u.Upstream.Key), now)
		aggs[u.Upstream.Key.String()] = outlier.Summarize(reports, od.ErrorPercent).KeepInstances(od.MinReporters)
	}
	return aggs
}
