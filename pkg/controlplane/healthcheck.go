package controlplane

import (
	"context"
	"log/slog"
	"os"

	"poise.dev/poise/pkg/signals/healthcheck"
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
	healthcheck.Follow(ctx, dir, c)
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
			out = append(out, topology.CheckVerdict{Address: v.Target.Address, Port: v.Target.Port, Probe: v.Probe, Origin: v.Origin, Generation: v.Target.Generation})
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
