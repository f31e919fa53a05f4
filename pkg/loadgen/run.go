package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"time"
)

// Config is one load run.
type Config struct {
	// Addr is the plane's xDS address; Clusters the names subscriptions
	// index (a Churner's, when there is one).
	Addr     string
	Clusters []string
	Pattern  Pattern
	// TLS and Token are every client's credentials (see Spec).
	TLS   *tls.Config
	Token string
	// Churn, when set, flips clusters, each flip logged before it is
	// written: phase after phase (Phases), or, without phases, Rate clusters
	// a second for Duration, round-robin over Clusters.
	Churn    Churner
	Phases   []Phase
	Rate     float64
	Duration time.Duration
	// SyncTimeout bounds the start (every client holding its
	// subscription); Drain how long deliveries are awaited after the last
	// flip; Idle the quiet interval over which the plane's idle CPU is
	// measured before the churn (0: none).
	// Settle is a quiet wait after the start, before the idle CPU and the
	// live heap are read (the last clients' ACKs still being handled).
	SyncTimeout, Drain, Idle, Settle time.Duration
	// ProfileDir, when set and the plane's admin port is known, receives
	// its heap profile after the start and a CPU profile of each phase.
	ProfileDir string
	// Procs is how many worker processes hold the fleet (each whole
	// connections); 0 or 1 keeps it in this process. StartWorker starts
	// worker i of n (the command re-executes itself).
	Procs       int
	StartWorker func(ctx context.Context, i, n int) (Worker, error)
	Plane       PlaneProbe
	Log         *slog.Logger
	// Reconnect has each client open its stream again when it ends (see
	// Fleet.Reconnect).
	Reconnect bool
}

// Share is worker i of n's part of the pattern: the clients whose
// connection number is i mod n.
func (c *Config) Share(i, n int) ([]Spec, error) {
	specs, err := c.Pattern.Specs(c.Clusters, func(conn int) bool { return conn%n == i })
	if err != nil {
		return nil, err
	}
	for k := range specs {
		specs[k].TLS, specs[k].Token = c.TLS, c.Token
	}
	return specs, nil
}

// Report is what a run measured.
type Report struct {
	Address     string  `json:"plane"`
	Clients     int     `json:"clients"`
	Envoy       int     `json:"envoy"`
	GRPC        int     `json:"grpc"`
	Delta       int     `json:"delta"`
	Connections int     `json:"connections"`
	Procs       int     `json:"procs"`
	Clusters    int     `json:"clusters"`
	Subscribed  int64   `json:"subscriptions"`
	SyncSeconds float64 `json:"syncSeconds"` // start → every client holds its subscription
	// The churn: changes written, over how long, and the deliveries they
	// were due (a change times its cluster's subscribers) and got.
	Changes       int64   `json:"changes"`
	TargetRate    float64 `json:"targetRate"`
	ChurnSeconds  float64 `json:"churnSeconds"`
	DrainSeconds  float64 `json:"drainSeconds"`
	Expected      int64   `json:"expectedDeliveries"`
	Delivered     int64   `json:"delivered"`
	DrainTimedOut bool    `json:"drainTimedOut,omitempty"`
	// Convergence is change written → each subscriber's receipt.
	Convergence     Dist          `json:"convergence"`
	ConvergenceData HistogramData `json:"convergenceHistogram"`
	// Resumed is, per reconnect, a stream's end → the first response on
	// the next one (when clients reconnected: Config.Reconnect).
	Resumed     *Dist         `json:"resumed,omitempty"`
	ResumedData HistogramData `json:"resumedHistogram,omitzero"`
	Counters    Counters      `json:"counters"`
	// Phases are each phase's own figures (the ones above sum them).
	Phases []PhaseReport `json:"phases,omitempty"`
	// PlaneCPU and the rest are set when the plane could be read.
	Plane *PlaneReport `json:"planeStats,omitempty"`
	// GeneratorCPUSeconds and GeneratorRSSBytes sum the load processes'.
	GeneratorCPUSeconds float64 `json:"generatorCpuSeconds"`
	GeneratorRSSBytes   float64 `json:"generatorRssBytes"`
}

// PlaneReport is the plane's CPU and memory over the run.
type PlaneReport struct {
	// IdleCores is its CPU over the quiet interval before the churn.
	IdleCores float64 `json:"idleCores"`
	// CPUSeconds is its CPU from the first change to the end of the drain,
	// Cores that over the churn's wall time.
	CPUSeconds float64 `json:"cpuSeconds"`
	Cores      float64 `json:"cores"`
	// PerChangeMs is CPUSeconds less idle per change; PerDeliveryUs per
	// delivery (per client per change): the cost a fleet scales by.
	PerChangeMs   float64 `json:"cpuPerChangeMs"`
	PerDeliveryUs float64 `json:"cpuPerDeliveryUs"`
	// StartCPUSeconds is its CPU from before the clients connected to
	// every client synced.
	StartCPUSeconds float64 `json:"startCpuSeconds"`
	// RSS before the clients connected, after the start (every client
	// synced) and at the end.
	RSSBeforeBytes float64 `json:"rssBeforeBytes"`
	RSSStartBytes  float64 `json:"rssStartBytes"`
	RSSEndBytes    float64 `json:"rssEndBytes"`
	// RSSPerClientBytes is what the start added to the RSS, per client.
	RSSPerClientBytes float64 `json:"rssPerClientBytes"`
	// LiveHeapBeforeBytes and LiveHeapStartBytes are the plane's heap
	// right after a collection, before the clients and after the start
	// (and the settle); LiveHeapPerClientBytes what the start added, per
	// client. Read when the admin port is known.
	LiveHeapBeforeBytes    float64 `json:"liveHeapBeforeBytes,omitempty"`
	LiveHeapStartBytes     float64 `json:"liveHeapStartBytes,omitempty"`
	LiveHeapPerClientBytes float64 `json:"liveHeapPerClientBytes,omitempty"`
}

// maxChanges bounds one run's changes.
const maxChanges = 100_000_000

// Run connects the fleet, drives the churn and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	procs := max(cfg.Procs, 1)
	rep := &Report{Address: cfg.Addr, Clients: cfg.Pattern.Size(), Procs: procs, Clusters: len(cfg.Clusters), TargetRate: cfg.Rate}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var before PlaneSample
	if cfg.Plane.Enabled() {
		var err error
		if before, err = cfg.Plane.Sample(ctx); err != nil {
			return nil, fmt.Errorf("read the plane: %w", err)
		}
	}
	heapBefore, err := cfg.Plane.LiveHeap(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("read the plane's heap: %w", err)
	}
	start := time.Now()
	var parts []part
	if procs == 1 {
		specs, err := cfg.Share(0, 1)
		if err != nil {
			return nil, err
		}
		f, err := NewFleet(cfg.Addr, cfg.Clusters, specs, log)
		if err != nil {
			return nil, err
		}
		f.Reconnect = cfg.Reconnect
		p := newLocalPart(f)
		if err := f.Start(ctx); err != nil {
			return nil, err
		}
		defer f.Close()
		parts = append(parts, p)
	} else {
		if cfg.StartWorker == nil {
			return nil, errors.New("several processes, but no way to start a worker")
		}
		for i := range procs {
			w, err := cfg.StartWorker(ctx, i, procs)
			if err != nil {
				return nil, fmt.Errorf("start worker %d of %d: %w", i+1, procs, err)
			}
			parts = append(parts, newRemotePart(w))
		}
	}
	log.Info("connecting", "clients", rep.Clients, "procs", procs, "plane", cfg.Addr)
	sctx, scancel := context.WithTimeout(ctx, cfg.SyncTimeout)
	for i, p := range parts {
		if err := p.synced(sctx); err != nil {
			scancel()
			return nil, fmt.Errorf("start (part %d of %d): %w", i+1, len(parts), err)
		}
	}
	scancel()
	rep.SyncSeconds = time.Since(start).Seconds()
	log.Info("synced", "clients", rep.Clients, "seconds", rep.SyncSeconds)

	var s0, s1 PlaneSample
	if cfg.Settle > 0 {
		select {
		case <-time.After(cfg.Settle):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if cfg.Plane.Enabled() {
		idle, err := cfg.Plane.Sample(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the plane: %w", err)
		}
		rep.Plane = &PlaneReport{RSSBeforeBytes: before.RSSBytes, RSSStartBytes: idle.RSSBytes, StartCPUSeconds: idle.CPUSeconds - before.CPUSeconds,
			RSSPerClientBytes: (idle.RSSBytes - before.RSSBytes) / float64(max(rep.Clients, 1))}
		heap, err := cfg.Plane.LiveHeap(ctx, profilePath(cfg.ProfileDir, "heap-start.pb.gz"))
		if err != nil {
			return nil, fmt.Errorf("read the plane's heap: %w", err)
		}
		if heap > 0 {
			rep.Plane.LiveHeapBeforeBytes, rep.Plane.LiveHeapStartBytes = heapBefore, heap
			rep.Plane.LiveHeapPerClientBytes = (heap - heapBefore) / float64(max(rep.Clients, 1))
		}
		if idle, err = cfg.Plane.Sample(ctx); err != nil { // the collection above is not idle
			return nil, fmt.Errorf("read the plane: %w", err)
		}
		if cfg.Idle > 0 {
			select {
			case <-time.After(cfg.Idle):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if s0, err = cfg.Plane.Sample(ctx); err != nil {
				return nil, fmt.Errorf("read the plane: %w", err)
			}
			rep.Plane.IdleCores = (s0.CPUSeconds - idle.CPUSeconds) / s0.At.Sub(idle.At).Seconds()
		} else {
			s0 = idle
		}
	}

	phases := cfg.Phases
	if len(phases) == 0 && cfg.Rate > 0 && cfg.Duration > 0 {
		phases = []Phase{{Name: "churn", Select: Select{Kind: "all"}, Rate: cfg.Rate, Duration: cfg.Duration}}
	}
	if cfg.Churn == nil {
		phases = nil
	}
	var subs []int32
	if len(phases) > 0 {
		if subs, err = cfg.subscribers(); err != nil {
			return nil, err
		}
	}
	prev := make([]PartResult, len(parts))
	if len(phases) > 0 {
		// Each part's state before the first phase, so that the first
		// phase's figures (its CPU above all) leave the start out.
		for i, p := range parts {
			if prev[i], err = p.mark(ctx, 0); err != nil {
				return nil, fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
			}
		}
	}
	for _, ph := range phases {
		pr, err := runPhase(ctx, cfg, ph, parts, prev, subs, rep.Clients, rep.Plane, log)
		if err != nil {
			return nil, fmt.Errorf("phase %s: %w", ph.Name, err)
		}
		rep.Phases = append(rep.Phases, pr)
		rep.Changes += pr.Changes
		rep.ChurnSeconds += pr.ChurnSeconds
		rep.DrainSeconds += pr.DrainSeconds
	}
	for i, p := range parts {
		r, err := p.finish(ctx, 0) // each phase drained already
		if err != nil {
			return nil, fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
		}
		rep.add(r)
	}
	if procs > 1 {
		own, _ := CPUSeconds("self") // the parent's own, beside the workers'
		rep.GeneratorCPUSeconds += own
	}
	var conv Histogram
	conv.Merge(rep.ConvergenceData)
	rep.Convergence = conv.Dist()
	if rep.Counters.Reconnects > 0 {
		var rh Histogram
		rh.Merge(rep.ResumedData)
		d := rh.Dist()
		rep.Resumed = &d
	}
	if rep.Plane != nil {
		var err error
		if s1, err = cfg.Plane.Sample(ctx); err != nil {
			return nil, fmt.Errorf("read the plane: %w", err)
		}
		pr := rep.Plane
		pr.RSSEndBytes = s1.RSSBytes
		pr.CPUSeconds = s1.CPUSeconds - s0.CPUSeconds
		wall := s1.At.Sub(s0.At).Seconds()
		pr.Cores = pr.CPUSeconds / wall
		busy := max(pr.CPUSeconds-pr.IdleCores*wall, 0)
		if rep.Changes > 0 {
			pr.PerChangeMs = busy / float64(rep.Changes) * 1000
		}
		if rep.Delivered > 0 {
			pr.PerDeliveryUs = busy / float64(rep.Delivered) * 1e6
		}
	}
	return rep, nil
}

// subscribers counts each cluster's subscribers over the whole fleet.
func (c *Config) subscribers() ([]int32, error) {
	specs, err := c.Share(0, 1)
	if err != nil {
		return nil, err
	}
	n := make([]int32, len(c.Clusters))
	for _, s := range specs {
		for _, u := range s.Subscribe {
			n[u]++
		}
	}
	return n, nil
}

// profilePath is name under dir, or "" without a dir.
func profilePath(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

// runPhase writes a phase's changes, waits (up to cfg.Drain) for their
// deliveries at every part and reports the phase; prev holds each part's
// result at the previous phase's end and is updated.
func runPhase(ctx context.Context, cfg Config, ph Phase, parts []part, prev []PartResult, subs []int32, clients int, plane *PlaneReport, log *slog.Logger) (PhaseReport, error) {
	pr := PhaseReport{Name: ph.Name, Select: ph.Select.String(), TargetRate: ph.Rate}
	targets, err := ph.Select.Targets(subs, clients, cfg.Pattern.Hot)
	if err != nil {
		return pr, err
	}
	pr.Targets = len(targets)
	var sum int64
	for _, u := range targets {
		sum += int64(subs[u])
	}
	pr.Subscribers = float64(sum) / float64(len(targets))

	var s0 PlaneSample
	var c0 PlaneCounters
	watch := func() RSSTrace { return RSSTrace{} }
	profiled := func() error { return nil }
	if plane != nil {
		if s0, c0, err = cfg.Plane.SampleAndCount(ctx); err != nil {
			return pr, fmt.Errorf("read the plane: %w", err)
		}
		watch = cfg.Plane.watchRSS(ctx, s0.RSSBytes)
		if path := profilePath(cfg.ProfileDir, "cpu-"+ph.Name+".pb.gz"); path != "" {
			profiled = cfg.Plane.ProfileCPU(ctx, path, ph.Duration+2*time.Second)
		}
	}
	log.Info("phase", "name", ph.Name, "select", ph.Select.String(), "clusters", len(targets), "subscribers", pr.Subscribers,
		"rate", ph.Rate, "duration", ph.Duration.String())
	ownBefore, _ := CPUSeconds("self")
	start := time.Now()
	if pr.Changes, err = churn(ctx, cfg, ph, targets, parts); err != nil {
		return pr, err
	}
	pr.ChurnSeconds = time.Since(start).Seconds()
	drainStart := time.Now()
	var conv Histogram
	for i, p := range parts {
		r, err := p.mark(ctx, max(cfg.Drain-time.Since(drainStart), 0))
		if err != nil {
			return pr, fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
		}
		pr.Expected += r.Expected - prev[i].Expected
		pr.Delivered += r.Delivered - prev[i].Delivered
		pr.GeneratorCPUSeconds += r.CPUSeconds - prev[i].CPUSeconds
		pr.DrainTimedOut = pr.DrainTimedOut || r.DrainTimedOut
		conv.Merge(r.Conv)
		prev[i] = r
	}
	pr.DrainSeconds = time.Since(drainStart).Seconds()
	if _, local := parts[0].(*localPart); !local {
		// the parent's own (the churn's writer), beside its workers'
		own, _ := CPUSeconds("self")
		pr.GeneratorCPUSeconds += own - ownBefore
	}
	if pr.Delivered > 0 {
		pr.GeneratorPerDeliveryUs = pr.GeneratorCPUSeconds / float64(pr.Delivered) * 1e6
	}
	pr.ConvergenceData = conv.Data()
	pr.Convergence = conv.Dist()
	log.Info("phase done", "name", ph.Name, "changes", pr.Changes, "delivered", pr.Delivered, "due", pr.Expected,
		"p99", time.Duration(pr.Convergence.P99Us)*time.Microsecond, "drainTimedOut", pr.DrainTimedOut)
	if plane != nil {
		rss := watch()
		if err := profiled(); err != nil {
			return pr, fmt.Errorf("the plane's CPU profile: %w", err)
		}
		s1, c1, err := cfg.Plane.SampleAndCount(ctx)
		if err != nil {
			return pr, fmt.Errorf("read the plane: %w", err)
		}
		wall := s1.At.Sub(s0.At).Seconds()
		pp := &PhasePlane{CPUSeconds: s1.CPUSeconds - s0.CPUSeconds, RSSEndBytes: s1.RSSBytes, RSSMaxBytes: max(rss.MaxBytes, s1.RSSBytes), RSS: rss}
		pp.counted(c1.since(c0))
		pp.Cores = pp.CPUSeconds / wall
		busy := max(pp.CPUSeconds-plane.IdleCores*wall, 0)
		if pr.Changes > 0 {
			pp.PerChangeMs = busy / float64(pr.Changes) * 1000
		}
		if pr.Delivered > 0 {
			pp.PerDeliveryUs = busy / float64(pr.Delivered) * 1e6
		}
		pr.Plane = pp
	}
	return pr, nil
}

// churn writes a phase's flips: ph.Rate a second for ph.Duration,
// round-robin over targets, each logged with every part before it is
// written. A writer that falls behind stops on time with fewer.
func churn(ctx context.Context, cfg Config, ph Phase, targets []int32, parts []part) (int64, error) {
	n := len(cfg.Churn.Clusters())
	if n != len(cfg.Clusters) {
		return 0, fmt.Errorf("the churn changes %d clusters, the fleet subscribes to %d", n, len(cfg.Clusters))
	}
	total := int64(math.Min(math.Round(ph.Rate*ph.Duration.Seconds()), maxChanges))
	period := time.Duration(float64(time.Second) / ph.Rate)
	start := time.Now()
	deadline := start.Add(ph.Duration)
	var done int64
	for i := range max(total, 1) {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return done, ctx.Err()
			}
		}
		if i > 0 && time.Now().After(deadline) {
			break
		}
		u := targets[i%int64(len(targets))]
		at := time.Now().UnixNano()
		for _, p := range parts {
			if err := p.flip(u, at); err != nil {
				return done, err
			}
		}
		if err := cfg.Churn.Flip(ctx, int(u)); err != nil {
			return done, fmt.Errorf("change %d (cluster %s): %w", i+1, cfg.Clusters[u], err)
		}
		done++
	}
	if f, ok := cfg.Churn.(Flusher); ok {
		if err := f.Flush(ctx); err != nil {
			return done, err
		}
	}
	return done, nil
}

// add sums one part's result into the report.
func (r *Report) add(p PartResult) {
	r.Envoy += p.Envoy
	r.GRPC += p.GRPC
	r.Delta += p.Delta
	r.Connections += p.Connections
	r.Subscribed += p.Subscribed
	r.Expected += p.Expected
	r.Delivered += p.Delivered
	r.DrainTimedOut = r.DrainTimedOut || p.DrainTimedOut
	var h Histogram
	h.Merge(r.ConvergenceData)
	h.Merge(p.Conv)
	r.ConvergenceData = h.Data()
	c := &r.Counters
	c.Strays += p.Counters.Strays
	c.Leaks += p.Counters.Leaks
	c.Unattributed += p.Counters.Unattributed
	c.CDSLosses += p.Counters.CDSLosses
	c.Updates += p.Counters.Updates
	c.Resent += p.Counters.Resent
	c.Listeners += p.Counters.Listeners
	c.Routes += p.Counters.Routes
	c.Reconnects += p.Counters.Reconnects
	c.ResentAfterResume += p.Counters.ResentAfterResume
	c.SotWResentAfterReconnect += p.Counters.SotWResentAfterReconnect
	if len(p.Counters.StreamEnds) > 0 && c.StreamEnds == nil {
		c.StreamEnds = map[string]int64{}
	}
	for _, reason := range slices.Sorted(maps.Keys(p.Counters.StreamEnds)) {
		addEnds(c.StreamEnds, reason, p.Counters.StreamEnds[reason])
	}
	var rh Histogram
	rh.Merge(r.ResumedData)
	rh.Merge(p.Resumed)
	r.ResumedData = rh.Data()
	for _, n := range p.Counters.LeakNames {
		if len(c.LeakNames) < maxStrayNames {
			c.LeakNames = append(c.LeakNames, n)
		}
	}
	for _, n := range p.Counters.StrayNames {
		if len(c.StrayNames) < maxStrayNames {
			c.StrayNames = append(c.StrayNames, n)
		}
	}
	r.GeneratorCPUSeconds += p.CPUSeconds
	r.GeneratorRSSBytes += p.RSSBytes
}
