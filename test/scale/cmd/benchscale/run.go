package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"poise.dev/poise/pkg/loadgen"
)

// runConfig serves t to r.Clients clients and measures startup, memory, single
// flips and the sustained phase into r.
func runConfig(o *options, t *loadgen.Tree, r *result, logPath string, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	w0, w := 0, min(o.edsNames, t.N)
	if o.subscribeAll {
		w = t.N
	}
	r.EDSNames, r.EDSFirst, r.EDSLast = w, loadgen.UpstreamName(w0), loadgen.UpstreamName(w0+w-1)
	f := newFleet(t.N, w0, w, o.delta)
	fmt.Fprintf(stdout, "# %s: %d upstreams, %d %s clients: starting %s\n", r.Size, t.N, r.Clients, r.Protocol, o.binary)
	srv, err := startServer(o.binary, t.Dir, logPath, o.serveArgs)
	if err != nil {
		return err
	}
	defer srv.stop()
	if o.heapProfiles != "" {
		srv.profiles = fmt.Sprintf("%s-%s-%d", o.heapProfiles, r.Size, r.Clients)
	}
	procStart := int64(srv.start.Sub(f.epoch))

	// Startup: the process starts; clients connect once the xDS port
	// listens (it opens after the initial load); done when every client
	// holds every subscribed resource.
	sctx, scancel := context.WithTimeout(ctx, o.startupTimeout)
	defer scancel()
	type readiness struct {
		after time.Duration
		err   error
	}
	ready := make(chan readiness, 1)
	go func() {
		d, err := srv.waitReady(sctx)
		ready <- readiness{d, err}
	}()
	if err := srv.waitListening(sctx); err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	if err := f.connect(ctx, srv.xdsAddr, r.Clients); err != nil {
		return err
	}
	defer func() {
		cancel() // the clients end quietly, before the server does
		f.close()
	}()
	if err := waitFor(sctx, srv, f, func() bool { return f.synced.Load() == int64(r.Clients) }); err != nil {
		return fmt.Errorf("startup: %d of %d clients hold every resource: %w", f.synced.Load(), r.Clients, err)
	}
	r.Startup.AllClientsSeconds = time.Duration(f.lastSync.Load() - procStart).Seconds()
	rd := <-ready
	if rd.err != nil {
		return fmt.Errorf("readyz: %w", rd.err)
	}
	r.Startup.ReadyzSeconds = rd.after.Seconds()
	if r.Memory.AfterStartup, err = sample(srv, true); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# startup %.2f s; %d single flips\n", r.Startup.AllClientsSeconds, o.singleFlips)

	if o.singleFlips > 0 {
		if r.Single, err = singleFlips(ctx, o, t, f, srv); err != nil {
			return err
		}
		m, err := sample(srv, false)
		if err != nil {
			return err
		}
		r.Memory.AfterSingle = &m
		fmt.Fprintf(stdout, "# single flips done; sustained %v at %g flips/s\n", o.duration, o.rate)
	}
	if o.duration > 0 && o.rate > 0 {
		if r.Sustained, err = sustained(ctx, o, t, f, srv); err != nil {
			return err
		}
		m, err := sample(srv, false)
		if err != nil {
			return err
		}
		r.Memory.AfterSustained = &m
	}
	_, hwm, err := srv.memory()
	if err != nil {
		return err
	}
	r.Memory.PeakRSSMiB = mib(hwm)
	if r.Single != nil || r.Sustained != nil {
		m, err := sample(srv, true)
		if err != nil {
			return err
		}
		r.Memory.AtEnd = &m
	}
	return nil
}

// waitFor polls cond until it holds, ctx ends, a client fails or the server exits.
func waitFor(ctx context.Context, srv *server, f *fleet, cond func() bool) error {
	for !cond() {
		if err := f.Err(); err != nil {
			return err
		}
		if err := srv.alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// sample is the server's memory now; with gc, also its live heap after a
// forced collection.
func sample(srv *server, gc bool) (memSample, error) {
	var s memSample
	rss, _, err := srv.memory()
	if err != nil {
		return s, err
	}
	m, err := srv.metrics()
	if err != nil {
		return s, err
	}
	s.RSSMiB = mib(rss)
	s.HeapInuseMiB = mib(m["go_memstats_heap_inuse_bytes"])
	s.HeapAllocMiB = mib(m["go_memstats_heap_alloc_bytes"])
	if gc {
		if err := srv.gc(); err != nil {
			return s, err
		}
		if m, err = srv.metrics(); err != nil {
			return s, err
		}
		live := mib(m["go_memstats_heap_alloc_bytes"])
		s.LiveHeapAfterGCMiB = &live
	}
	return s, nil
}

func mib(b float64) float64 { return b / (1 << 20) }

// cpuWindow is the server's and the bench's CPU seconds at one moment.
type cpuWindow struct {
	at            time.Time
	server, bench float64
}

func cpuNow(srv *server) (cpuWindow, error) {
	s, err := srv.cpu()
	if err != nil {
		return cpuWindow{}, err
	}
	b, err := loadgen.CPUSeconds("self")
	return cpuWindow{at: time.Now(), server: s, bench: b}, err
}

// phaseStart is where a measured phase began: its flips, the clients'
// counters, the server's metrics and the CPU of both processes.
type phaseStart struct {
	f       *fleet
	srv     *server
	ph      *phase
	before  counters
	metrics map[string]float64
	cpu     cpuWindow
}

// startPhase makes the clients credit the flips of pos, then reads where
// everything stands.
func startPhase(f *fleet, srv *server, pos []int32) (*phaseStart, error) {
	st := &phaseStart{f: f, srv: srv, ph: newPhase(pos, f.w, len(f.clients))}
	f.phase.Store(st.ph)
	st.before = f.counters()
	var err error
	if st.metrics, err = srv.metrics(); err != nil {
		return nil, err
	}
	if st.cpu, err = cpuNow(srv); err != nil {
		return nil, err
	}
	return st, nil
}

// end reads the clients' counters since the start and the server's metrics now.
func (st *phaseStart) end() (counters, map[string]float64, error) {
	m, err := st.srv.metrics()
	return st.f.counters().sub(st.before), m, err
}

// since is how much the metric series of name matching want grew from the start to m.
func (st *phaseStart) since(m map[string]float64, name string, want ...string) float64 {
	return loadgen.SumMetric(m, name, want...) - loadgen.SumMetric(st.metrics, name, want...)
}

// singleFlips flips o.singleFlips upstreams one at a time, each awaited at
// every client, then measures the server's idle CPU over an equal quiet
// interval (at most o.idleMax).
func singleFlips(ctx context.Context, o *options, t *loadgen.Tree, f *fleet, srv *server) (*singleResult, error) {
	k := o.singleFlips
	pos := make([]int32, k)
	step := max(1, f.w/k)
	for i := range pos {
		pos[i] = int32(i * step % f.w)
	}
	st, err := startPhase(f, srv, pos)
	if err != nil {
		return nil, err
	}
	ph, c0 := st.ph, st.cpu
	timedOut := 0
	for i := range k {
		ph.t0[i].Store(f.now())
		if err := t.Flip(f.w0 + int(pos[i])); err != nil {
			return nil, err
		}
		fctx, cancel := context.WithTimeout(ctx, o.flipTimeout)
		err := waitFor(fctx, srv, f, func() bool { return ph.got[i].Load() == ph.clients })
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			timedOut++
		case err != nil:
			return nil, err
		}
		time.Sleep(o.singleGap)
	}
	c1, err := cpuNow(srv)
	if err != nil {
		return nil, err
	}
	counts, m1, err := st.end()
	if err != nil {
		return nil, err
	}
	wall := c1.at.Sub(c0.at)

	// Idle: the same length of quiet, at most idleMax.
	idle := min(wall, o.idleMax)
	i0, err := cpuNow(srv)
	if err != nil {
		return nil, err
	}
	time.Sleep(idle)
	i1, err := cpuNow(srv)
	if err != nil {
		return nil, err
	}
	idleCores := (i1.server - i0.server) / i1.at.Sub(i0.at).Seconds()

	lat, partial, none := ph.latencies(k)
	cpu := c1.server - c0.server
	res := &singleResult{
		Flips: k, Delivered: len(lat), Partial: partial, Undelivered: none, TimedOut: timedOut,
		LastClient: msOf(distOf(lat)), WallSeconds: wall.Seconds(),
		ServerCPUSeconds: cpu, IdleCores: idleCores, IdleSeconds: i1.at.Sub(i0.at).Seconds(),
		ServerCPUPerFlipMs: (cpu - idleCores*wall.Seconds()) / float64(k) * 1000,
		CDSResponses:       counts.cdsResponses, EDSResponses: counts.edsResponses, CLAUpdates: counts.claUpdates,
		CLAResent: counts.claResent, MultiCredits: ph.multiCredits.Load(), Unattributed: ph.unattributed.Load(),
		SourceBatches: st.since(m1, "poise_source_batches_total", `result="applied"`),
	}
	return res, nil
}

// sustained writes o.rate flips a second for o.duration, round-robin over
// the subscribed upstreams, then waits up to o.drain for them to arrive.
func sustained(ctx context.Context, o *options, t *loadgen.Tree, f *fleet, srv *server) (*sustainedResult, error) {
	total := int(o.rate * o.duration.Seconds())
	pos := make([]int32, total)
	for i := range pos {
		pos[i] = int32(i % f.w)
	}
	st, err := startPhase(f, srv, pos)
	if err != nil {
		return nil, err
	}
	ph, c0 := st.ph, st.cpu
	period := time.Duration(float64(time.Second) / o.rate)
	deadline := c0.at.Add(o.duration)
	issued := 0
	for ; issued < total; issued++ {
		next := c0.at.Add(time.Duration(issued) * period)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		if time.Now().After(deadline) {
			break // the writer fell behind: stop on time, with fewer flips
		}
		if issued%256 == 0 {
			if err := errors.Join(f.Err(), srv.alive()); err != nil {
				return nil, err
			}
		}
		ph.t0[issued].Store(f.now())
		if err := t.Flip(f.w0 + int(pos[issued])); err != nil {
			return nil, err
		}
	}
	c1, err := cpuNow(srv)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, o.drain)
	err = waitFor(dctx, srv, f, func() bool { return ph.done.Load() == int64(issued) })
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	c2, err := cpuNow(srv)
	if err != nil {
		return nil, err
	}
	counts, m1, err := st.end()
	if err != nil {
		return nil, err
	}
	issueWall := c1.at.Sub(c0.at).Seconds()
	wall := c2.at.Sub(c0.at).Seconds()
	lat, partial, none := ph.latencies(issued)
	clusters := min(issued, f.w)
	perClient := float64(len(f.clients))
	res := &sustainedResult{
		TargetRate: o.rate, Issued: issued, IssueSeconds: issueWall, IssuedRate: float64(issued) / issueWall,
		DrainSeconds: c2.at.Sub(c1.at).Seconds(), DrainLimitSeconds: o.drain.Seconds(),
		Delivered: len(lat), Partial: partial, Undelivered: none, LastClient: msOf(distOf(lat)),
		ServerCores: (c1.server - c0.server) / issueWall, ServerCPUSeconds: c2.server - c0.server,
		BenchCores:                (c1.bench - c0.bench) / issueWall,
		EDSResponsesPerClientPerS: float64(counts.edsResponses) / perClient / wall,
		CLAUpdatesPerClientPerS:   float64(counts.claUpdates) / perClient / wall,
		CLAsPerResponse:           ratio(float64(counts.claUpdates+counts.claResent), float64(counts.edsResponses)),
		FlipsPerClusterPerS:       float64(issued) / float64(max(clusters, 1)) / wall,
		PushesPerClusterPerS:      float64(counts.claUpdates) / perClient / float64(max(clusters, 1)) / wall,
		FlipsPerCLAUpdate:         ratio(float64(issued)*perClient, float64(counts.claUpdates)),
		CDSResponses:              counts.cdsResponses, CDSLosses: counts.cdsLosses, StrayCLAs: counts.strays, CLAResent: counts.claResent,
		MultiCredits: ph.multiCredits.Load(), Unattributed: ph.unattributed.Load(),
		SourceBatches:   st.since(m1, "poise_source_batches_total", `result="applied"`),
		ServerEDSPushes: st.since(m1, "poise_xds_pushes_total", `type="EDS"`),
	}
	return res, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
