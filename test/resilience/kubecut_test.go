package resilience

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/history"
	"poise.dev/poise/test/xdsproxy"
)

// kubeFleet is a topology in the lab's apiserver: sets Upstreams of
// EndpointSets (3 zones × 4 endpoints) and services Upstreams importing a
// Service's EndpointSlices (3 slices × 4 endpoints, one per zone's Node).
type kubeFleet struct {
	mu      sync.Mutex // sets grows while churn reads it
	ns      string
	sets    []client.ObjectKey // EndpointSets
	slices  []client.ObjectKey // EndpointSlices
	clients int                // the Upstreams: the clusters every client sees
}

func newKubeFleet(t *testing.T, l *lab, ns string, sets, services int) *kubeFleet {
	t.Helper()
	ctx := t.Context()
	f := &kubeFleet{ns: ns}
	create := func(o client.Object) {
		t.Helper()
		if err := l.k8s.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for z := range 3 {
		create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-z%d", z), Labels: map[string]string{
			source.LabelRegion: "eu", source.LabelZone: fmt.Sprintf("z%d", z)}}})
	}
	for i := range sets {
		f.addSetUpstream(t, l, fmt.Sprintf("u%d", i), i)
	}
	for i := range services {
		svc, up := fmt.Sprintf("s%d", i), fmt.Sprintf("imp%d", i)
		create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}}}})
		create(&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: up, Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC,
			EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: svc, Port: intstr.FromString("grpc")}}}})
		f.clients++
		for z := range 3 {
			es := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-z%d", svc, z), Namespace: ns, Labels: map[string]string{
					discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "poise-resilience-test"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(int32(9090)), Protocol: new(corev1.ProtocolTCP)}},
			}
			for e := range 4 {
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.200.%d.%d", i, z*10+e+1)},
					NodeName: new(fmt.Sprintf("node-z%d", z)), Conditions: readyCond(true)})
			}
			create(es)
			f.slices = append(f.slices, client.ObjectKeyFromObject(es))
		}
	}
	return f
}

// addSetUpstream creates Upstream name of three EndpointSets: the sets
// first, so that the Upstream appears whole in one revision (the checker
// knows a revision's content of a name an observer subscribes to only
// when the observer's request for it comes before the next revision).
func (f *kubeFleet) addSetUpstream(t *testing.T, l *lab, name string, i int) {
	t.Helper()
	for z := range 3 {
		set := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-z%d", name, z), Namespace: f.ns},
			Spec: v1alpha1.EndpointSetSpec{Upstream: name, Locality: v1alpha1.LocalityID{Region: "eu", Zone: fmt.Sprintf("z%d", z)}}}
		for e := range 4 {
			set.Spec.Endpoints = append(set.Spec.Endpoints, v1alpha1.Endpoint{Address: fmt.Sprintf("10.100.%d.%d", i, z*10+e+1), Port: 8080, Weight: new(int64(1))})
		}
		if err := l.k8s.Create(t.Context(), set); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.sets = append(f.sets, client.ObjectKeyFromObject(set))
		f.mu.Unlock()
	}
	if err := l.k8s.Create(t.Context(), &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolGRPC}}); err != nil {
		t.Fatal(err)
	}
	f.clients++
}

func readyCond(ready bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: new(ready), Serving: new(ready), Terminating: new(false)}
}

// churn changes the fleet every period until ctx ends, by turns an
// EndpointSlice endpoint's readiness and an EndpointSet endpoint's weight,
// and returns how many changes it made.
func (f *kubeFleet) churn(ctx context.Context, t *testing.T, l *lab, period time.Duration) int {
	tick := time.NewTicker(period)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if n%2 == 0 && len(f.slices) > 0 {
				var es discoveryv1.EndpointSlice
				if err := l.k8s.Get(ctx, f.slices[(n/2)%len(f.slices)], &es); err != nil {
					return err
				}
				e := &es.Endpoints[(n/2/len(f.slices))%len(es.Endpoints)]
				e.Conditions = readyCond(!*e.Conditions.Ready)
				return l.k8s.Update(ctx, &es)
			}
			f.mu.Lock()
			key := f.sets[(n/2)%len(f.sets)]
			f.mu.Unlock()
			var set v1alpha1.EndpointSet
			if err := l.k8s.Get(ctx, key, &set); err != nil {
				return err
			}
			w := set.Spec.Endpoints[0].Weight
			set.Spec.Endpoints[0].Weight = new(*w%7 + 1)
			return l.k8s.Update(ctx, &set)
		})
		if err != nil {
			if ctx.Err() != nil {
				return n
			}
			t.Errorf("churn: %v", err)
			return n
		}
		n++
	}
}

// kubeCuts are the cut lengths: 10 s, and with POISE_RESILIENCE=full also
// 2 min.
func kubeCuts() []time.Duration {
	if os.Getenv("POISE_RESILIENCE") == "full" {
		return []time.Duration{10 * time.Second, 2 * time.Minute}
	}
	return []time.Duration{10 * time.Second}
}

// TestReplicaCutFromTheAPIServer: of two replicas, one loses its link to
// the apiserver (packets dropped, nothing refused: a partition) while
// EndpointSlices and EndpointSets keep changing and an Upstream is added.
// The cut replica keeps serving what it had (never older), says within a
// few seconds that it is stale (/readyz, poise_kube_source_stale_seconds
// {kind="apiserver"}), and once the link heals catches up on everything it
// missed: its clients converge to the same bytes the other replica's
// clients hold. The other replica's clients follow every change
// throughout. Envoy-like clients (SotW and Delta, both renderings) and a
// real grpc-go client on each replica; every history checked.
func TestReplicaCutFromTheAPIServer(t *testing.T) {
	t.Parallel()
	for _, cut := range kubeCuts() {
		t.Run(cut.String(), func(t *testing.T) { replicaCutFromTheAPIServer(t, cut) })
	}
}

// kubeRun is a scenario's replicas of one lab, their recorded clients and
// observers.
type kubeRun struct {
	t         *testing.T
	rec       *xdsproxy.Recorder
	replicas  []*replica
	clients   []history.Client
	observers [][2]string // class, observer id
	order     func(string) (uint64, bool)
}

// startKubeRun serves namespace ns from n replicas, each on a host of its
// own, started one after the other (the first one leads), and connects
// through a recording proxy to each: 2 observers (one per rendering,
// listeners and routes too, and the assignments of the Upstreams named
// added from the start), 4 Envoy-like clients (SotW and Delta, both
// renderings) and a real grpc-go client of target.
func startKubeRun(t *testing.T, l *lab, ns string, n int, target string, added ...string) *kubeRun {
	t.Helper()
	r := &kubeRun{t: t, rec: xdsproxy.NewRecorder(), order: instanceOrder()} // each replica's revisions in a timeline of their own
	ctx := t.Context()
	for k := range n {
		rp := l.host(k).serve(ns)
		r.replicas = append(r.replicas, rp)
		name := fmt.Sprintf("replica-%d", k)
		link := startProxy(t, name, rp.xds, r.rec)
		watch := startProxy(t, name+"-observed", rp.xds, r.rec)
		for _, class := range []string{"envoy", "grpc"} {
			id := fmt.Sprintf("observer-%s-%d", class, k)
			// listeners and routes too: grpc-go asks for them; and the
			// assignments of the Upstreams the scenario adds
			obs := &autoClient{node: node(id, class), addrs: []string{watch.Addr()}, listeners: true, names: map[string][]string{},
				also: map[string][]string{endpointType: added}}
			go obs.run(ctx)
			r.clients = append(r.clients, history.Client{ID: id, Class: class})
			r.observers = append(r.observers, [2]string{class, id})
		}
		for i := range 4 {
			class := []string{"envoy", "grpc"}[i%2]
			id := fmt.Sprintf("%s-%d-%d", class, k, i)
			startAutoClient(ctx, link.Addr(), node(id, class), i >= 2, false)
			r.clients = append(r.clients, history.Client{ID: id, Class: class})
		}
		id := fmt.Sprintf("grpc-go-%d", k)
		conn, err := grpctraffic.Dial(grpctraffic.Bootstrap(link.Addr(), grpctraffic.Node{ID: id, Cluster: "resilience"}), target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.clients = append(r.clients, history.Client{ID: id, Class: "grpc"})
	}
	return r
}

func (r *kubeRun) history() history.History {
	var lists [][]history.Publication
	for _, o := range r.observers {
		pubs, err := history.FromObserver(r.rec.Events(), o[1], o[0], r.order)
		if err != nil {
			r.t.Fatal(err)
		}
		lists = append(lists, pubs)
	}
	return history.History{Clients: r.clients, Publications: history.Merge(lists...), Events: r.rec.Events()}
}

// waitAll waits, event by event, until every client holds the latest view
// of its class and that view has upstreams clusters.
func (r *kubeRun) waitAll(what string, upstreams int) time.Duration {
	r.t.Helper()
	began := time.Now()
	wctx, cancel := context.WithTimeout(r.t.Context(), 120*time.Second)
	defer cancel()
	if err := r.rec.WaitFor(wctx, func([]history.Event) bool {
		h := r.history()
		if len(h.Publications) == 0 {
			return false
		}
		last := h.Publications[len(h.Publications)-1]
		if len(last.Views["envoy"][clusterType]) != upstreams || len(last.Views["grpc"][endpointType]) != upstreams {
			return false
		}
		return len(history.Check(h, history.Options{}).Converged) == len(r.clients)
	}); err != nil {
		res := history.Check(r.history(), history.Options{})
		r.t.Fatalf("%s: %d of %d clients converged (%v): %v", what, len(res.Converged), len(r.clients), err, res.Violations)
	}
	return time.Since(began)
}

// check runs the checker on the whole run and reports every violation.
func (r *kubeRun) check(o history.Options) (history.History, history.Result) {
	h := r.history()
	o.RevisionOf = r.order
	res := history.Check(h, o)
	for i, v := range res.Violations {
		if i == 20 {
			r.t.Errorf("and %d more violations", len(res.Violations)-i)
			break
		}
		r.t.Error(v)
	}
	return h, res
}

func replicaCutFromTheAPIServer(t *testing.T, cut time.Duration) {
	l := newLab(t)
	ns := "shop"
	f := newKubeFleet(t, l, ns, 6, 2)
	run := startKubeRun(t, l, ns, 2, "imp0."+ns, ns+"/added-during-the-cut")
	ctx := t.Context()
	rec, replicas, waitAll := run.rec, run.replicas, run.waitAll
	first := waitAll("every client on its replica", f.clients)
	rec.Settled()

	// the cut: replica 0 loses the apiserver; edits go on
	before := f.clients
	cutAt := time.Now()
	replicas[0].h.cut(replicas[0].h.apiLink)
	seen := replicas[0].waitAdmin("the cut replica says it is stale", "/readyz", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "the apiserver has not answered")
	})
	churnCtx, stopChurn := context.WithCancel(ctx)
	var changes int
	var wg sync.WaitGroup
	wg.Go(func() { changes = f.churn(churnCtx, t, l, 100*time.Millisecond) })
	// an Upstream added while cut off: the other replica's clients get it,
	// the cut replica's do not until the link heals
	f.addSetUpstream(t, l, "added-during-the-cut", 90)
	remaining := time.Until(cutAt.Add(cut))
	select {
	case <-ctx.Done():
	case <-time.After(remaining): // the cut's length is time that must pass
	}
	stopChurn()
	wg.Wait()
	if stale := staleSeconds(replicas[0].get("/metrics")); stale <= 0 {
		t.Errorf("poise_kube_source_stale_seconds{kind=\"apiserver\"} is %v at the end of a %v cut", stale, cut)
	}
	if !strings.Contains(replicas[1].readyz(), "ok") || strings.Contains(replicas[1].readyz(), "warning: kubernetes") {
		t.Errorf("the replica that was not cut warns: %s", replicas[1].readyz())
	}
	// the cut replica still serves the topology it had: its observers hold
	// no more upstreams than before the cut
	for _, e := range rec.Events() {
		if e.Replica == "replica-0-observed" && e.Kind == history.Response && e.Type == clusterType && e.At.After(cutAt) && len(e.Resources) > before {
			t.Errorf("the cut replica served %d clusters at %v, during the cut", len(e.Resources), e.At.Format(time.RFC3339Nano))
		}
	}
	rec.Settled()

	healed := time.Now()
	replicas[0].h.restore(replicas[0].h.apiLink)
	after := waitAll("after the heal", f.clients)
	rec.Settled()
	clear := replicas[0].waitAdmin("the healed replica no longer warns", "/readyz", 30*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "ok") && !strings.Contains(s, "warning: kubernetes")
	})

	h, res := run.check(history.Options{HealedAt: healed, ConvergeWithin: 30 * time.Second})
	t.Logf("%v cut of replica 0 from the apiserver, %d changes and one Upstream added meanwhile; %d clients over 2 replicas: first convergence %v; "+
		"stale on /readyz %v after the cut; every client converged %v after the heal (slowest %v); the warning cleared %v after that; %d revisions, %d events, %d violations",
		cut, changes, len(run.clients), first.Round(time.Millisecond), seen.Round(time.Millisecond), after.Round(time.Millisecond), res.Slowest.Round(time.Millisecond),
		clear.Round(time.Millisecond), len(h.Publications), len(h.Events), len(res.Violations))
}

var staleLine = regexp.MustCompile(`(?m)^poise_kube_source_stale_seconds\{kind="apiserver"\} (\S+)$`)

// staleSeconds reads poise_kube_source_stale_seconds{kind="apiserver"}
// from a /metrics page (-1 when absent).
func staleSeconds(metrics string) float64 {
	m := staleLine.FindStringSubmatch(metrics)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}
