package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

var t0 = time.Unix(1_800_000_000, 0)

func h(s string) Hash { return HashOf([]byte(s)) }

// fixture is three revisions for class "a" (tenant-a/pay) and class "b"
// (tenant-b/ledger): r2 moves pay's endpoints, r3 adds tenant-a/cart.
func fixture() []Publication {
	view := func(rev int, extra bool) View {
		v := View{
			cds: {"tenant-a/pay": h("pay-cluster")},
			eds: {"tenant-a/pay": h(fmt.Sprintf("pay-endpoints-%d", min(rev, 2)))},
		}
		if extra {
			v[cds]["tenant-a/cart"] = h("cart-cluster")
			v[eds]["tenant-a/cart"] = h("cart-endpoints")
		}
		return v
	}
	b := View{cds: {"tenant-b/ledger": h("ledger-cluster")}, eds: {"tenant-b/ledger": h("ledger-endpoints")}}
	var pubs []Publication
	for rev := 1; rev <= 3; rev++ {
		pubs = append(pubs, Publication{Revision: uint64(rev), Versions: []string{fmt.Sprintf("x-%d", rev), fmt.Sprintf("y-%d", rev)},
			Views: map[string]View{"a": view(rev, rev == 3), "b": b}, At: t0.Add(time.Duration(rev) * time.Second)})
	}
	return pubs
}

// script builds one client's events: "resp TYPE VERSION name=content,..."
// is a SotW response, answered by the "ack"/"nack" that follows it.
type script struct {
	events []Event
	nonce  int
	at     time.Duration
}

func (s *script) resp(client, replica, typ, version string, wildcard bool, res map[string]string) *script {
	s.nonce++
	c := Contents{}
	for n, v := range res {
		c[n] = h(v)
	}
	s.at += 10 * time.Millisecond
	s.events = append(s.events, Event{Client: client, Replica: replica, Kind: Response, Type: typ, Version: version,
		Nonce: fmt.Sprint(s.nonce), Resources: c, Wildcard: wildcard, At: t0.Add(time.Second + s.at)})
	return s
}

func (s *script) delta(client, replica, typ, version string, res map[string]string, removed ...string) *script {
	s.resp(client, replica, typ, version, true, res)
	e := &s.events[len(s.events)-1]
	e.Delta, e.Removed = true, removed
	return s
}

// answer answers the last response; a response by name is answered asking
// for the names it had, as a client that wants no other.
func (s *script) answer(kind Kind) *script {
	last := s.events[len(s.events)-1]
	s.at += 10 * time.Millisecond
	var names []string
	if !last.Wildcard && !last.Delta {
		names = slices.Sorted(maps.Keys(last.Resources))
	}
	s.events = append(s.events, Event{Client: last.Client, Replica: last.Replica, Kind: kind, Type: last.Type, Nonce: last.Nonce,
		Names: names, At: t0.Add(time.Second + s.at)})
	return s
}

// subscribe asks for names of typ without answering a response.
func (s *script) subscribe(client, typ string, names ...string) *script {
	s.at += 10 * time.Millisecond
	s.events = append(s.events, Event{Client: client, Kind: Subscribe, Type: typ, Names: names, At: t0.Add(time.Second + s.at)})
	return s
}

func (s *script) ack() *script { return s.answer(ACK) }

// answer2 answers the last response asking for names.
func (s *script) answer2(kind Kind, names ...string) *script {
	s.answer(kind)
	s.events[len(s.events)-1].Names = names
	return s
}
func (s *script) nack() *script { return s.answer(NACK) }
func (s *script) settle() *script {
	s.events = append(s.events, Event{Kind: Settled})
	return s
}

// latest has the client hold revision 3 whole.
func (s *script) latest(client, replica string) *script {
	return s.resp(client, replica, cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
		resp(client, replica, eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2", "tenant-a/cart": "cart-endpoints"}).ack()
}

// round1 has the client hold revision 1 whole.
func (s *script) round1(client, replica string) *script {
	return s.resp(client, replica, cds, "x-1", true, map[string]string{"tenant-a/pay": "pay-cluster"}).ack().
		resp(client, replica, eds, "x-1", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).ack()
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events func(s *script) *script
		opts   Options
		want   []string // one substring per violation, in order; none: clean
	}{
		{name: "clean: rounds in order, settled between them",
			events: func(s *script) *script { return s.round1("c1", "x").settle().latest("c1", "x").settle() }},
		{name: "clean: make-before-break between rounds is no mix at rest",
			events: func(s *script) *script {
				return s.round1("c1", "x").
					resp("c1", "x", cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
					resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2", "tenant-a/cart": "cart-endpoints"}).ack().settle()
			}},
		{name: "clean: a SotW response by name updates the resources it names, the others stay",
			events: func(s *script) *script {
				return s.resp("c1", "x", cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
					subscribe("c1", eds, "tenant-a/cart", "tenant-a/pay").
					resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/cart": "cart-endpoints"}).answer2(ACK, "tenant-a/cart", "tenant-a/pay").
					resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).answer2(ACK, "tenant-a/cart", "tenant-a/pay").settle()
			}},
		{name: "clean: a resource no longer asked for is dropped",
			events: func(s *script) *script {
				return s.latest("c1", "x").subscribe("c1", eds, "tenant-a/pay").settle()
			}},
		{name: "a resource asked for by name and never received",
			events: func(s *script) *script {
				return s.resp("c1", "x", cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
					subscribe("c1", eds, "tenant-a/cart", "tenant-a/pay").
					resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).answer2(ACK, "tenant-a/cart", "tenant-a/pay").settle()
			},
			want: []string{"coherent: client c1: settled on a mix", "coherent: client c1: at the end", "converges: client c1"}},
		{name: "clean: a NACKed response changes nothing held",
			events: func(s *script) *script {
				return s.round1("c1", "x").resp("c1", "x", eds, "x-2", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).nack().settle().latest("c1", "x")
			}},
		{name: "delta: updates and removals apply; a resource no revision has is named",
			events: func(s *script) *script {
				return s.delta("c1", "x", cds, "x-3", map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster", "tenant-a/old": "old"}).ack().
					delta("c1", "x", cds, "x-3", nil, "tenant-a/old").ack().
					delta("c1", "x", eds, "x-3", map[string]string{"tenant-a/pay": "pay-endpoints-2", "tenant-a/cart": "cart-endpoints"}).ack().settle()
			},
			want: []string{`coherent: client c1 (replica x), Cluster tenant-a/old: sent a resource that revision 3 does not have`}},
		{name: "a mix at rest: CDS of revision 3, EDS of revision 1",
			events: func(s *script) *script {
				return s.round1("c1", "x").
					resp("c1", "x", cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().settle()
			},
			want: []string{
				"coherent: client c1: settled on a mix that no revision published: Cluster {tenant-a/cart@r3..r3, tenant-a/pay@r1..r3}; ClusterLoadAssignment {tenant-a/pay@r1..r1}",
				"coherent: client c1: at the end it holds a mix",
				"converges: client c1, revisions 0 and 3: it never held the latest revision's view"}},
		{name: "a response under a revision's version with another revision's content",
			events: func(s *script) *script {
				return s.resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).ack()
			},
			want: []string{
				"coherent: client c1 (replica x), ClusterLoadAssignment tenant-a/pay: sent under revision 3's version content that revision does not have",
				"converges"}},
		{name: "backwards: a lagging replica sends revision 1's endpoints after revision 2's",
			events: func(s *script) *script {
				return s.resp("c1", "x", eds, "x-2", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack().
					resp("c1", "y", eds, "y-1", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).ack().
					latest("c1", "x")
			},
			want: []string{"monotonic: client c1 (replica y), ClusterLoadAssignment tenant-a/pay, revisions 2 and 1: ACKed content that only revisions older"}},
		{name: "a replica serves an older revision than it served",
			events: func(s *script) *script {
				// another client's older response is no step back (streams are sent concurrently); this client's is
				return s.latest("c1", "x").resp("c2", "x", cds, "x-1", true, map[string]string{"tenant-a/pay": "pay-cluster"}).ack().latest("c2", "x").
					resp("c2", "x", cds, "x-1", true, map[string]string{"tenant-a/pay": "pay-cluster"}).nack()
			},
			want: []string{"last-good-kept: client c2 (replica x), Cluster, revisions 3 and 1: the replica served an older revision"}},
		{name: "missed convergence: the client stays on revision 1",
			events: func(s *script) *script { return s.round1("c1", "x").latest("c2", "x") },
			want:   []string{"converges: client c1, revisions 0 and 3: it never held the latest revision's view"}},
		{name: "convergence past its bound",
			events: func(s *script) *script {
				s.at = 10 * time.Second
				return s.latest("c1", "x").latest("c2", "x")
			},
			opts: Options{ConvergeWithin: time.Second},
			want: []string{"converges: client c1, revisions 0 and 3: it held the latest revision's view 8.04s after the heal, past the bound of 1s",
				"converges: client c2, revisions 0 and 3: it held the latest revision's view 8.08s after the heal"}},
		{name: "clean: a type's older revision after another type's newer one is no step back",
			events: func(s *script) *script {
				// a replica's per-type versions name the revision that last changed the type
				return s.resp("c1", "x", cds, "x-3", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
					resp("c2", "x", eds, "x-2", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack().
					resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2", "tenant-a/cart": "cart-endpoints"}).ack().
					latest("c2", "x")
			}},
		{name: "a client that received nothing has not converged",
			events: func(s *script) *script { return s.latest("c1", "x").subscribe("c2", eds, "tenant-a/pay") },
			want:   []string{"converges: client c2, revisions 0 and 3: it never received anything"}},
		{name: "a client that left is not held to convergence",
			events: func(s *script) *script { return s.round1("c1", "x").latest("c2", "x") },
			opts:   Options{Left: []string{"c1"}}},
		{name: "cross-tenant: tenant-b's ledger sent to a client of class a",
			events: func(s *script) *script {
				return s.resp("c1", "x", eds, "x-3", false, map[string]string{"tenant-b/ledger": "ledger-endpoints"}).ack().latest("c1", "x")
			},
			want: []string{"tenancy: client c1 (replica x), ClusterLoadAssignment tenant-b/ledger, revisions 3 and 3: sent a resource that revision 3 publishes to other classes only, not to class \"a\""}},
		{name: "a version no publication has",
			events: func(s *script) *script { return s.resp("c1", "z", cds, "z-9", true, nil).ack().latest("c1", "x") },
			want:   []string{`coherent: client c1 (replica z), Cluster: a response of version "z-9", which no publication has`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.events(&script{})
			hist := History{Publications: fixture(), Events: s.events}
			for _, id := range []string{"c1", "c2", "c3"} {
				if slices.ContainsFunc(s.events, func(e Event) bool { return e.Client == id }) {
					hist.Clients = append(hist.Clients, Client{ID: id, Class: "a"})
				}
			}
			wantViolations(t, Check(hist, tc.opts).Violations, tc.want)
		})
	}
}

// TestConvergenceIsMeasured: the time from the latest publication (or the
// heal, when later) to the ACK after which the client held its view.
func TestConvergenceIsMeasured(t *testing.T) {
	t.Parallel()
	s := (&script{}).round1("c1", "x").latest("c1", "x")
	res := Check(History{Clients: []Client{{ID: "c1", Class: "a"}}, Publications: fixture(), Events: s.events}, Options{})
	if len(res.Violations) != 0 {
		t.Fatalf("violations: %v", res.Violations)
	}
	// revision 3 was published at t0+3s; the client's last ACK is at t0+1s+80ms: it held it before
	if d := res.Converged["c1"]; d != 0 {
		t.Errorf("converged after %v, want 0 (it held the view when the measure began)", d)
	}
	healed := t0.Add(500 * time.Millisecond)
	pubs := fixture()
	for i := range pubs {
		pubs[i].At = t0
	}
	res = Check(History{Clients: []Client{{ID: "c1", Class: "a"}}, Publications: pubs, Events: s.events}, Options{HealedAt: healed})
	if d, want := res.Converged["c1"], 580*time.Millisecond; d != want || res.Slowest != want {
		t.Errorf("converged after %v (slowest %v), want %v: the last ACK at t0+1.08s, the heal at t0+0.5s", d, res.Slowest, want)
	}
}

// wantViolations holds vs to want: as many, each containing its text.
func wantViolations(t *testing.T, vs []Violation, want []string) {
	t.Helper()
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	if len(got) != len(want) {
		t.Fatalf("%d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("violation %d:\n%s\nwant it to contain:\n%s", i, got[i], w)
		}
	}
}

// xRevision reads the scripts' versions, x-N.
func xRevision(v string) (uint64, bool) {
	var n uint64
	_, err := fmt.Sscanf(v, "x-%d", &n)
	return n, err == nil
}

// TestFromObserver: the observer's accepted responses become one
// publication per revision, each type as last accepted at or before it; a
// NACK by the observer is refused; Merge fills a class's view for a
// revision only another class saw.
func TestFromObserver(t *testing.T) {
	t.Parallel()
	s := (&script{}).
		resp("obs", "x", cds, "x-1", true, map[string]string{"tenant-a/pay": "pay-cluster"}).ack().
		resp("obs", "x", eds, "x-1", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).ack().
		resp("obs", "x", eds, "x-2", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack().
		resp("c1", "x", eds, "x-9", false, nil).ack() // another client's: not the observer's
	pubs, err := FromObserver(s.events, "obs", "a", xRevision)
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 2 || pubs[0].Revision != 1 || pubs[1].Revision != 2 {
		t.Fatalf("publications %+v, want revisions 1 and 2", pubs)
	}
	if got := pubs[1].Views["a"]; got[cds]["tenant-a/pay"] != h("pay-cluster") || got[eds]["tenant-a/pay"] != h("pay-endpoints-2") {
		t.Errorf("revision 2's view %v: want revision 1's cluster and revision 2's endpoints", got)
	}
	if pubs[0].Views["a"][eds]["tenant-a/pay"] != h("pay-endpoints-1") {
		t.Errorf("revision 1's view changed with revision 2's")
	}
	b := []Publication{{Revision: 2, Versions: []string{"x-2"}, Views: map[string]View{"b": {cds: {"tenant-b/ledger": h("l")}}}}}
	merged := Merge(pubs, b)
	if len(merged) != 2 || merged[1].Views["b"] == nil || merged[0].Views["b"] != nil || merged[1].Views["a"] == nil {
		t.Errorf("merged %+v", merged)
	}

	nacked := (&script{}).resp("obs", "x", cds, "x-1", true, nil).nack()
	if _, err := FromObserver(nacked.events, "obs", "a", xRevision); err == nil || !strings.Contains(err.Error(), "must accept everything") {
		t.Errorf("an observer's NACK: %v", err)
	}
}

// TestTracker: clients count as converged while they hold what their
// class's observer holds, and stop counting when the observer moves on.
func TestTracker(t *testing.T) {
	t.Parallel()
	tr := NewTracker([]Client{{ID: "obs", Class: "a"}, {ID: "c1", Class: "a"}, {ID: "c2", Class: "a"}}, map[string]string{"a": "obs"})
	tr.Add((&script{}).round1("obs", "x").round1("c1", "x").events...)
	if n := tr.Converged(); n != 2 {
		t.Errorf("after round 1: %d converged, want the observer and c1", n)
	}
	tr.Add((&script{}).latest("obs", "x").events...)
	if n := tr.Converged(); n != 1 {
		t.Errorf("the observer moved on: %d converged, want the observer alone", n)
	}
	tr.Add((&script{}).latest("c1", "x").latest("c2", "x").events...)
	if n := tr.Converged(); n != 3 {
		t.Errorf("all at the latest: %d converged, want 3", n)
	}
}

// TestMatchContent: judged by content, a response of a replica that numbers
// its revisions its own way is coherent when one revision had all it
// carries; a response mixing two revisions, content that was never
// published, and a replica going back to older content are named.
func TestMatchContent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events func(s *script) *script
		want   []string
	}{
		{name: "clean: another replica's versions",
			events: func(s *script) *script {
				return s.resp("c1", "y", cds, "other-7", true, map[string]string{"tenant-a/pay": "pay-cluster", "tenant-a/cart": "cart-cluster"}).ack().
					resp("c1", "y", eds, "other-7", false, map[string]string{"tenant-a/pay": "pay-endpoints-2", "tenant-a/cart": "cart-endpoints"}).ack().settle()
			}},
		{name: "one response mixing two revisions",
			events: func(s *script) *script {
				return s.resp("c1", "y", eds, "other-7", false, map[string]string{"tenant-a/pay": "pay-endpoints-1", "tenant-a/cart": "cart-endpoints"}).ack().latest("c1", "x")
			},
			want: []string{"coherent: client c1 (replica y), ClusterLoadAssignment: a response whose resources no one revision published together"}},
		{name: "content never published",
			events: func(s *script) *script {
				return s.resp("c1", "y", eds, "other-7", false, map[string]string{"tenant-a/pay": "pay-endpoints-9"}).ack().latest("c1", "x")
			},
			want: []string{"coherent: client c1 (replica y), ClusterLoadAssignment tenant-a/pay: sent content that no revision published to its class"}},
		{name: "a replica goes back to older content",
			events: func(s *script) *script {
				return s.resp("c1", "y", eds, "other-8", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack().
					resp("c1", "y", eds, "other-9", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).nack().
					latest("c1", "x")
			},
			want: []string{"last-good-kept: client c1 (replica y), ClusterLoadAssignment, revisions 2 and 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.events(&script{})
			hist := History{Publications: fixture(), Events: s.events}
			for _, id := range []string{"c1", "c2"} {
				if slices.ContainsFunc(s.events, func(e Event) bool { return e.Client == id }) {
					hist.Clients = append(hist.Clients, Client{ID: id, Class: "a"})
				}
			}
			wantViolations(t, Check(hist, Options{MatchContent: true}).Violations, tc.want)
		})
	}
}

// TestObserverGap: a revision whose assignments the observer never saw
// (it was still answering the one before, and was sent the next one's)
// leaves that revision's assignment content unknown: a client sent it is
// not judged by the view carried over from before, only at rest; content
// the observer did see at a revision is judged as ever, and a resource
// the class never has is still another tenant's.
func TestObserverGap(t *testing.T) {
	t.Parallel()
	obs := (&script{}).
		resp("obs", "x", cds, "x-1", true, map[string]string{"tenant-a/pay": "pay-cluster"}).ack().
		resp("obs", "x", eds, "x-1", false, map[string]string{"tenant-a/pay": "pay-endpoints-1"}).ack().
		resp("obs", "x", cds, "x-2", true, map[string]string{"tenant-a/pay": "pay-cluster-2"}).ack().
		resp("obs", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-3"}).ack()
	pubs, err := FromObserver(obs.events, "obs", "a", xRevision)
	if err != nil {
		t.Fatal(err)
	}
	other := []Publication{{Revision: 1, Versions: []string{"x-1"}, Views: map[string]View{"b": {eds: {"tenant-b/ledger": h("l")}}}}}
	pubs = Merge(pubs, other)
	for _, tc := range []struct {
		name   string
		events func(s *script) *script
		want   []string
	}{
		{name: "content of a revision the observer skipped",
			events: func(s *script) *script {
				return s.resp("c", "x", eds, "x-2", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack().
					resp("c", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-3"}).ack().settle()
			}},
		{name: "content a seen revision does not have",
			events: func(s *script) *script {
				return s.resp("c", "x", eds, "x-3", false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack()
			},
			want: []string{"sent under revision 3's version content that revision does not have", "at the end it holds a mix"}},
		{name: "another tenant's resource in a skipped revision",
			events: func(s *script) *script {
				return s.resp("c", "x", eds, "x-2", false, map[string]string{"tenant-b/ledger": "l"}).ack()
			},
			want: []string{"publishes to other classes only", "at the end it holds a mix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.events(&script{events: slices.Clone(obs.events), nonce: 100, at: obs.at})
			hist := History{Clients: []Client{{ID: "obs", Class: "a"}, {ID: "c", Class: "a"}}, Publications: pubs, Events: s.events}
			wantViolations(t, Check(hist, Options{Left: []string{"c"}}).Violations, tc.want)
		})
	}
}

// TestUnseenRevision: with RevisionOf, a response of a revision between
// two the observers saw is not judged by its version (no observer saw
// it); one past every publication still is.
func TestUnseenRevision(t *testing.T) {
	t.Parallel()
	pubs := fixture() // revisions 1 to 3, versions x-N and y-N
	pubs = []Publication{pubs[0], pubs[2]}
	for _, tc := range []struct {
		version string
		want    int
	}{{"x-2", 0}, {"x-4", 1}} {
		s := (&script{}).resp("c1", "x", eds, tc.version, false, map[string]string{"tenant-a/pay": "pay-endpoints-2"}).ack()
		hist := History{Clients: []Client{{ID: "c1", Class: "a"}}, Publications: pubs, Events: s.events}
		res := Check(hist, Options{Left: []string{"c1"}, RevisionOf: xRevision})
		n := 0
		for _, v := range res.Violations {
			if strings.Contains(v.String(), "which no publication has") {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("version %s: %d unpublished-version violations, want %d: %v", tc.version, n, tc.want, res.Violations)
		}
	}
}
