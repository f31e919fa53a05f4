package resilience

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/history"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
	"poise.dev/poise/test/xdsproxy"
)

// outage is how long every replica stays gone: the contract's 60 s with
// POISE_RESILIENCE=full (make resilience), 3 s in make test.
func outage() time.Duration {
	if os.Getenv("POISE_RESILIENCE") == "full" {
		return 60 * time.Second
	}
	return 3 * time.Second
}

// apiManifest is Upstream shop/api over the backends, weighted 1, 2, 3, ...
// times scale.
func apiManifest(t *testing.T, dir string, backends []*splitcheck.Backend, scale int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: api, namespace: shop}\nspec: {protocol: GRPC, addressPolicy: {allowLoopback: true}}\n---\n")
	b.WriteString("apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: api-a, namespace: shop}\nspec:\n  upstream: api\n  locality: {region: eu, zone: a}\n  endpoints:\n")
	for i, be := range backends {
		fmt.Fprintf(&b, "  - {address: %s, port: %d, weight: %d}\n", be.Host, be.Port, (i+1)*scale+(i%2)*(scale-1))
	}
	tmp := filepath.Join(dir, ".api.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
}

// plane is one control plane run that can be stopped, as a replica dies.
type plane struct {
	addrs  controlplane.Addrs
	cancel context.CancelFunc
	done   chan error
}

// runPlane serves dir on xds (a fixed address, so a plane started later is
// where the clients reconnect to).
func runPlane(t *testing.T, dir, xds string) *plane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &plane{cancel: cancel, done: make(chan error, 1)}
	started := make(chan controlplane.Addrs, 1)
	cfg := controlplane.Config{Paths: []string{dir}, XDSAddress: xds, AdminAddress: "127.0.0.1:0",
		Started: func(a controlplane.Addrs) { started <- a }}
	go func() { p.done <- controlplane.Run(ctx, cfg) }()
	t.Cleanup(p.stop)
	select {
	case p.addrs = <-started:
	case err := <-p.done:
		t.Fatalf("control plane: %v", err)
	}
	return p
}

// stop ends the plane and waits until it has stopped.
func (p *plane) stop() {
	p.cancel()
	if p.done != nil {
		<-p.done
		p.done = nil
	}
}

// instanceOrder reads versions of several plane instances in the order
// their instances first appear: revision r of the n-th instance seen is
// n·10⁹ + r, so a plane started later publishes later revisions.
func instanceOrder() func(string) (uint64, bool) {
	seen := map[string]uint64{}
	return func(v string) (uint64, bool) {
		rev, ok := revisionOf(v)
		if !ok {
			return 0, false
		}
		instance := v[:strings.LastIndexByte(v, '-')]
		n, ok := seen[instance]
		if !ok {
			n = uint64(len(seen) + 1)
			seen[instance] = n
		}
		return n*1_000_000_000 + rev, true
	}
}

// TestClientsOutliveThePlane: with every replica gone, real grpc-go
// clients keep routing with the last split they were sent (every RPC
// served, the split within 4.5σ of explain's) for the whole outage; a
// replica that returns, with the topology edited meanwhile, brings every
// client to its revision as soon as the client's own reconnect back-off
// lets it, and every client's history checks clean.
func TestClientsOutliveThePlane(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 4)
	apiManifest(t, dir, backends, 1)
	xds := cpbinary.FreeAddr(t)
	first := runPlane(t, dir, xds)

	rec := xdsproxy.NewRecorder()
	link := startProxy(t, "replica-0", xds, rec)
	watch := startProxy(t, "replica-0-observed", xds, rec)
	r := &run{t: t, rec: rec, observers: map[string]string{"grpc": "observer-grpc"}, revisionOf: instanceOrder()}
	r.observe(watch.Addr(), true)
	conns := make([]*grpc.ClientConn, 3)
	for i := range conns {
		id := fmt.Sprintf("grpc-go-%d", i)
		conns[i] = splitcheck.NewXDSClient(t, link.Addr(), id, "api.shop")
		r.clients = append(r.clients, history.Client{ID: id, Class: "grpc"})
	}

	explained := func(admin string) splitcheck.Expectation {
		var rep explain.Report
		testkit.MustGetJSON(t, "http://"+admin+"/debug/explain?upstream=shop/api", &rep)
		return splitcheck.ExpectationOf(t, rep)
	}
	want := explained(first.addrs.Admin)
	for _, c := range conns {
		splitcheck.Warm(t, c, want)
	}
	r.waitConverged("before the outage", func(history.Publication) bool { return true })
	rec.Settled()

	first.stop()
	began := time.Now()
	apiManifest(t, dir, backends, 3) // edited while no replica runs
	// every RPC of the outage served, and each client's RPCs over all of it
	// split as before it (one check a client: the split does not move)
	rounds, rpcs := 0, 0
	during := make([]splitcheck.Tally, len(conns))
	for time.Since(began) < outage() {
		for i, c := range conns {
			got := splitcheck.Send(c, 2000)
			if got.Total != 2000 || len(got.Other) > 0 || got.Dropped > 0 {
				t.Fatalf("%v into the outage: %d of 2000 RPCs served, %d failed (first: %v)", time.Since(began).Round(time.Millisecond),
					got.Total-len(got.Other)-got.Dropped, len(got.Other), got.Other)
			}
			during[i].Total += got.Total
			if during[i].By == nil {
				during[i].By = map[string]int{}
			}
			for addr, n := range got.By {
				during[i].By[addr] += n
			}
			rpcs += got.Total
		}
		rounds++
	}
	lasted := time.Since(began)
	worst := 0.0
	for i := range conns {
		worst = max(worst, splitcheck.CheckSplit(t, fmt.Sprintf("grpc-go-%d during the outage", i), during[i], want))
	}

	second := runPlane(t, dir, xds)
	healed := time.Now()
	after := explained(second.addrs.Admin)
	if after.Share == nil || fmt.Sprint(after.Share) == fmt.Sprint(want.Share) {
		t.Fatalf("the edit made while no replica ran does not show: %v", after.Share)
	}
	r.waitConverged("after a replica returned", func(p history.Publication) bool { return p.Revision > 1_000_000_000*2 })
	rec.Settled()
	for _, c := range conns {
		// a client ACKs the update before its picker has it
		splitcheck.WarmFrom(t, c, after, want)
		splitcheck.CheckSplit(t, "after the return", splitcheck.Send(c, 4000), after)
	}

	// a client reconnects when its own back-off lets it: grpc-go waits 1 s,
	// then 1.6 times longer at each failed attempt (±20 %, at most 120 s),
	// so after an outage of d its next attempt is at most about 1.6·d + 1 s
	// away; the plane cannot shorten that
	bound := outage()*8/5 + 10*time.Second
	h := r.history()
	res := history.Check(h, history.Options{HealedAt: healed, ConvergeWithin: bound})
	for _, v := range res.Violations {
		t.Error(v)
	}
	t.Logf("no replica for %v: %d RPCs over %d rounds of 3 clients, all served, largest |z| %.2f against the last split; "+
		"%d clients converged within %v of a replica's return (bound %v, the clients' reconnect back-off); %d revisions, %d events",
		lasted.Round(time.Millisecond), rpcs, rounds, worst, len(r.clients), res.Slowest, bound, len(h.Publications), len(h.Events))
}
