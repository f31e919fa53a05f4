package resilience

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"poise.dev/poise/test/history"
	"poise.dev/poise/test/xdsproxy"
)

// stormClients is how many clients the storm scenario runs: 2,000 with
// POISE_RESILIENCE=full (make resilience), 150 in make test.
func stormClients() int {
	if os.Getenv("POISE_RESILIENCE") == "full" {
		return 2000
	}
	return 150
}

// TestReconnectStormOntoTheSurvivors: three replicas serve the same files,
// each client connected to one and failing over to the next; one replica
// is stopped under every client: its clients reconnect to the other two at
// once, a storm the survivors take without any client going back to older
// content, and an edit after it reaches every client from the survivors.
// Half the clients speak SotW, half Delta.
func TestReconnectStormOntoTheSurvivors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fleet(t, dir, 10, 1)
	rec := xdsproxy.NewRecorder()
	var planes []*plane
	var links []string
	observers := map[string]string{} // the survivors' first: the tracker's reference
	var clients []history.Client
	ctx := t.Context()
	for k := range 3 {
		p := runPlane(t, dir, "127.0.0.1:0")
		planes = append(planes, p)
		link := startProxy(t, fmt.Sprintf("replica-%d", k), p.addrs.XDS, rec)
		links = append(links, link.Addr())
		watch := startProxy(t, fmt.Sprintf("replica-%d-observed", k), p.addrs.XDS, rec)
		for _, class := range []string{"envoy", "grpc"} {
			id := fmt.Sprintf("observer-%s-%d", class, k)
			startAutoClient(ctx, watch.Addr(), node(id, class), false, false)
			clients = append(clients, history.Client{ID: id, Class: class})
			if k == 1 {
				observers[class] = id
			}
		}
	}
	n := stormClients()
	onFirst := map[string]bool{}
	for i := range n {
		class := []string{"envoy", "grpc"}[i%2]
		id := fmt.Sprintf("%s-%d", class, i)
		home := i % 3
		startFailoverClient(ctx, []string{links[home], links[(home+1)%3], links[(home+2)%3]}, node(id, class), i%4 >= 2, false)
		clients = append(clients, history.Client{ID: id, Class: class})
		if home == 0 {
			onFirst[id] = true
		}
	}
	tracker := history.NewTracker(clients, observers)
	seen := 0
	follow := func(events []history.Event) {
		tracker.Add(events[seen:]...)
		seen = len(events)
	}
	// waitFor waits, event by event, until the survivor's observers hold
	// the upstreams' clusters and assignments and want clients hold what
	// they hold
	waitFor := func(what string, upstreams, want int) time.Duration {
		t.Helper()
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		defer cancel()
		if err := rec.WaitFor(wctx, func(events []history.Event) bool {
			follow(events)
			for class := range observers {
				if v := tracker.Observed(class); len(v[clusterType]) != upstreams || len(v[endpointType]) != upstreams {
					return false
				}
			}
			return tracker.Converged() == want
		}); err != nil {
			t.Fatalf("%s: %d of %d clients converged: %v", what, tracker.Converged(), want, err)
		}
		return time.Since(began)
	}
	first := waitFor("every client on its replica", 10, len(clients))
	rec.Settled()

	// the storm: replica 0 stops under its clients
	before := len(rec.Events())
	stopped := time.Now()
	planes[0].stop()
	moved := map[string]bool{}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	err := rec.WaitFor(wctx, func(events []history.Event) bool {
		for _, e := range events[before:] {
			if e.Kind == history.ACK && onFirst[e.Client] && e.Replica != "replica-0" {
				moved[e.Client] = true
			}
		}
		before = len(events)
		return len(moved) == len(onFirst)
	})
	cancel()
	if err != nil {
		t.Fatalf("%d of replica 0's %d clients answered a survivor: %v", len(moved), len(onFirst), err)
	}
	storm := time.Since(stopped)
	follow(rec.Events())
	rec.Settled()

	// an edit after the storm reaches every client from the survivors (the
	// stopped replica's observers stay behind)
	left := []string{"observer-envoy-0", "observer-grpc-0"}
	edited := time.Now()
	fleet(t, dir, 12, 2)
	after := waitFor("the edit after the storm", 12, len(clients)-len(left))
	rec.Settled()

	// the timeline is a survivor's; each replica numbers its revisions its
	// own way (a class's first client is a revision of the replica it
	// joins), so every response is judged by its content
	var lists [][]history.Publication
	for class, id := range observers {
		pubs, err := history.FromObserver(rec.Events(), id, class, revisionOf)
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, pubs)
	}
	h := history.History{Clients: clients, Publications: history.Merge(lists...), Events: rec.Events()}
	res := history.Check(h, history.Options{HealedAt: edited, ConvergeWithin: 30 * time.Second, Left: left, MatchContent: true})
	for i, v := range res.Violations {
		if i == 20 {
			t.Errorf("and %d more violations", len(res.Violations)-i)
			break
		}
		t.Error(v)
	}
	t.Logf("%d clients (%d on the stopped replica) and 6 observers over 3 replicas: first convergence %v; the %d moved to the survivors within %v of the stop; "+
		"the edit after it reached every client within %v (slowest %v after the edit's publication); %d revisions, %d events, %d violations",
		n, len(onFirst), first.Round(time.Millisecond), len(onFirst), storm.Round(time.Millisecond), after.Round(time.Millisecond),
		res.Slowest.Round(time.Millisecond), len(h.Publications), len(h.Events), len(res.Violations))
}
