package controlplane

import (
	"context"
	"fmt"
	"strings"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/files"
	"poise.dev/poise/pkg/signals/healthcheck"
)

// buildFiles loads the manifest files into the Directory and returns what
// files mode runs: the source watching them, and, this replica being
// alone, the active health checks and fleet outlier detection.
func buildFiles(cfg Config, p *parts) (mode, error) {
	src := &files.Source{Paths: cfg.Paths, Dir: p.dir, Debounce: cfg.Debounce, MaxDelay: cfg.DebounceMax, Settle: cfg.Settle, Log: p.log, Metrics: p.m.Source}
	if _, err := src.Load(); err != nil {
		return mode{}, fmt.Errorf("initial manifests are invalid; nothing to serve:\n%s", "  "+strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	// Alone in files mode, this replica checks every upstream with
	// spec.healthCheck; an idle Checker costs a goroutine and a timer.
	checker := healthcheck.New(p.checks)
	p.m.Checks.SetEndpoints(checker.States)
	// and decides fleet outlier detection, once a bucket
	detector := newOutliers(p.dir, p.loads, p.m.Outliers, p.log)
	return mode{
		tasks: []task{
			{cfg.Source + " source", src.Run},
			{"health checks", func(ctx context.Context) error { return runHealthChecks(ctx, p.dir, checker, p.log) }},
			{"outlier detection", func(ctx context.Context) error { return detector.run(ctx, p.outlierPeriod()) }},
		},
		admin: admin.Sources{
			Warnings: func() []string {
				if r := src.Refusal(); r != "" {
					return []string{r}
				}
				return nil
			},
			Outliers: detector.Status,
		},
	}, nil
}
