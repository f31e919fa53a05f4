package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
)

// poll is how often the demo asks the control plane what explain says and
// what its clients ACKed: a change is seen within it.
const poll = 200 * time.Millisecond

// demo is one run: the plane, the backends and the flows of calls.
type demo struct {
	cfg    config
	screen *screen
	errOut io.Writer
	plane  *plane
	// backends are the backends by address (host:port); unbound are the
	// addresses an edit added that could not be bound, said once.
	backends map[string]*grpctraffic.Backend
	unbound  map[string]bool
	flows    []*flow
	conns    []*grpc.ClientConn
	wg       sync.WaitGroup
	// planeLog is where the plane's output goes on a terminal, which the
	// page is redrawn over; elsewhere it goes to errOut.
	planeLog string
}

func (d *demo) run(ctx context.Context) error {
	log := d.errOut
	if d.screen.tty {
		f, err := os.CreateTemp("", "poise-demo-controlplane-*.log")
		if err != nil {
			return fmt.Errorf("the control plane's log: %w", err)
		}
		defer f.Close()
		log, d.planeLog = f, f.Name()
	}
	p, err := startPlane(d.cfg, log)
	if err != nil {
		return err
	}
	d.plane = p
	defer p.stop()
	d.backends, d.unbound = map[string]*grpctraffic.Backend{}, map[string]bool{}
	defer func() {
		for _, b := range d.backends {
			b.Stop()
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.waitReady(startCtx); err != nil {
		return fmt.Errorf("control plane on %s: %w", d.cfg.adminAddr, err)
	}
	rep, err := p.explain(startCtx, "", nil)
	if err != nil {
		return err
	}
	ups := loopbackUpstreams(rep)
	if len(ups) == 0 {
		return fmt.Errorf("no upstream of %s has all its endpoints on loopback: nothing to start backends for (docs/demo.md)", strings.Join(d.cfg.files, ", "))
	}
	for _, u := range ups {
		if err := d.ensureBackends(grpctraffic.SplitOf(u.Split)); err != nil {
			return err
		}
	}

	clientsCtx, stopClients := context.WithCancel(ctx)
	defer func() {
		stopClients()
		d.wg.Wait()
		for _, c := range d.conns {
			c.Close()
		}
	}()
	for _, u := range ups {
		key := topology.Key{Namespace: u.Namespace, Name: u.Name}
		for _, z := range d.cfg.zones {
			f := newFlow(key, z.from, d.cfg.window)
			for i := range z.count {
				node := fmt.Sprintf("demo-%s-%d", z.from.Zone, i+1)
				if len(ups) > 1 {
					node = fmt.Sprintf("demo-%s-%d-%s-%s", z.from.Zone, i+1, u.Namespace, u.Name)
				}
				if err := d.startClient(clientsCtx, f, node); err != nil {
					return err
				}
			}
			d.flows = append(d.flows, f)
		}
	}
	d.printIntro(ups)
	return d.watch(ctx)
}

// loopbackUpstreams are the upstreams of the report whose endpoints are
// all loopback addresses: the ones whose backends the demo can be.
func loopbackUpstreams(rep explain.Report) []explain.Upstream {
	var out []explain.Upstream
	for _, u := range rep.Upstreams {
		split := grpctraffic.SplitOf(u.Split)
		if len(split.Share) == 0 {
			continue
		}
		all := true
		for addr := range split.Share {
			host, _, _ := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				all = false
			}
		}
		if all {
			out = append(out, u)
		}
	}
	return out
}

// ensureBackends starts a backend on every loopback endpoint of split that
// has none yet: an edit may add endpoints.
func (d *demo) ensureBackends(split grpctraffic.Split) error {
	for _, addr := range slices.Sorted(maps.Keys(split.Share)) {
		host, _, _ := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || d.backends[addr] != nil || d.unbound[addr] {
			continue
		}
		b, err := grpctraffic.Listen(addr)
		if err != nil {
			d.unbound[addr] = true
			return fmt.Errorf("%w (another demo, or another program, listens there)", err)
		}
		d.backends[addr] = b
	}
	return nil
}

// startClient dials the flow's upstream through grpc-go's xDS resolver as
// node, placed in the flow's zone, and sends it calls at the configured
// rate until ctx is done.
func (d *demo) startClient(ctx context.Context, f *flow, node string) error {
	conn, err := grpctraffic.Dial(grpctraffic.Bootstrap(d.cfg.xdsAddr, grpctraffic.Node{ID: node, Cluster: "poise-demo",
		Region: f.from.Region, Zone: f.from.Zone}), translate.ListenerName(f.upstream))
	if err != nil {
		return err
	}
	d.conns = append(d.conns, conn)
	f.nodes = append(f.nodes, node)
	hc := healthpb.NewHealthClient(conn)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(d.cfg.rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			backend, err := grpctraffic.Call(cctx, hc)
			cancel()
			if ctx.Err() != nil {
				return
			}
			f.add(backend, err)
		}
	}()
	return nil
}

func (d *demo) printIntro(ups []explain.Upstream) {
	var b strings.Builder
	cp := d.cfg.controlplane
	admin := ""
	if d.cfg.adminAddr != "127.0.0.1:19000" {
		admin = " --admin-address " + d.cfg.adminAddr
	}
	fmt.Fprintf(&b, "poise demo: %s serve -f %s\n", cp, strings.Join(d.cfg.files, " -f "))
	fmt.Fprintf(&b, "  xDS %s, admin %s\n", d.cfg.xdsAddr, d.plane.adminURL)
	if d.planeLog != "" {
		fmt.Fprintf(&b, "  its log: %s\n", d.planeLog)
	}
	for _, u := range ups {
		addrs := slices.Sorted(maps.Keys(grpctraffic.SplitOf(u.Split).Share))
		fmt.Fprintf(&b, "  %s/%s: a gRPC backend on each of %s\n", u.Namespace, u.Name, strings.Join(addrs, " "))
	}
	for _, f := range d.flows {
		who := fmt.Sprintf("%d grpc-go xDS clients", len(f.nodes))
		if len(f.nodes) == 1 {
			who = "1 grpc-go xDS client"
		}
		fmt.Fprintf(&b, "  %s in %s calling %s, %d calls a second each: %s\n", who, f.from, f.upstream, d.cfg.rate, strings.Join(f.nodes, " "))
	}
	first := d.flows[0]
	files := strings.Join(d.cfg.files, " -f ")
	fmt.Fprintf(&b, "Look:\n")
	fmt.Fprintf(&b, "  the clients, each SYNCED with what it was sent:  %s status%s\n", cp, admin)
	fmt.Fprintf(&b, "  what one client was sent:  %s proxy-config %s --type endpoints%s\n", cp, first.nodes[0], admin)
	fmt.Fprintf(&b, "  the traffic map, observed beside computed:  %s/map?from=%s\n", d.plane.adminURL, first.from)
	fmt.Fprintf(&b, "  the derivation, offline:  %s explain -f %s --upstream %s --from %s%s\n", cp, files, first.upstream, first.from, d.demandFlag())
	fmt.Fprintf(&b, "Edit the manifests in %s (a weight, a locality, an endpoint's status.health probe: Unhealthy): explain's shares and the observed ones below follow.\n", strings.Join(d.cfg.files, ", "))
	if d.cfg.check {
		fmt.Fprintf(&b, "Checking: every endpoint within %.1fσ of explain's share over %d calls per client zone (at most %v).\n", grpctraffic.Limit, d.cfg.window, d.cfg.timeout)
	} else {
		fmt.Fprintf(&b, "Ctrl-C stops the clients, the backends and the control plane.\n")
	}
	d.screen.setIntro(b.String())
}

// demandFlag is the --demand that gives explain, offline, the client
// counts of the demo's zones (what a Balanced upstream is divided by
// until the clients' load reports take over, in the same proportions).
func (d *demo) demandFlag() string {
	var parts []string
	for _, z := range d.cfg.zones {
		parts = append(parts, fmt.Sprintf("%s=%d", z.from, z.count))
	}
	return " --demand " + strings.Join(parts, ",")
}

// watch follows explain and the clients until ctx is done, the plane
// ends, or, with --check, the check is decided.
func (d *demo) watch(ctx context.Context) error {
	pollTick := time.NewTicker(poll)
	defer pollTick.Stop()
	tableTick := time.NewTicker(d.cfg.every)
	defer tableTick.Stop()
	var deadline <-chan time.Time
	if d.cfg.check {
		t := time.NewTimer(d.cfg.timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		if err := d.follow(ctx); err != nil {
			return err
		}
		if d.cfg.check {
			if done, err := d.decided(); done {
				d.printTables()
				if err != nil {
					d.screen.line("check: FAIL: %v", err)
					return errors.New("the check failed")
				}
				d.screen.line("check: OK: every endpoint of every client zone within %.1fσ of explain's share over %d calls", grpctraffic.Limit, d.cfg.window)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.plane.done:
			if ctx.Err() != nil {
				return nil // Ctrl-C on a terminal interrupts the plane too
			}
			if d.planeLog != "" {
				return fmt.Errorf("the control plane exited: see %s", d.planeLog)
			}
			return errPlaneExited
		case <-deadline:
			d.printTables()
			return fmt.Errorf("check: not decided within %v: %s", d.cfg.timeout, d.pending())
		case <-tableTick.C:
			d.printTables()
		case <-pollTick.C:
		}
	}
}

// follow reads what explain computes for each flow's clients and what
// they ACKed: a split that moved restarts the flow's window once its
// clients hold it.
func (d *demo) follow(ctx context.Context) error {
	settling := false
	for _, f := range d.flows {
		rep, err := d.plane.explain(ctx, f.upstream.String(), &f.from)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.noteError(d, err)
			continue
		}
		split, err := grpctraffic.ClientSplit(rep.Upstreams[0])
		if err != nil {
			f.noteError(d, err)
			continue
		}
		f.noteError(d, nil)
		if err := d.ensureBackends(split); err != nil {
			d.screen.event("%v", err)
		}
		if line := f.follow(split, rep.Revision); line != "" {
			d.screen.event("%s", line)
		}
		settling = settling || f.isSettling()
	}
	if !settling {
		return nil
	}
	acked, err := d.plane.acked(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.screen.event("%v", err)
		}
		return nil
	}
	for _, f := range d.flows {
		if line := f.ackedBy(acked, d.cfg.warmup); line != "" {
			d.screen.event("%s", line)
		}
	}
	return nil
}

// decided says whether every flow's first full window since its split
// last moved has been judged, and the first that was off.
func (d *demo) decided() (bool, error) {
	for _, f := range d.flows {
		v := f.judged()
		if v == nil {
			return false, nil
		}
		if !v.ok {
			return true, fmt.Errorf("%s from %s: %s is %s from explain's share", f.upstream, f.from, v.worstAt, sigma(v.worst))
		}
	}
	return true, nil
}

// pending says what each undecided flow waits for.
func (d *demo) pending() string {
	var parts []string
	for _, f := range d.flows {
		if f.judged() == nil {
			parts = append(parts, fmt.Sprintf("%s from %s: %s", f.upstream, f.from, f.state()))
		}
	}
	return strings.Join(parts, "; ")
}

func (d *demo) printTables() {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", time.Now().Format("15:04:05.000"))
	for _, f := range d.flows {
		f.table(&b)
	}
	d.screen.page(b.String())
}
