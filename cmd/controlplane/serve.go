package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/source/files"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", stderr)
	var manifestPaths paths
	fs.Var(&manifestPaths, "f", "manifest file or directory to serve and watch (repeatable)")
	xdsAddr := fs.String("xds-address", "127.0.0.1:18000", "gRPC address for xDS (ADS SotW and Delta)")
	adminAddr := fs.String("admin-address", "127.0.0.1:19000", "HTTP address for /healthz, /readyz, /metrics, /debug")
	tlsCert := fs.String("tls-cert", "", "serve xDS over TLS with this certificate (PEM)")
	tlsKey := fs.String("tls-key", "", "private key of --tls-cert (PEM)")
	tlsCA := fs.String("tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	debounce := fs.Duration("debounce", 100*time.Millisecond, "coalesce manifest changes arriving within this interval")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	if len(manifestPaths) == 0 {
		fmt.Fprintln(stderr, "error: -f PATH is required (a manifest file or directory)")
		return exitUsage
	}
	var tlsCfg *server.TLS
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		tlsCfg = &server.TLS{CertFile: *tlsCert, KeyFile: *tlsKey, ClientCAFile: *tlsCA}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = serve(ctx, serveConfig{
		paths: manifestPaths, xdsAddr: *xdsAddr, adminAddr: *adminAddr, tls: tlsCfg, debounce: *debounce,
		log: log, stdout: stdout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

type serveConfig struct {
	paths              []string
	xdsAddr, adminAddr string
	tls                *server.TLS
	debounce           time.Duration
	log                *slog.Logger
	stdout             io.Writer
}

// serve runs the control plane on manifest files until ctx is done.
func serve(ctx context.Context, cfg serveConfig) error {
	log := cfg.log
	m := metrics.New()
	dir := topology.NewDirectory()
	src := &files.Source{Paths: cfg.paths, Dir: dir, Debounce: cfg.debounce, Log: log, Metrics: m}
	if _, err := src.Load(); err != nil {
		return fmt.Errorf("initial manifests are invalid; nothing to serve:\n%s", indent(err.Error()))
	}

	instance := publish.NewInstanceID()
	cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	pub := publish.New(cache, instance, log)
	pub.OnPublish = func(st publish.Stats) {
		m.SnapshotBuilds.WithLabelValues("published").Inc()
		m.SnapshotDuration.Observe(st.Duration.Seconds())
		m.PublishedRevision.Set(float64(st.Revision))
		for t, n := range st.Changes {
			m.ResourceChanges.WithLabelValues(xdscache.ShortType(t)).Add(float64(n))
		}
	}
	pub.OnReject = func(rev uint64, err error) {
		m.SnapshotBuilds.WithLabelValues("rejected").Inc()
		log.Error("translation refused; the last good snapshot keeps serving", "revision", rev, "error", err)
	}
	clients := server.NewClients(m, log)

	grpcServer, err := server.New(ctx, cache, clients, server.Config{TLS: cfg.tls})
	if err != nil {
		return err
	}
	xdsLis, err := net.Listen("tcp", cfg.xdsAddr)
	if err != nil {
		return fmt.Errorf("xds listener: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.adminAddr)
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	adminSrv := &http.Server{
		Handler: admin.Handler(admin.Sources{
			Ready: func() (bool, string) {
				if !pub.Published() {
					return false, "no snapshot published yet"
				}
				return true, ""
			},
			Snapshot: dir.Current,
			Clients:  clients.List,
			Metrics:  m,
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}

	fmt.Fprintf(cfg.stdout, "poise control plane %s (instance %s)\n", version, instance)
	fmt.Fprintf(cfg.stdout, "  xDS (ADS, SotW and Delta): %s%s\n", xdsLis.Addr(), tlsNote(cfg.tls))
	fmt.Fprintf(cfg.stdout, "  admin:                     http://%s (/readyz /metrics /debug/explain /debug/clients)\n", adminLis.Addr())
	fmt.Fprintf(cfg.stdout, "  watching:                  %v\n", cfg.paths)
	log.Info("serving", "xds", xdsLis.Addr().String(), "admin", adminLis.Addr().String(), "instance", instance)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	run("publisher", func() error { return pub.Run(ctx, dir) })
	run("xds server", func() error { return server.Serve(ctx, grpcServer, xdsLis) })
	run("admin server", func() error {
		go func() {
			<-ctx.Done()
			shutdown, done := context.WithTimeout(context.Background(), 2*time.Second)
			defer done()
			_ = adminSrv.Shutdown(shutdown)
		}()
		return adminSrv.Serve(adminLis)
	})
	run("manifest watcher", func() error { return src.Run(ctx) })
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	log.Info("stopped")
	return nil
}

func tlsNote(t *server.TLS) string {
	switch {
	case t == nil:
		return " (plaintext)"
	case t.ClientCAFile != "":
		return " (mTLS)"
	}
	return " (TLS)"
}
