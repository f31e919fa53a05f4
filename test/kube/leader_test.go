package kube_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// pinger sends RPCs one after another, a millisecond apart at least, until
// halted, and counts every success and failure.
type pinger struct {
	stop, done chan struct{}
	mu         sync.Mutex
	ok         int
	failures   []error
	by         map[string]int
}

func startPinger(conn *grpc.ClientConn) *pinger {
	p := &pinger{stop: make(chan struct{}), done: make(chan struct{}), by: map[string]int{}}
	client := healthpb.NewHealthClient(conn)
	go func() {
		defer close(p.done)
		pace := time.NewTicker(time.Millisecond)
		defer pace.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-pace.C:
			}
			var md metadata.MD
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			cancel()
			p.mu.Lock()
			if err == nil && len(md.Get("x-backend")) == 1 {
				p.ok++
				p.by[md.Get("x-backend")[0]]++
			} else {
				p.failures = append(p.failures, fmt.Errorf("at %s: %v", time.Now().Format("15:04:05.000"), err))
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// succeeded is how many RPCs went through so far.
func (p *pinger) succeeded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok
}

func (p *pinger) halt() (ok int, failures []error) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.failures
}

// haltAndCheck halts the pinger and logs what it saw since started; any
// failed RPC fails the test, and so do fewer than 100 RPCs. across says
// what the RPCs went through ("across the handover").
func (p *pinger) haltAndCheck(t *testing.T, phase, across string, started time.Time) {
	t.Helper()
	ok, failures := p.halt()
	t.Logf("%s: %d RPCs over %v, %d failed", phase, ok, time.Since(started).Round(time.Millisecond), len(failures))
	if len(failures) > 0 {
		t.Errorf("%d RPCs failed %s; first: %v", len(failures), across, failures[0])
	}
	if ok < 100 {
		t.Errorf("only %d RPCs went through %s", ok, across)
	}
}

func leaseHolder(t *testing.T, ns string) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "poise-status-writer"}, &l); err != nil {
		return "(" + err.Error() + ")"
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestLeaderHandover runs two control planes on the same namespace and
// Lease. Both serve xDS; only the leader writes status. A client of the
// follower sees every change; when the leader goes away the follower takes
// over the status writing within a few seconds, and its client never sees
// a failed RPC.
func TestLeaderHandover(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	b := splitcheck.StartBackends(t, "127.0.0.1", 3)
	objs := []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC, AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "echo", Weight: new(int64(3)), LocalityID: v1alpha1.LocalityID{Zone: "a"}}},
		&v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "echo", Weight: new(int64(1)), LocalityID: v1alpha1.LocalityID{Zone: "b"}}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "echo", Locality: v1alpha1.LocalityID{Zone: "a"},
			Endpoints: []v1alpha1.Endpoint{{Address: b[0].Host, Port: b[0].Port}, {Address: b[1].Host, Port: b[1].Port}}}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: "echo", Locality: v1alpha1.LocalityID{Zone: "b"},
			Endpoints: []v1alpha1.Endpoint{{Address: b[2].Host, Port: b[2].Port}}}},
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}

	one := startPlane(t, ns, "one")
	testkit.Eventually(t, 10*time.Second, "plane one leads", func() (bool, string) { return one.leads(), one.logs.tail(5) })
	two := startPlane(t, ns, "two")
	leader, follower := one, two
	// two is well inside its retry loop, and never leads meanwhile
	holds(t, time.Second, 50*time.Millisecond, "plane two follows while plane one leads", func() string {
		if two.leads() {
			return "both planes started their status writer"
		}
		return ""
	})
	holder := leaseHolder(t, ns)
	t.Logf("6 leader: plane %s leads (Lease holder %s), plane %s follows", leader.name, holder, follower.name)

	const node = "follower-client"
	conn := splitcheck.NewXDSClient(t, follower.addrs.XDS, node, "echo."+ns)
	rep, err := follower.explainOf(ns, "echo")
	if err != nil {
		t.Fatal(err)
	}
	follower.waitAcked(t, node, rep.Revision)
	measure(t, "6a follower serves", conn, splitcheck.ExpectationOf(t, rep))
	ping := startPinger(conn)
	pingStart := time.Now()

	// a change while plane one leads: the follower's client gets it, the leader writes status
	patched := time.Now()
	setHealth(t, ns, "a", unhealthy(b[1]))
	rep, _ = follower.waitExplain(t, ns, "echo", "the follower sees the probe", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[1])
		return ep.Probe == "Unhealthy", fmt.Sprintf("%+v", ep)
	})
	follower.waitAcked(t, node, rep.Revision)
	t.Logf("6b change under the old leader: the follower's client ACKed revision %d %v after the status patch", rep.Revision, time.Since(patched).Round(time.Millisecond))
	u, _ := waitStatus(t, leader, ns, "echo")
	oldRevision := u.Status.Revision
	t.Logf("6b change under the old leader: plane %s wrote status revision %d %v after the patch", leader.name, u.Status.Revision, time.Since(patched).Round(time.Millisecond))
	splitcheck.Warm(t, conn, splitcheck.ExpectationOf(t, rep))

	// the leader goes away
	cancelled := time.Now()
	leader.stop(t)
	stopped := time.Since(cancelled)
	handover := testkit.Eventually(t, 10*time.Second, "plane "+follower.name+" takes over", func() (bool, string) {
		return follower.leads(), follower.logs.tail(5)
	})
	newHolder := leaseHolder(t, ns)
	t.Logf("6c handover: plane %s stopped in %v; plane %s leads %v after the cancel (Lease holder %s → %s)",
		leader.name, stopped.Round(time.Millisecond), follower.name, (stopped + handover).Round(time.Millisecond), holder, newHolder)
	if newHolder == holder {
		t.Errorf("the Lease holder did not change")
	}

	// a change after the handover: the new leader writes status for it
	var loc v1alpha1.Locality
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "b"}, &loc); err != nil {
		t.Fatal(err)
	}
	loc.Spec.Weight = new(int64(2))
	changed := time.Now()
	if err := k8s.Update(t.Context(), &loc); err != nil {
		t.Fatal(err)
	}
	rep, _ = follower.waitExplain(t, ns, "echo", "locality b weighs 2", func(u explain.Upstream) (bool, string) {
		l := u.Priorities[0].Localities
		return len(l) == 2 && l[1].LocalityWeight == 2, fmt.Sprintf("%+v", l)
	})
	follower.waitAcked(t, node, rep.Revision)
	t.Logf("6d change under the new leader: client ACKed revision %d %v after the Locality update", rep.Revision, time.Since(changed).Round(time.Millisecond))
	took := testkit.Eventually(t, 10*time.Second, "the new leader writes status for the change", func() (bool, string) {
		var u v1alpha1.Upstream
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "echo"}, &u); err != nil {
			return false, err.Error()
		}
		cur, err := follower.explainOf(ns, "echo")
		if err != nil {
			return false, err.Error()
		}
		// the revision only goes up across the handover, whatever the new leader's own count
		if ok, why := figuresMatch(&u, cur); !ok || u.Status.Revision <= oldRevision {
			return false, fmt.Sprintf("revision %d (the old leader wrote %d): %s", u.Status.Revision, oldRevision, why)
		}
		var l v1alpha1.Locality
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "b"}, &l); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionAccepted)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == l.Generation && l.Status.ObservedGeneration == l.Generation,
			fmt.Sprintf("Locality b generation %d status %+v", l.Generation, l.Status)
	})
	t.Logf("6d change under the new leader: plane %s wrote Upstream and Locality status %v after the update (waited %v for it)",
		follower.name, time.Since(changed).Round(time.Millisecond), took.Round(time.Millisecond))
	splitcheck.Warm(t, conn, splitcheck.ExpectationOf(t, rep))
	// keep the RPCs going a while past the handover: 100 more go through
	past := ping.succeeded()
	testkit.Eventually(t, 10*time.Second, "100 RPCs through the follower past the handover", func() (bool, string) {
		n := ping.succeeded() - past
		return n >= 100, fmt.Sprintf("%d", n)
	})

	ping.haltAndCheck(t, "6 leader, through the follower", "through the follower across the handover", pingStart)
	measure(t, "6e after the handover", conn, splitcheck.ExpectationOf(t, rep))
}
