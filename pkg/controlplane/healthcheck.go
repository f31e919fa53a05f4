package controlplane

import (
	"context"
	"log/slog"
	"os"
	"slices"

	"poise.dev/poise/pkg/healthcheck"
	"poise.dev/poise/pkg/topology"
)

// checkerName names this replica in every active check's origin, so explain
// says who checked: the hostname, as a replica in a cluster is its pod.
func checkerName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "poise"
}

// runHealthChecks runs the active health checks of spec.healthCheck in files
// mode, where this replica alone decides (docs/health.md): the Checker follows
// the Directory's snapshots (each changed upstream's check and its resolved
// endpoints, so only addresses the sets admit are dialled) and its verdict
// changes go back into the Directory as an overlay of the sets.
func runHealthChecks(ctx context.Context, dir *topology.Directory, c *healthcheck.Checker, log *slog.Logger) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, func(vs []healthcheck.Verdict) { applyVerdicts(dir, vs, log) })
	}()
	followChecks(ctx, dir, c)
	<-done
	return nil
}

// applyVerdicts puts a batch of verdict changes (sorted by upstream) into the
// Directory in one Apply.
func applyVerdicts(dir *topology.Directory, vs []healthcheck.Verdict, log *slog.Logger) {
	var b topology.Batch
	for i := 0; i < len(vs); {
		j := i
		var out []topology.CheckVerdict
		for ; j < len(vs) && vs[j].Upstream == vs[i].Upstream; j++ {
			v := vs[j]
			out = append(out, topology.CheckVerdict{Address: v.Target.Address, Port: v.Target.Port, Probe: v.Probe, Origin: v.Origin})
		}
		b.PutCheckVerdicts(vs[i].Upstream, out)
		i = j
	}
	// A verdict only re-resolves an upstream that resolved before, so a
	// refusal is not expected; it is logged, and the next change retries.
	if _, err := dir.Apply(b); err != nil {
		log.Error("active health check verdicts refused", "error", err)
	}
}

// checked is what the Checker was last given for one upstream.
type checked struct {
	hc      *topology.HealthCheck
	targets []healthcheck.Target
}

// followChecks gives the Checker each upstream's check and endpoints as the
// Directory changes, until ctx ends. Only upstreams that changed are looked
// at, and the Checker is called only when their check or endpoints did: a
// verdict moves its upstream's revision, and must not come back as a Set.
func followChecks(ctx context.Context, dir *topology.Directory, c *healthcheck.Checker) {
	given := map[topology.Key]checked{}
	var seen *topology.Snapshot
	for {
		// Changed before Current: a snapshot published between them still
		// wakes the next wait.
		changed := dir.Changed()
		snap := dir.Current()
		var keys []topology.Key
		ok := false
		if seen != nil {
			keys, ok = snap.ChangedSince(seen.Revision)
		}
		if !ok { // first, or too far behind: every upstream, and every one given
			keys = nil // never append to ChangedSince's list: the snapshot keeps it
			for _, u := range snap.Upstreams() {
				keys = append(keys, u.Upstream.Key)
			}
			for k := range given {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, topology.Key.Compare)
			keys = slices.Compact(keys)
		}
		for _, k := range keys {
			var want checked
			if u := snap.Upstream(k); u != nil && u.Upstream.HealthCheck != nil {
				want.hc = u.Upstream.HealthCheck
				for _, e := range u.Endpoints {
					want.targets = append(want.targets, healthcheck.Target{Address: e.Address, Port: e.Port})
				}
			}
			old, had := given[k]
			if !had && want.hc == nil {
				continue
			}
			if had && old.hc.Equal(want.hc) && slices.Equal(old.targets, want.targets) {
				continue
			}
			c.Set(k, want.hc, want.targets)
			if want.hc == nil {
				delete(given, k)
			} else {
				given[k] = want
			}
		}
		seen = snap
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
