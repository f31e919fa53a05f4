package resilience

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/test/history"
)

// TestLeaderCutFromTheAPIServer: the replica that writes status (it holds
// the Lease) loses its link to the apiserver. It stops writing within the
// Lease's renew deadline, before the other replica takes the Lease; the
// other one then writes the status of an Upstream created during the cut.
// When the link heals the old leader stays a follower and writes nothing:
// it has caught up with everything it missed (its clients converge with
// the others) and its count of status writes has not moved since it lost
// the Lease. Both replicas serve xDS throughout; every client's history
// checks clean.
func TestLeaderCutFromTheAPIServer(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	ns := "shop"
	f := newKubeFleet(t, l, ns, 4, 1)
	run := startKubeRun(t, l, ns, 2, "imp0."+ns, ns+"/added-during-the-cut")
	old, next := run.replicas[0], run.replicas[1]
	old.waitAdmin("the first replica leads", "/metrics", 60*time.Second, leading(true))
	next.waitAdmin("the second replica follows", "/metrics", 10*time.Second, leading(false))
	run.waitAll("every client on its replica", f.clients)
	run.rec.Settled()

	cutAt := time.Now()
	old.h.cut(old.h.apiLink)
	f.addSetUpstream(t, l, "added-during-the-cut", 90)
	lost := old.waitAdmin("the cut leader stops leading", "/metrics", 30*time.Second, leading(false))
	writesAtLoss := statusWrites(old.get("/metrics"))
	took := next.waitAdmin("the other replica takes the Lease", "/metrics", 60*time.Second, leading(true))
	lostAt, ok1 := logTime(old.proc.Logs(), "lost the status-writer lease")
	tookAt, ok2 := logTime(next.proc.Logs(), "status writer started: this replica leads")
	switch {
	case !ok1 || !ok2:
		t.Errorf("the logs do not say when the Lease changed hands (lost: %v, taken: %v)", ok1, ok2)
	case !lostAt.Before(tookAt):
		t.Errorf("two writers at once: the old leader stopped at %v, the new one started at %v", lostAt.Format(time.RFC3339Nano), tookAt.Format(time.RFC3339Nano))
	}
	// the new leader writes the status of what was created during the cut
	key := client.ObjectKey{Namespace: ns, Name: "added-during-the-cut"}
	var written time.Duration
	began := time.Now()
	for {
		var u v1alpha1.Upstream
		if err := l.k8s.Get(t.Context(), key, &u); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionAccepted); c != nil && c.ObservedGeneration == u.Generation {
			written = time.Since(cutAt)
			break
		}
		if time.Since(began) > 60*time.Second {
			t.Fatalf("the new leader did not write the status of %s: %+v", key, u.Status)
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(50 * time.Millisecond): // status is seen only on the apiserver
		}
	}
	run.rec.Settled()

	healed := time.Now()
	old.h.restore(old.h.apiLink)
	after := run.waitAll("after the heal", f.clients)
	old.waitAdmin("the healed replica no longer warns", "/readyz", 30*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "ok") && !strings.Contains(s, "warning: kubernetes")
	})
	run.rec.Settled()
	m := old.get("/metrics")
	if w := statusWrites(m); w != writesAtLoss {
		t.Errorf("the deposed leader wrote status after it lost the Lease: %d writes then, %d now", writesAtLoss, w)
	}
	if !leading(false)(m) || !leading(true)(next.get("/metrics")) {
		t.Errorf("after the heal the Lease moved again (old leader: %v, new: %v)", leading(true)(m), leading(true)(next.get("/metrics")))
	}
	h, res := run.check(history.Options{HealedAt: healed, ConvergeWithin: 30 * time.Second})
	t.Logf("leader cut from the apiserver: it stopped leading %v after the cut, the other replica led %v after the cut (%v after the old one stopped) "+
		"and wrote the status of an Upstream created during the cut %v after the cut; after the heal every client converged within %v, "+
		"the old leader wrote nothing (%d writes before the cut and since); %d clients, %d revisions, %d events, %d violations",
		lost.Round(time.Millisecond), (lost + took).Round(time.Millisecond), tookAt.Sub(lostAt).Round(time.Millisecond), written.Round(time.Millisecond),
		after.Round(time.Millisecond), writesAtLoss, len(run.clients), len(h.Publications), len(h.Events), len(res.Violations))
}

// leading accepts a /metrics page whose poise_status_leader is 1 (want)
// or 0.
func leading(want bool) func(string) bool {
	line := "poise_status_leader 0"
	if want {
		line = "poise_status_leader 1"
	}
	return func(m string) bool { return strings.Contains(m, "\n"+line+"\n") }
}

var writesLine = regexp.MustCompile(`(?m)^poise_status_writes_total\{kind="[^"]*"\} (\S+)$`)

// statusWrites sums poise_status_writes_total over its kinds.
func statusWrites(metrics string) int {
	n := 0
	for _, m := range writesLine.FindAllStringSubmatch(metrics, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		n += int(v)
	}
	return n
}

// logTime is the time of the last log line of a replica's whose message
// contains msg.
func logTime(logs, msg string) (time.Time, bool) {
	var at time.Time
	found := false
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, msg) || !strings.HasPrefix(line, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			at, found = t, true
		}
	}
	return at, found
}
