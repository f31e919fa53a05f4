package resilience

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/test/history"
	"poise.dev/poise/test/xdsproxy"
)

// fleet writes n upstreams of 3 zones × 8 endpoints, weight w, into dir.
func fleet(t *testing.T, dir string, n, w int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: svc-%d, namespace: shop}\nspec: {protocol: GRPC}\n---\n", i)
		for z := range 3 {
			fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: svc-%d-z%d, namespace: shop}\nspec:\n  upstream: svc-%d\n  locality: {region: eu, zone: z%d}\n  endpoints:\n", i, z, i, z)
			for e := range 8 {
				fmt.Fprintf(&b, "  - {address: 10.%d.%d.%d, port: 8080, weight: %d}\n", i/250, i%250, z*10+e, w+z)
			}
			b.WriteString("---\n")
		}
	}
	tmp := filepath.Join(dir, ".fleet.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "fleet.yaml")); err != nil { // one change, never half a file
		t.Fatal(err)
	}
}

// startProxy puts a recording proxy named name in front of the replica
// at addr, for the test's life.
func startProxy(t *testing.T, name, addr string, rec *xdsproxy.Recorder) *xdsproxy.Proxy {
	t.Helper()
	p, err := xdsproxy.Start(name, addr, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// revisionOf reads the revision out of a version the plane publishes
// (INSTANCE-REVISION).
var revisionOf = grpctraffic.ParseVersion

// run is one scenario's record: the clients, their classes and the
// observers that say what was published to each class.
type run struct {
	t         *testing.T
	rec       *xdsproxy.Recorder
	clients   []history.Client
	observers map[string]string // class → observer node id
	// revisionOf reads a version's revision; nil: one plane's, revisionOf
	revisionOf func(string) (uint64, bool)
}

// observe starts r's observers on addr (asking for listeners and routes
// too with listeners) and records them as clients.
func (r *run) observe(addr string, listeners bool) {
	for class, id := range r.observers {
		startAutoClient(r.t.Context(), addr, node(id, class), false, listeners)
		r.clients = append(r.clients, history.Client{ID: id, Class: class})
	}
}

func (r *run) history() history.History {
	var lists [][]history.Publication
	for class, obs := range r.observers {
		read := r.revisionOf
		if read == nil {
			read = revisionOf
		}
		pubs, err := history.FromObserver(r.rec.Events(), obs, class, read)
		if err != nil {
			r.t.Fatal(err)
		}
		lists = append(lists, pubs)
	}
	return history.History{Clients: r.clients, Publications: history.Merge(lists...), Events: r.rec.Events()}
}

// waitConverged waits, event by event, until every client holds the latest
// revision's view of its class and that revision's view has the upstreams
// want says; the check runs on each new event, the deadline only bounds a
// failure.
func (r *run) waitConverged(what string, want func(history.Publication) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 60*time.Second)
	defer cancel()
	err := r.rec.WaitFor(ctx, func([]history.Event) bool {
		h := r.history()
		if len(h.Publications) == 0 || !want(h.Publications[len(h.Publications)-1]) {
			return false
		}
		return len(history.Check(h, history.Options{}).Converged) == len(r.clients)
	})
	if err != nil {
		res := history.Check(r.history(), history.Options{})
		r.t.Fatalf("%s: not every client converged (%v): %v", what, err, res.Violations)
	}
}

func node(id, class string) *core.Node {
	n := &core.Node{Id: id, Cluster: "resilience"}
	if class == "grpc" {
		n.ClientFeatures = []string{translate.FeatureNoOverprovisioning}
	}
	return n
}

// TestCutInTheMiddleOfAPush: a client↔replica link cut after three
// responses of a large push (40 upstreams' clusters and assignments moved
// at once, and 10 upstreams added): the clients that got part of it hold a
// mix only until they reconnect; once the link heals every client holds
// the latest revision's bytes, no client ever ACKed an older revision's
// content after a newer one's, and none settled on a mix. Envoy-like
// clients over SotW and over Delta, and real grpc-go xDS clients.
func TestCutInTheMiddleOfAPush(t *testing.T) {
	t.Parallel()
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			t.Parallel()
			cutInTheMiddleOfAPush(t, delta)
		})
	}
}

func cutInTheMiddleOfAPush(t *testing.T, delta bool) {
	dir := t.TempDir()
	fleet(t, dir, 40, 1)
	a := runPlane(t, dir, "127.0.0.1:0").addrs
	rec := xdsproxy.NewRecorder()
	link := startProxy(t, "replica-0", a.XDS, rec)
	watch := startProxy(t, "replica-0-observed", a.XDS, rec)

	ctx := t.Context()
	r := &run{t: t, rec: rec, observers: map[string]string{"envoy": "observer-envoy", "grpc": "observer-grpc"}}
	r.observe(watch.Addr(), true)
	var clients []*autoClient
	for i := range 6 {
		class := []string{"envoy", "grpc"}[i%2]
		id := fmt.Sprintf("%s-%d", class, i)
		clients = append(clients, startAutoClient(ctx, link.Addr(), node(id, class), delta, i < 2))
		r.clients = append(r.clients, history.Client{ID: id, Class: class})
	}
	for i := range 2 {
		// real grpc-go clients of two upstreams, one changed by the push
		id := fmt.Sprintf("grpc-go-%d", i)
		conn, err := grpctraffic.Dial(grpctraffic.Bootstrap(link.Addr(), grpctraffic.Node{ID: id, Cluster: "resilience"}),
			fmt.Sprintf("svc-%d.shop", i*45))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.clients = append(r.clients, history.Client{ID: id, Class: "grpc"})
	}
	has := func(n int) func(history.Publication) bool {
		return func(p history.Publication) bool {
			return len(p.Views["envoy"][clusterType]) == n && len(p.Views["grpc"][clusterType]) == n
		}
	}
	// grpc-go-1 asks for svc-45, which the push adds: it holds nothing
	// until then, and its first answer is the added upstream
	r.waitConverged("the first revision", has(40))
	rec.Settled()

	tripped := link.CutAfter(3)
	fleet(t, dir, 50, 2)
	select {
	case <-tripped:
	case <-time.After(60 * time.Second):
		t.Fatal("the link was not cut: fewer than 4 responses after the edit")
	}
	r.waitConvergedObservers(has(50))
	healed := time.Now()
	link.Restore()
	r.waitConverged("after the heal", has(50))
	rec.Settled()

	h := r.history()
	res := history.Check(h, history.Options{HealedAt: healed, ConvergeWithin: 10 * time.Second})
	for _, v := range res.Violations {
		t.Error(v)
	}
	reconnects := 0
	for _, c := range clients {
		reconnects += c.Reconnects()
	}
	if reconnects < len(clients) {
		t.Errorf("%d reconnects over %d clients: the cut did not reach every client", reconnects, len(clients))
	}
	t.Logf("%d clients, %d revisions, %d events, %d reconnects of the Envoy-like clients; every client converged within %v of the heal (bound 10s)",
		len(r.clients), len(h.Publications), len(h.Events), reconnects, res.Slowest)
}

const (
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// waitConvergedObservers waits until the observers hold a revision want
// accepts: the plane has published it.
func (r *run) waitConvergedObservers(want func(history.Publication) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 60*time.Second)
	defer cancel()
	if err := r.rec.WaitFor(ctx, func([]history.Event) bool {
		h := r.history()
		return len(h.Publications) > 0 && want(h.Publications[len(h.Publications)-1])
	}); err != nil {
		r.t.Fatalf("the plane's new revision did not reach the observers: %v", err)
	}
}
