package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"poise.dev/poise/pkg/explain"
)

const (
	exitOK     = 0
	exitFailed = 1 // the check failed or timed out, or the demo could not start
	exitUsage  = 2 // the command line is wrong
)

// Bounds of the flags.
const (
	maxClientsPerZone = 20
	maxZones          = 8
	maxRate           = 1000
	minWindow         = 100
	maxWindow         = 100_000
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line.
type config struct {
	files        []string
	controlplane string
	xdsAddr      string
	adminAddr    string
	zones        []zoneClients
	rate         int
	window       int
	warmup       int
	every        time.Duration
	check        bool
	timeout      time.Duration
}

// zoneClients is how many clients the demo places in one zone.
type zoneClients struct {
	from  explain.From
	count int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\nRun 'demo --help' for usage.\n", err)
		return exitUsage
	}
	d := &demo{cfg: cfg, screen: newScreen(stdout), errOut: stderr}
	if err := d.run(ctx); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitFailed
	}
	return exitOK
}

func parse(args []string) (config, error) {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	fs.SortFlags = false
	var cfg config
	var clients string
	fs.StringSliceVarP(&cfg.files, "file", "f", []string{"examples"}, "manifest files or directories to serve (watched: edit them while the demo runs)")
	fs.StringVar(&cfg.controlplane, "controlplane", "", "the controlplane binary (default: controlplane beside this program, else on PATH)")
	fs.StringVar(&cfg.xdsAddr, "xds-address", "127.0.0.1:18000", "where the control plane serves xDS")
	fs.StringVar(&cfg.adminAddr, "admin-address", "127.0.0.1:19000", "where the control plane serves its admin port (/map, /debug/explain)")
	fs.StringVar(&clients, "clients", "eu-west/eu-west-1a=3,eu-west/eu-west-1b=1", "the clients: REGION/ZONE=N,... (N 1.."+strconv.Itoa(maxClientsPerZone)+" per zone)")
	fs.IntVar(&cfg.rate, "rate", 50, "calls a second each client sends (1.."+strconv.Itoa(maxRate)+")")
	fs.IntVar(&cfg.window, "window", 1000, "the last calls of each client zone the observed shares are of, and how many the check needs ("+strconv.Itoa(minWindow)+".."+strconv.Itoa(maxWindow)+")")
	fs.IntVar(&cfg.warmup, "warmup", 100, "calls of each client zone not counted after its clients take a new split, while they connect to its endpoints (0..window)")
	fs.DurationVar(&cfg.every, "every", time.Second, "how often the table is printed (100ms..1m)")
	fs.BoolVar(&cfg.check, "check", false, "run until every client zone's observed split is within 4.5σ of explain's over --window calls, then exit 0; exit 1 if one is not, or after --timeout")
	fs.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "with --check, how long to wait for the check (1s..1h)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `demo serves the examples with the controlplane binary, starts a gRPC backend on
every loopback endpoint they name and grpc-go xDS clients in two zones, and prints,
live, each endpoint's observed share beside the share explain computes (docs/demo.md).

Usage: demo [flags]

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if cfg.zones, err = parseClients(clients); err != nil {
		return cfg, fmt.Errorf("--clients %q: %w", clients, err)
	}
	switch {
	case len(cfg.files) == 0:
		return cfg, errors.New("-f: give at least one manifest file or directory")
	case cfg.rate < 1 || cfg.rate > maxRate:
		return cfg, fmt.Errorf("--rate %d: want 1 to %d calls a second", cfg.rate, maxRate)
	case cfg.window < minWindow || cfg.window > maxWindow:
		return cfg, fmt.Errorf("--window %d: want %d to %d calls", cfg.window, minWindow, maxWindow)
	case cfg.warmup < 0 || cfg.warmup > cfg.window:
		return cfg, fmt.Errorf("--warmup %d: want 0 to the window, %d", cfg.warmup, cfg.window)
	case cfg.every < 100*time.Millisecond || cfg.every > time.Minute:
		return cfg, fmt.Errorf("--every %v: want 100ms to 1m", cfg.every)
	case cfg.timeout < time.Second || cfg.timeout > time.Hour:
		return cfg, fmt.Errorf("--timeout %v: want 1s to 1h", cfg.timeout)
	}
	if cfg.controlplane == "" {
		if cfg.controlplane, err = findControlplane(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// parseClients reads REGION/ZONE=N,...
func parseClients(s string) ([]zoneClients, error) {
	var out []zoneClients
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		zone, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want REGION/ZONE=N", part)
		}
		from, err := explain.ParseFrom(zone)
		if err != nil || from.SubZone != "" {
			return nil, fmt.Errorf("%q: want REGION/ZONE=N", part)
		}
		count, err := strconv.Atoi(n)
		if err != nil || count < 1 || count > maxClientsPerZone {
			return nil, fmt.Errorf("%q: want 1 to %d clients", part, maxClientsPerZone)
		}
		if seen[zone] {
			return nil, fmt.Errorf("zone %s is given twice", zone)
		}
		seen[zone] = true
		out = append(out, zoneClients{from: from, count: count})
	}
	if len(out) > maxZones {
		return nil, fmt.Errorf("%d zones: at most %d", len(out), maxZones)
	}
	return out, nil
}

// findControlplane is the controlplane binary beside this program (make
// demo builds both into bin/), else the one on PATH.
func findControlplane() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "controlplane")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("controlplane")
	if err != nil {
		return "", errors.New("no controlplane binary beside this program or on PATH: run `make demo`, or build it (make build) and give --controlplane bin/controlplane")
	}
	return p, nil
}
