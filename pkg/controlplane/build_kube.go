package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/kube/replica"
)

// buildKube starts the Kubernetes replica, which fills the Directory from
// the cluster once its caches sync, and returns what Kubernetes mode runs:
// the replica until ctx is done, and this replica's share of the clients'
// loads with the leader, which decides fleet outlier detection for all.
func buildKube(ctx, stopping context.Context, cfg Config, p *parts) (mode, error) {
	routeLibraryLogs(p.log)
	rc, contextNamespace := cfg.RestConfig, ""
	if rc == nil {
		kc, err := loadKubeClient(cfg.Kubeconfig)
		if err != nil {
			return mode{}, fmt.Errorf("kubernetes client configuration: %w", err)
		}
		p.log.Info("kubernetes client configuration", "from", kc.from, "server", kc.config.Host)
		rc, contextNamespace = kc.config, kc.namespace
	}
	replica, err := replica.NewReplica(rc, p.dir, replica.Options{
		Namespace: cfg.Namespace, LeaderElectionNamespace: cfg.LeaderElectionNamespace, LeaderElectionID: cfg.LeaderElectionID,
		ContextNamespace: contextNamespace, StopLeading: stopping,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Debounce: cfg.Debounce, Log: p.log,
		Metrics:     replica.Metrics{Source: p.m.Source, Status: p.m.Status, Checks: p.m.Checks, Outliers: p.m.Outliers},
		Publication: rejectingPublication{p.pub, p.clients}, ClientQPS: cfg.KubeQPS, ClientBurst: cfg.KubeBurst, StatusShare: cfg.StatusShare,
		StatusWorkers: cfg.StatusWriters, HealthChecks: p.checks,
		OutlierPeriod: p.outlierPeriod(), OutlierWindow: p.loads.Window(),
		ClusterName: cfg.ClusterName, RemoteStaleAfter: cfg.RemoteStaleAfter, NoRemoteClusters: cfg.NoRemoteClusters,
	})
	if err != nil {
		return mode{}, err
	}
	errc, err := replica.Start(ctx)
	if err != nil {
		return mode{}, err
	}
	p.m.Source.SetInvalidObjects(func() map[string]float64 {
		out := map[string]float64{}
		for ref := range replica.Source.Rejections() {
			out[ref.Kind]++
		}
		return out
	})
	return mode{
		tasks: []task{
			{cfg.Source + " source", func(ctx context.Context) error {
				select {
				case err := <-errc:
					return err
				case <-ctx.Done():
					return <-errc
				}
			}},
			{"outlier detection", func(ctx context.Context) error {
				return shareLoads(ctx, p.dir, p.loads, replica.Shares, p.outlierPeriod(), p.log)
			}},
		},
		admin: admin.Sources{
			// warnings never make the replica unready: every replica sees the same
			// cluster, and an unready one would leave clients with no control plane
			Warnings: func() []string {
				return append(append(replica.Watch.Warnings(), replica.Remotes.Warnings()...), replica.CRDs.Warnings()...)
			},
			Clusters: func() any { return replica.Remotes.Status() }, // the remote clusters' states (/debug/clusters)
			CRDs:     func() any { return replica.CRDs.Statuses() },  // the cluster's CRDs against the binary's (/debug/crds)
		},
		rest: rc,
	}, nil
}

// libraryLogs is set once per process: controller-runtime and client-go log
// through process-wide loggers, and setting them again while another Run in
// the same process (a test's second replica) is logging would race.
var libraryLogs sync.Once

// RouteLibraryLogs sends controller-runtime's and client-go's logs to log,
// once per process; Run calls it on its first Kubernetes start. A process
// that runs Kubernetes clients of its own beside its planes (a test suite)
// calls it first, before any client starts: the loggers are process-wide,
// and Run setting them while another client reads them would race.
func RouteLibraryLogs(log *slog.Logger) { routeLibraryLogs(log) }

func routeLibraryLogs(log *slog.Logger) {
	libraryLogs.Do(func() {
		ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
		klog.SetLoggerWithOptions(logr.FromSlogHandler(log.Handler()), klog.WriteKlogBuffer(klogWriter(log)))
	})
}

// klogWriter logs klog's unstructured lines (klog.Warning, Infof, ...) at
// their own level. Through a logr.Logger klog hands a warning to Info, so
// it would read as INFO; given a writer, it hands over the formatted line,
// whose header ("W0102 15:04:05.000000 42 file.go:7] ") names the severity.
// Structured calls (InfoS, ErrorS, V(n)) still go through the logr.Logger.
func klogWriter(log *slog.Logger) func([]byte) {
	return func(line []byte) {
		text := strings.TrimRight(string(line), "\n")
		level := slog.LevelInfo
		if text != "" {
			switch text[0] {
			case 'W':
				level = slog.LevelWarn
			case 'E', 'F':
				level = slog.LevelError
			}
		}
		var attrs []any
		if i := strings.Index(text, "] "); i >= 0 {
			if f := strings.Fields(text[:i]); len(f) == 4 {
				attrs = append(attrs, "caller", f[3])
			}
			text = text[i+2:]
		}
		log.Log(context.Background(), level, text, attrs...)
	}
}
