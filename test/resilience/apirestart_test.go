package resilience

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"poise.dev/poise/test/history"
)

// apiserverOutage is how long the apiserver stays down: 10 s, 60 s with
// POISE_RESILIENCE=full.
func apiserverOutage() time.Duration {
	if os.Getenv("POISE_RESILIENCE") == "full" {
		return 60 * time.Second
	}
	return 10 * time.Second
}

// TestAPIServerRestartUnderClients: the apiserver goes away (killed, as a
// crashed one) under two replicas and their clients. Both keep serving the
// topology last seen and say they are stale; when it returns, the edits
// made then (EndpointSlice and EndpointSet churn, an Upstream added) reach
// every client of both replicas, the warnings clear, and every client's
// history checks clean.
func TestAPIServerRestartUnderClients(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	ns := "shop"
	f := newKubeFleet(t, l, ns, 6, 2)
	run := startKubeRun(t, l, ns, 2, "imp0."+ns, ns+"/added-after-the-restart")
	first := run.waitAll("every client on its replica", f.clients)
	run.rec.Settled()

	outage := apiserverOutage()
	l.stopAPIServer()
	down := time.Now()
	for _, r := range run.replicas {
		r.waitAdmin("a replica says it is stale", "/readyz", 30*time.Second, func(s string) bool {
			return strings.HasPrefix(s, "ok") && strings.Contains(s, "warning: kubernetes")
		})
	}
	select {
	case <-t.Context().Done():
		return
	case <-time.After(time.Until(down.Add(outage))): // the outage is time that must pass
	}
	for _, r := range run.replicas {
		if s := staleSeconds(r.get("/metrics")); s < (outage - 8*time.Second).Seconds() {
			t.Errorf("poise_kube_source_stale_seconds{kind=\"apiserver\"} is %v after %v down", s, outage)
		}
	}
	run.rec.Settled()

	l.startAPIServer()
	back := time.Now()
	churnCtx, stop := context.WithCancel(t.Context())
	defer stop()
	time.AfterFunc(3*time.Second, stop)
	var changes int
	var wg sync.WaitGroup
	wg.Go(func() { changes = f.churn(churnCtx, t, l, 100*time.Millisecond) })
	f.addSetUpstream(t, l, "added-after-the-restart", 91)
	wg.Wait()
	edited := time.Now()
	after := run.waitAll("after the restart", f.clients)
	run.rec.Settled()
	for _, r := range run.replicas {
		r.waitAdmin("the warnings clear", "/readyz", 30*time.Second, func(s string) bool {
			return strings.HasPrefix(s, "ok") && !strings.Contains(s, "warning: kubernetes")
		})
	}
	h, res := run.check(history.Options{HealedAt: edited, ConvergeWithin: 30 * time.Second})
	t.Logf("apiserver down %v under 2 replicas; after its return %d changes and one Upstream added in %v reached every client %v after the last one (slowest %v; %v after the return); "+
		"first convergence %v; %d clients, %d revisions, %d events, %d violations",
		back.Sub(down).Round(time.Millisecond), changes, edited.Sub(back).Round(time.Millisecond), after.Round(time.Millisecond), res.Slowest.Round(time.Millisecond), edited.Add(after).Sub(back).Round(time.Millisecond),
		first.Round(time.Millisecond), len(run.clients), len(h.Publications), len(h.Events), len(res.Violations))
}
