package resilience

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/test/history"
	"poise.dev/poise/test/xdsproxy"
)

// TestNACKFloodDuringACut: while the good clients' link is cut and the
// topology changes, 40 clients (1,000 in make resilience) reject every
// response they are sent. The
// plane sends no rejecting client the same version of a type twice on one
// stream (no re-send loop), and once the link heals the good clients
// converge on the latest revision with a clean history.
func TestNACKFloodDuringACut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fleet(t, dir, 20, 1)
	a := runPlane(t, dir, "127.0.0.1:0").addrs
	rec := xdsproxy.NewRecorder()
	link := startProxy(t, "replica-0", a.XDS, rec)
	bad := startProxy(t, "replica-0-rejecting", a.XDS, rec)
	watch := startProxy(t, "replica-0-observed", a.XDS, rec)

	ctx := t.Context()
	r := &run{t: t, rec: rec, observers: map[string]string{"envoy": "observer-envoy", "grpc": "observer-grpc"}}
	r.observe(watch.Addr(), false)
	for i := range 8 {
		class := []string{"envoy", "grpc"}[i%2]
		id := fmt.Sprintf("%s-%d", class, i)
		startAutoClient(ctx, link.Addr(), node(id, class), i%4 >= 2, false)
		r.clients = append(r.clients, history.Client{ID: id, Class: class})
	}
	var rejecting []string
	n := 40
	if os.Getenv("POISE_RESILIENCE") == "full" {
		n = 1000
	}
	for i := range n {
		class := []string{"envoy", "grpc"}[i%2]
		id := fmt.Sprintf("rejecting-%s-%d", class, i)
		c := &autoClient{node: node(id, class), addrs: []string{bad.Addr()}, delta: i%4 >= 2, nack: true, names: map[string][]string{}}
		go c.run(ctx)
		rejecting = append(rejecting, id)
	}
	has := func(n int) func(history.Publication) bool {
		return func(p history.Publication) bool {
			return len(p.Views["envoy"][clusterType]) == n && len(p.Views["grpc"][clusterType]) == n
		}
	}
	r.waitConverged("before the cut", has(20))
	rec.Settled()

	link.Cut()
	fleet(t, dir, 24, 2)
	r.waitConvergedObservers(has(24))
	// every rejecting client is sent the new revision and rejects it
	wantNACKs := func(events []history.Event) bool {
		nacked := map[string]bool{}
		for _, e := range events {
			if e.Kind == history.NACK && e.Type == clusterType {
				nacked[e.Client] = true
			}
		}
		return len(nacked) == len(rejecting)
	}
	if err := rec.WaitFor(ctx, wantNACKs); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	link.Restore()
	r.waitConverged("after the heal", has(24))
	rec.Settled()

	// no re-send loop: a rejecting client is never sent the same resources
	// of a type at the same version twice (a response for names it asks for
	// anew may share the version)
	type sent struct{ client, typ, version, names string }
	times := map[sent]int{}
	nacks := 0
	for _, e := range rec.Events() {
		switch {
		case e.Kind == history.Response && e.Replica == "replica-0-rejecting":
			times[sent{e.Client, e.Type, e.Version, strings.Join(slices.Sorted(maps.Keys(e.Resources)), ",")}]++
		case e.Kind == history.NACK:
			nacks++
		}
	}
	for k, n := range times {
		if n > 1 {
			t.Errorf("%s was sent %s version %s (%s) %d times after rejecting it", k.client, k.typ, k.version, k.names, n)
		}
	}
	h := r.history()
	for i, id := range rejecting {
		// held to every rule but convergence: what they are sent is checked too
		h.Clients = append(h.Clients, history.Client{ID: id, Class: []string{"envoy", "grpc"}[i%2]})
	}
	res := history.Check(h, history.Options{HealedAt: healed, ConvergeWithin: 10 * time.Second, Left: rejecting})
	for _, v := range res.Violations {
		t.Error(v)
	}
	t.Logf("%d rejecting clients sent %d NACKs, none was sent the same resources at one version twice; %d good clients converged within %v of the heal (bound 10s); %d events",
		len(rejecting), nacks, len(r.clients), res.Slowest, len(h.Events))
}
