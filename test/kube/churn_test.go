package kube_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/testkit"
)

// TestChurn measures how the Kubernetes source keeps up with endpoint churn
// on a real apiserver: writers flip endpoints (an EndpointSet's status
// health, an EndpointSlice endpoint's conditions.ready) at a target rate,
// and raw ADS clients record when each write reaches them. It runs the same
// writes twice: first with no control plane (what the apiserver itself
// sustains), then with one plane and its clients. A watch of the test's own
// records when each write's event leaves the apiserver, which splits a
// write's latency into the apiserver's part and the plane's.
//
// By default it is a short CI check (200 writes/s for 5 s) that every write
// reaches every client, and nothing but a write's endpoints; it prints the
// latencies but holds no bound on them: a timed bound in a suite that runs
// beside thirty other packages under the race detector measures the machine
// (a run there once took 6 s where alone it takes 0.9 s). Setting
// POISE_CHURN_RATE (writes/s) and/or POISE_CHURN_SECONDS makes it the
// benchmark of docs/performance.md, where the figures mean something.
// POISE_CHURN_STATUS_WRITER=0 keeps the plane from writing status;
// POISE_CHURN_APISERVER_PROFILE=FILE saves a CPU profile of the apiserver
// taking the writes alone.
// It runs alone (not in parallel): its figures are the machine's, under its load only.
func TestChurn(t *testing.T) {
	mode := churnModeOf(t)
	t.Logf("mode: %s", mode.why)
	t.Logf("topology: %d Upstreams × %d EndpointSets × %d endpoints, %d Upstreams importing a Service of %d EndpointSlices × %d endpoints; %d SotW ADS clients; %d writers",
		mode.upstreams, mode.sets, mode.eps, mode.services, mode.slices, mode.eps, mode.clients, mode.writers)
	ns := namespace(t)
	fx := newChurnFixture(t, ns, mode)
	fx.watch(t)
	procs := envtestProcs()

	// 1. the apiserver alone: the same writers, no plane, no clients
	base := fx.churn(t, "apiserver only", mode, procs, nil)
	base.report(t)
	if achieved := float64(base.writes) / base.writing.Seconds(); achieved < 0.9*mode.rate {
		t.Logf("the apiserver alone takes %.0f writes/s, short of the %.0f targeted: the rate with the plane is bounded by it, not by the plane", achieved, mode.rate)
	}

	// 2. one plane and its clients, at the debounce of controlplane serve
	if !mode.statusWriter {
		holdLease(t, ns, "poise-status-writer")
	}
	p := startPlaneWith(t, ns, "churn", func(c *controlplane.Config) { c.Debounce = 100 * time.Millisecond })
	clients := fx.connect(t, p.addrs.XDS, mode.clients)
	withPlane := fx.churn(t, "with the plane", mode, procs, &churnPlane{p: p, clients: clients, drain: mode.drain})
	withPlane.report(t)
	withPlane.compare(t, base)

	if withPlane.undelivered > 0 {
		t.Errorf("%d of %d writes did not reach every client within %v of the end of the churn", withPlane.undelivered, withPlane.writes, mode.drain)
	}
	if !mode.statusWriter && p.leads() {
		t.Errorf("the plane led and wrote status although the Lease was held for someone else")
	}
	if withPlane.unexpected > 0 {
		t.Errorf("clients received %d ClusterLoadAssignments whose endpoints match no write: %s", withPlane.unexpected, withPlane.unexpectedSample)
	}
}

// holdLease makes the status-writer Lease of namespace ns someone else's
// for an hour, so a plane started there serves xDS but never writes status.
func holdLease(t *testing.T, ns, name string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: new("someone-else"), LeaseDurationSeconds: new(int32(3600)), AcquireTime: &now, RenewTime: &now,
	}}
	if err := k8s.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
}

// ---- mode ----

type churnMode struct {
	statusWriter                           bool
	why                                    string
	rate                                   float64
	duration                               time.Duration
	upstreams, sets, eps, services, slices int
	clients, writers                       int
	drain                                  time.Duration
}

func churnModeOf(t *testing.T) churnMode {
	t.Helper()
	m := churnMode{statusWriter: true, rate: 200, duration: 5 * time.Second, upstreams: 200, sets: 3, eps: 7, services: 20, slices: 3, clients: 20,
		drain: 20 * time.Second}
	rate, secs := os.Getenv("POISE_CHURN_RATE"), os.Getenv("POISE_CHURN_SECONDS")
	if rate == "" && secs == "" {
		m.why = "CI: 200 writes/s for 5 s, asserting that every write reaches every client within the drain, latencies printed, not bounded (POISE_CHURN_RATE=1000 POISE_CHURN_SECONDS=60 runs the benchmark)"
	} else {
		m.rate, m.duration, m.drain = 1000, 60*time.Second, 60*time.Second
		if rate != "" {
			r, err := strconv.ParseFloat(rate, 64)
			if err != nil || r <= 0 {
				t.Fatalf("POISE_CHURN_RATE=%q: want writes per second, a positive number", rate)
			}
			m.rate = r
		}
		if secs != "" {
			s, err := strconv.ParseFloat(secs, 64)
			if err != nil || s <= 0 {
				t.Fatalf("POISE_CHURN_SECONDS=%q: want a positive number of seconds", secs)
			}
			m.duration = time.Duration(s * float64(time.Second))
		}
		m.why = fmt.Sprintf("benchmark: %.0f writes/s for %v, printing the figures (delivery asserted, latency not)", m.rate, m.duration)
	}
	if raceEnabled {
		m.why += "; under the race detector, which slows the plane several times over"
	}
	if os.Getenv("POISE_CHURN_STATUS_WRITER") == "0" {
		m.statusWriter = false
		m.why += "; POISE_CHURN_STATUS_WRITER=0: the Lease is held for someone else, so the plane writes no status"
	}
	// a writer waits for each answer: one per 5 writes/s keeps a writer's
	// budget (200 ms) above an apiserver write's latency on a busy machine
	m.writers = max(16, int(m.rate/5))
	return m
}

// ---- the fixture: targets, writes and what clients have seen ----

// churnTarget is one object the writers change: an EndpointSet (its status
// health) or an EndpointSlice (its endpoints' conditions). Write m leaves
// exactly endpoint m%eps out of service; before the first write all are in.
// Consecutive writes therefore differ, and a client tells which write a
// ClusterLoadAssignment reflects by which of the target's endpoints it lists.
type churnTarget struct {
	slice   bool
	name    string
	cluster string
	addrs   []string
	obj     *discoveryv1.EndpointSlice // the slice as last written

	mu     sync.Mutex
	n      int // the index of the last write issued; -1 before any
	first  int // the index of writes[0]
	writes []*churnWrite
}

type churnWrite struct {
	t0, t1    time.Time // before the write was sent, after the apiserver answered
	event     time.Time // when its watch event reached this process
	delivered int       // clients whose CLA reflects it (or a later write)
	last      time.Time // when the last of them received it
}

func (t *churnTarget) stateMask(m, eps int) uint32 {
	full := uint32(1)<<eps - 1
	if m < 0 {
		return full
	}
	return full &^ (1 << (m % eps))
}

// advance finds the first write after cur whose state is mask, calls f on
// every write from cur+1 to it (coalescing: one observation may deliver
// several writes) and returns its index; false when no write matches.
func (t *churnTarget) advance(cur int, mask uint32, eps int, f func(*churnWrite)) (int, bool) {
	if mask == t.stateMask(cur, eps) {
		return cur, true // unchanged: another target of the cluster changed
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	found := -1
	for m := cur + 1; m <= t.n; m++ {
		if t.stateMask(m, eps) == mask {
			found = m
			break
		}
	}
	if found < 0 {
		return cur, false
	}
	for m := max(cur+1, t.first); m <= found; m++ {
		f(t.writes[m-t.first])
	}
	return found, true
}

type churnFixture struct {
	ns       string
	eps      int
	targets  []*churnTarget
	clusters map[string][]int // cluster name → targets
	names    []string         // every cluster name, sorted
	byAddr   map[string][2]int
	writer   client.Client

	watchRestarts atomic.Int64
	watchError    atomic.Pointer[string]
}

func newChurnFixture(t *testing.T, ns string, m churnMode) *churnFixture {
	t.Helper()
	fx := &churnFixture{ns: ns, eps: m.eps, clusters: map[string][]int{}, byAddr: map[string][2]int{}}
	// the writers' own client: raised client-side limits, and a transport of
	// its own (a Proxy func makes client-go's transport uncacheable) so its
	// requests share no connection with the plane's watches
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst, cfg.Timeout = 5000, 5000, 30*time.Second
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	var err error
	if fx.writer, err = client.New(cfg, client.Options{Scheme: k8s.Scheme()}); err != nil {
		t.Fatal(err)
	}

	var objs []client.Object
	addTarget := func(tg *churnTarget) {
		tg.n = -1
		fx.clusters[tg.cluster] = append(fx.clusters[tg.cluster], len(fx.targets))
		for i, a := range tg.addrs {
			fx.byAddr[a] = [2]int{len(fx.targets), i}
		}
		fx.targets = append(fx.targets, tg)
	}
	for u := range m.upstreams {
		up := fmt.Sprintf("u%d", u)
		objs = append(objs, &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: up, Namespace: ns}})
		for s := range m.sets {
			tg := &churnTarget{name: fmt.Sprintf("%s-z%d", up, s), cluster: ns + "/" + up}
			set := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: tg.name, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
				Upstream: up, Locality: v1alpha1.LocalityID{Region: "r", Zone: fmt.Sprintf("z%d", s)},
			}}
			for e := range m.eps {
				a := fmt.Sprintf("10.%d.%d.%d", 1+u/256, u%256, 1+s*m.eps+e)
				tg.addrs = append(tg.addrs, a)
				set.Spec.Endpoints = append(set.Spec.Endpoints, v1alpha1.Endpoint{Address: a, Port: 8080})
			}
			objs = append(objs, set)
			addTarget(tg)
		}
	}
	for sl := range m.slices {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-n%d", ns, sl), Labels: map[string]string{
			source.LabelRegion: "r", source.LabelZone: fmt.Sprintf("z%d", sl),
		}}}
		objs = append(objs, n)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	}
	for i := range m.services {
		svc, up := fmt.Sprintf("svc%d", i), fmt.Sprintf("imp%d", i)
		objs = append(objs,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns}, Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone,
				Ports:     []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
			}},
			&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: up, Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
				EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: svc, Port: intstr.FromString("grpc")}},
			}})
		for sl := range m.slices {
			tg := &churnTarget{slice: true, name: fmt.Sprintf("%s-%d", svc, sl), cluster: ns + "/" + up}
			es := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: tg.name, Namespace: ns, Labels: map[string]string{
					discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "poise-churn-test",
				}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(int32(9090)), Protocol: new(corev1.ProtocolTCP)}},
			}
			for e := range m.eps {
				a := fmt.Sprintf("10.%d.%d.%d", 200+i/256, i%256, 1+sl*m.eps+e)
				tg.addrs = append(tg.addrs, a)
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: new(fmt.Sprintf("%s-n%d", ns, sl)), Conditions: sliceCond(true)})
			}
			tg.obj = es
			objs = append(objs, es)
			addTarget(tg)
		}
	}
	for c := range fx.clusters {
		fx.names = append(fx.names, c)
	}
	slices.Sort(fx.names)

	start := time.Now()
	if err := parallel(t.Context(), 16, len(objs), func(ctx context.Context, i int) error {
		if err := fx.writer.Create(ctx, objs[i]); err != nil {
			return fmt.Errorf("create %T %s: %w", objs[i], objs[i].GetName(), err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d objects in %v", len(objs), time.Since(start).Round(time.Millisecond))
	return fx
}

func sliceCond(ready bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: new(ready), Serving: new(ready), Terminating: new(false)}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, workers, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// write issues the target's next write and retries it until the apiserver
// takes it (its t0 stays the first attempt's).
func (fx *churnFixture) write(ctx context.Context, tg *churnTarget) error {
	tg.mu.Lock()
	tg.n++
	m := tg.n
	w := &churnWrite{t0: time.Now()}
	tg.writes = append(tg.writes, w)
	tg.mu.Unlock()
	down := m % fx.eps
	// up to 20 attempts, 50 ms apart, while the test runs
	err := retry.OnError(wait.Backoff{Duration: 50 * time.Millisecond, Factor: 1, Steps: 20}, func(error) bool { return ctx.Err() == nil }, func() error {
		if tg.slice {
			for e := range tg.obj.Endpoints {
				tg.obj.Endpoints[e].Conditions = sliceCond(e != down)
			}
			err := fx.writer.Update(ctx, tg.obj)
			if apierrors.IsConflict(err) {
				fresh := &discoveryv1.EndpointSlice{}
				if gerr := fx.writer.Get(ctx, client.ObjectKeyFromObject(tg.obj), fresh); gerr == nil {
					tg.obj = fresh
				}
			}
			return err
		}
		patch := fmt.Appendf(nil, `{"status":{"health":[{"address":%q,"port":8080,"probe":"Unhealthy"}]}}`, tg.addrs[down])
		obj := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: fx.ns, Name: tg.name}}
		return fx.writer.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	})
	tg.mu.Lock()
	w.t1 = time.Now()
	tg.mu.Unlock()
	if err != nil {
		return fmt.Errorf("write %d of %s: %w", m, tg.name, err)
	}
	return nil
}

// ---- clients ----

// churnClient is a raw SotW ADS client: CDS wildcard and every cluster's
// EDS, ACKing every response. It reads from each ClusterLoadAssignment only
// the addresses it lists.
type churnClient struct {
	id   int
	fx   *churnFixture
	mu   sync.Mutex
	ptr  []int // per target, the last write this client has seen
	seen map[string]bool
	err  error

	responses, clas atomic.Int64
	unexpected      atomic.Int64
	sample          atomic.Pointer[string]
	masks           []uint32
}

// connect starts n clients and waits until each has every cluster's current
// endpoints.
func (fx *churnFixture) connect(t *testing.T, addr string, n int) []*churnClient {
	t.Helper()
	var clients []*churnClient
	ctx := t.Context()
	start := time.Now()
	for i := range n {
		c := &churnClient{id: i, fx: fx, seen: map[string]bool{}, masks: make([]uint32, len(fx.targets))}
		for _, tg := range fx.targets {
			tg.mu.Lock()
			c.ptr = append(c.ptr, tg.n)
			tg.mu.Unlock()
		}
		clients = append(clients, c)
		go pprof.Do(ctx, pprof.Labels("churn", "clients"), func(ctx context.Context) {
			err := c.run(ctx, addr)
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
		})
	}
	testkit.Eventually(t, 60*time.Second, fmt.Sprintf("%d clients hold every cluster's endpoints", n), func() (bool, string) {
		for _, c := range clients {
			c.mu.Lock()
			seen, err := len(c.seen), c.err
			c.mu.Unlock()
			if err != nil {
				t.Fatalf("client %d: %v", c.id, err)
			}
			if seen < len(fx.names) {
				return false, fmt.Sprintf("client %d has %d of %d clusters", c.id, seen, len(fx.names))
			}
		}
		return true, ""
	})
	t.Logf("%d clients connected and hold all %d clusters after %v", n, len(fx.names), time.Since(start).Round(time.Millisecond))
	return clients
}

func (c *churnClient) run(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &core.Node{Id: fmt.Sprintf("churn-%d", c.id), Cluster: "churn", UserAgentName: "envoy"}
	names := c.fx.names
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: names}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		at := time.Now()
		c.responses.Add(1)
		ack := &discoverygrpc.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() == resource.EndpointType {
			ack.ResourceNames = names
			for _, r := range resp.GetResources() {
				c.clas.Add(1)
				if err := c.apply(r.GetValue(), at); err != nil {
					return err
				}
			}
		}
		if err := stream.Send(ack); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// apply records which writes one ClusterLoadAssignment reflects.
func (c *churnClient) apply(b []byte, at time.Time) error {
	fx := c.fx
	cluster, err := claCluster(b)
	if err != nil {
		return err
	}
	targets := fx.clusters[cluster]
	for _, ti := range targets {
		c.masks[ti] = 0
	}
	if err := claAddresses(b, func(addr []byte) {
		if ref, ok := fx.byAddr[string(addr)]; ok {
			c.masks[ref[0]] |= 1 << ref[1]
		}
	}); err != nil {
		return fmt.Errorf("ClusterLoadAssignment %s: %w", cluster, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[cluster] = true
	for _, ti := range targets {
		tg, mask, cur := fx.targets[ti], c.masks[ti], c.ptr[ti]
		found, ok := tg.advance(cur, mask, fx.eps, func(w *churnWrite) {
			w.delivered++
			if at.After(w.last) {
				w.last = at
			}
		})
		if !ok {
			c.unexpected.Add(1)
			s := fmt.Sprintf("client %d, %s: endpoints %07b after write %d", c.id, tg.name, mask, cur)
			c.sample.Store(&s)
			continue
		}
		c.ptr[ti] = found
	}
	return nil
}

// watchEvents watches the targets as the plane's informers do and records
// when each write's event reaches this process: the apiserver's part of a
// write's latency ends there and the plane's begins.
func (fx *churnFixture) watch(t *testing.T) {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	last := make([]int, len(fx.targets)) // per target, the last write whose event came
	for i, tg := range fx.targets {
		byName[tg.name] = i
		last[i] = tg.n
	}
	var mu sync.Mutex // last
	observe := func(name string, mask uint32, at time.Time) {
		i, ok := byName[name]
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		last[i], _ = fx.targets[i].advance(last[i], mask, fx.eps, func(w *churnWrite) {
			if w.event.IsZero() {
				w.event = at
			}
		})
	}
	full := uint32(1)<<fx.eps - 1
	ctx := t.Context()
	// resourceVersion 0: served from the apiserver's watch cache, as the
	// plane's informers are, rather than from an etcd watch of its own
	fromCache := &client.ListOptions{Namespace: fx.ns, Raw: &metav1.ListOptions{ResourceVersion: "0"}}
	for _, list := range []client.ObjectList{&v1alpha1.EndpointSetList{}, &discoveryv1.EndpointSliceList{}} {
		w, err := wc.Watch(ctx, list, fromCache)
		if err != nil {
			t.Fatal(err)
		}
		go pprof.Do(ctx, pprof.Labels("churn", "watch"), func(ctx context.Context) {
			for {
				for ev := range w.ResultChan() {
					at := time.Now()
					mask := full
					switch o := ev.Object.(type) {
					case *metav1.Status:
						fx.watchError.Store(new(o.Message))
					case *v1alpha1.EndpointSet:
						i, ok := byName[o.Name]
						if !ok {
							continue
						}
						for _, h := range o.Status.Health {
							if e := slices.Index(fx.targets[i].addrs, h.Address); e >= 0 && h.Probe == v1alpha1.ProbeUnhealthy {
								mask &^= 1 << e
							}
						}
						observe(o.Name, mask, at)
					case *discoveryv1.EndpointSlice:
						for e, ep := range o.Endpoints {
							if e < fx.eps && ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
								mask &^= 1 << e
							}
						}
						observe(o.Name, mask, at)
					}
				}
				// the apiserver ends a watch it finds too slow to take its
				// events; a new one starts with every object's state, and the
				// writes in between count as seen now
				w.Stop()
				if ctx.Err() != nil {
					return
				}
				fx.watchRestarts.Add(1)
				// opened again at a retry's pace while the apiserver refuses
				if wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
					w, err = wc.Watch(ctx, list, fromCache)
					return err == nil, nil
				}) != nil {
					return
				}
			}
		})
	}
}

// claCluster reads cluster_name (field 1) of a ClusterLoadAssignment.
func claCluster(b []byte) (string, error) {
	var name string
	err := eachField(b, func(num protowire.Number, v []byte) error {
		if num == 1 {
			name = string(v)
		}
		return nil
	})
	return name, err
}

// claAddresses calls f with the address of every HEALTHY (or unset) endpoint:
// endpoints(2) → lb_endpoints(2) → endpoint(1) → address(1) →
// socket_address(1) → address(2), health_status(2) beside endpoint.
func claAddresses(b []byte, f func([]byte)) error {
	return eachField(b, func(num protowire.Number, loc []byte) error {
		if num != 2 {
			return nil
		}
		return eachField(loc, func(num protowire.Number, lbe []byte) error {
			if num != 2 {
				return nil
			}
			var addr []byte
			healthy := true
			err := eachFieldOrVarint(lbe, func(num protowire.Number, v []byte, x uint64, varint bool) error {
				switch {
				case num == 2 && varint:
					healthy = x <= uint64(core.HealthStatus_HEALTHY)
				case num == 1 && !varint:
					return eachField(v, func(num protowire.Number, a []byte) error {
						if num != 1 {
							return nil
						}
						return eachField(a, func(num protowire.Number, sa []byte) error {
							if num != 1 {
								return nil
							}
							return eachField(sa, func(num protowire.Number, s []byte) error {
								if num == 2 {
									addr = s
								}
								return nil
							})
						})
					})
				}
				return nil
			})
			if err == nil && addr != nil && healthy {
				f(addr)
			}
			return err
		})
	})
}

// eachField calls f with each length-delimited field of a message.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	return eachFieldOrVarint(b, func(num protowire.Number, v []byte, _ uint64, varint bool) error {
		if varint {
			return nil
		}
		return f(num, v)
	})
}

func eachFieldOrVarint(b []byte, f func(num protowire.Number, v []byte, x uint64, varint bool) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := f(num, v, 0, false); err != nil {
				return err
			}
			b = b[n:]
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := f(num, nil, x, true); err != nil {
				return err
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// ---- one churn phase ----

type churnPlane struct {
	p       *plane
	clients []*churnClient
	drain   time.Duration
}

type dist struct{ p50, p90, p99, max time.Duration }

func distOf(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	slices.Sort(d)
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))] }
	return dist{q(0.50), q(0.90), q(0.99), d[len(d)-1]}
}

func (d dist) String() string {
	r := func(x time.Duration) time.Duration { return x.Round(100 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v", r(d.p50), r(d.p90), r(d.p99), r(d.max))
}

type churnResult struct {
	phase                        string
	target                       float64
	writes, sliceWrites          int
	writing                      time.Duration // from the first write to the last answer
	window                       time.Duration // from the first write to the last delivery (or the last answer)
	apiLatency                   dist          // write sent → apiserver answered
	latency, setLatency, sliceLt dist          // write sent → the last client received it
	apiPart, planePart           dist          // write sent → its watch event here; that event → the last client
	noEvent                      int           // writes whose watch event was not seen (coalesced by the watch)
	undelivered, unexpected      int
	unexpectedSample             string
	selfCPU                      time.Duration // the test process: writers, plane, clients
	procCPU                      map[string]time.Duration
	labelCPU                     map[string]time.Duration // from a CPU profile of the window, by pprof label
	profileNote                  string
	requests                     map[string]float64 // apiserver_request_total deltas by verb and resource
	planeMetrics                 map[string]float64
	clients                      int
	responses, clas              int64
}

// churn runs the writers for the mode's duration and, with a plane, waits
// until every write has reached every client (or the drain time passes).
func (fx *churnFixture) churn(t *testing.T, phase string, mode churnMode, procs map[string]int, pl *churnPlane) *churnResult {
	t.Helper()
	ctx := t.Context()
	res := &churnResult{phase: phase, target: mode.rate}
	for _, tg := range fx.targets {
		tg.mu.Lock()
		tg.first, tg.writes = tg.n+1, nil
		tg.mu.Unlock()
	}
	var respBefore, clasBefore int64
	var planeBefore map[string]float64
	if pl != nil {
		res.clients = len(pl.clients)
		for _, c := range pl.clients {
			respBefore += c.responses.Load()
			clasBefore += c.clas.Load()
		}
		planeBefore = planeMetrics(pl.p)
	}
	reqBefore := apiserverRequests(t)
	procBefore := procCPU(procs)
	selfBefore := selfCPU()
	var prof bytes.Buffer
	profiling := pprof.StartCPUProfile(&prof) == nil
	if !profiling {
		res.profileNote = "no per-label CPU: a CPU profile is already running (go test -cpuprofile)"
	}

	var profiled sync.WaitGroup
	defer profiled.Wait()
	if path := os.Getenv("POISE_CHURN_APISERVER_PROFILE"); path != "" && pl == nil {
		// what the apiserver spends its CPU on while it takes the writes alone
		secs := max(1, int(min(mode.duration, 30*time.Second)/time.Second)-1)
		profiled.Go(func() {
			b, err := kubernetes.NewForConfigOrDie(restConfig).CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", strconv.Itoa(secs)).Timeout(time.Duration(secs+30) * time.Second).DoRaw(context.Background())
			if err == nil {
				err = os.WriteFile(path, b, 0o644)
			}
			if err != nil {
				t.Logf("apiserver profile: %v", err)
			} else {
				t.Logf("apiserver CPU profile (%ds of the apiserver-only phase) written to %s", secs, path)
			}
		})
	}
	start := time.Now()
	end := start.Add(mode.duration)
	interval := time.Duration(float64(mode.writers) / mode.rate * float64(time.Second))
	var wg sync.WaitGroup
	errc := make(chan error, mode.writers)
	// each target has one writer, so its writes are applied in order; the
	// targets are dealt in a fixed shuffled order so that every writer
	// mixes EndpointSets and EndpointSlices
	order := rand.New(rand.NewPCG(1, 2)).Perm(len(fx.targets))
	for w := range mode.writers {
		var mine []*churnTarget
		for i := w; i < len(order); i += mode.writers {
			mine = append(mine, fx.targets[order[i]])
		}
		if len(mine) == 0 {
			continue
		}
		wg.Go(func() {
			pprof.Do(ctx, pprof.Labels("churn", "writers"), func(ctx context.Context) {
				next := start.Add(time.Duration(w) * interval / time.Duration(mode.writers))
				for k := 0; ; k++ {
					if d := time.Until(next); d > 0 {
						// sleep: the writes are an open-loop load at the
						// mode's rate: the next is due at next
						time.Sleep(d)
					}
					if !time.Now().Before(end) {
						return
					}
					if err := fx.write(ctx, mine[k%len(mine)]); err != nil {
						errc <- err
						return
					}
					next = next.Add(interval)
				}
			})
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	lastAnswer := start
	for _, tg := range fx.targets {
		tg.mu.Lock()
		for _, w := range tg.writes {
			if w.t1.After(lastAnswer) {
				lastAnswer = w.t1
			}
		}
		tg.mu.Unlock()
	}
	res.writing = lastAnswer.Sub(start)
	res.window = res.writing

	if pl != nil {
		// every write reaches every client within the drain period; the
		// writes that do not are counted below, beside the figures
		t.Run("drain", func(t *testing.T) {
			testkit.EventuallyEvery(t, pl.drain, 20*time.Millisecond, "every write at every client", func() (bool, string) {
				for _, c := range pl.clients {
					c.mu.Lock()
					err := c.err
					c.mu.Unlock()
					if err != nil {
						t.Fatalf("client %d: %v", c.id, err)
					}
				}
				pending := 0
				for _, tg := range fx.targets {
					tg.mu.Lock()
					for _, w := range tg.writes {
						if w.delivered < len(pl.clients) {
							pending++
						}
					}
					tg.mu.Unlock()
				}
				return pending == 0, fmt.Sprintf("%d writes not at every client", pending)
			})
		})
	}
	if pl != nil {
		// the window ends at the last delivery
		for _, tg := range fx.targets {
			tg.mu.Lock()
			for _, w := range tg.writes {
				if d := w.last.Sub(start); d > res.window {
					res.window = d
				}
			}
			tg.mu.Unlock()
		}
	}
	res.selfCPU = selfCPU() - selfBefore
	res.procCPU = procCPU(procs)
	for k, v := range procBefore {
		res.procCPU[k] -= v
	}
	if profiling {
		pprof.StopCPUProfile()
		var err error
		if res.labelCPU, err = cpuByLabel(prof.Bytes()); err != nil {
			res.profileNote = "no per-label CPU: " + err.Error()
		}
	}
	res.requests = apiserverRequests(t)
	for k, v := range reqBefore {
		res.requests[k] -= v
	}

	var api, all, sets, sls, apiPart, planePart []time.Duration
	for _, tg := range fx.targets {
		tg.mu.Lock()
		for _, w := range tg.writes {
			res.writes++
			if tg.slice {
				res.sliceWrites++
			}
			api = append(api, w.t1.Sub(w.t0))
			if w.event.IsZero() {
				res.noEvent++
			} else {
				apiPart = append(apiPart, w.event.Sub(w.t0))
			}
			if pl == nil {
				continue
			}
			if w.delivered < len(pl.clients) {
				res.undelivered++
				continue
			}
			if !w.event.IsZero() {
				planePart = append(planePart, w.last.Sub(w.event))
			}
			d := w.last.Sub(w.t0)
			all = append(all, d)
			if tg.slice {
				sls = append(sls, d)
			} else {
				sets = append(sets, d)
			}
		}
		tg.mu.Unlock()
	}
	if n := fx.watchRestarts.Load(); n > 0 {
		t.Logf("[%s] the apiserver ended the test's own watch %d times so far (a saturated apiserver drops watchers it cannot feed in time); each time it started again", phase, n)
		if e := fx.watchError.Load(); e != nil {
			t.Logf("[%s] last watch error: %s", phase, *e)
		}
	}
	res.apiLatency, res.latency, res.setLatency, res.sliceLt = distOf(api), distOf(all), distOf(sets), distOf(sls)
	res.apiPart, res.planePart = distOf(apiPart), distOf(planePart)
	if pl != nil {
		for _, c := range pl.clients {
			res.responses += c.responses.Load()
			res.clas += c.clas.Load()
			res.unexpected += int(c.unexpected.Load())
			if s := c.sample.Load(); s != nil {
				res.unexpectedSample = *s
			}
		}
		res.responses -= respBefore
		res.clas -= clasBefore
		res.planeMetrics = planeMetrics(pl.p)
		for k, v := range planeBefore {
			res.planeMetrics[k] -= v
		}
	}
	return res
}

func cores(cpu, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return cpu.Seconds() / window.Seconds()
}

func (r *churnResult) report(t *testing.T) {
	t.Helper()
	rate := float64(r.writes) / r.writing.Seconds()
	t.Logf("[%s] %d writes (%d EndpointSlice updates, the rest EndpointSet status patches) in %v: %.0f writes/s of %.0f targeted",
		r.phase, r.writes, r.sliceWrites, r.writing.Round(time.Millisecond), rate, r.target)
	t.Logf("[%s] apiserver write latency: %v", r.phase, r.apiLatency)
	t.Logf("[%s] write → its watch event in this process: %v (%d writes' events not seen)", r.phase, r.apiPart, r.noEvent)
	if r.clients > 0 {
		t.Logf("[%s] write → last of %d clients: %v (EndpointSet status %v; EndpointSlice %v); undelivered %d",
			r.phase, r.clients, r.latency, r.setLatency, r.sliceLt, r.undelivered)
		t.Logf("[%s] the plane's part, watch event → last client: %v", r.phase, r.planePart)
		t.Logf("[%s] %d responses and %d ClusterLoadAssignments per client (%.1f writes per CLA a client received); plane: %.0f source batches, %.0f publications, %.0f EDS pushes",
			r.phase, r.responses/int64(r.clients), r.clas/int64(r.clients), float64(r.writes)/(float64(r.clas)/float64(r.clients)),
			r.planeMetrics["batches"], r.planeMetrics["publications"], r.planeMetrics["eds_pushes"])
	}
	var procs []string
	for k, v := range r.procCPU {
		procs = append(procs, fmt.Sprintf("%s %.2f cores", k, cores(v, r.window)))
	}
	slices.Sort(procs)
	t.Logf("[%s] CPU over %v: test process %.2f cores (%v); %s", r.phase, r.window.Round(time.Millisecond),
		cores(r.selfCPU, r.window), r.selfCPU.Round(time.Millisecond), strings.Join(procs, ", "))
	if r.labelCPU != nil {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.labelCPU)) {
			parts = append(parts, fmt.Sprintf("%s %.2f cores (%v)", k, cores(r.labelCPU[k], r.window), r.labelCPU[k].Round(time.Millisecond)))
		}
		t.Logf("[%s] CPU profile by pprof label: %s", r.phase, strings.Join(parts, ", "))
	} else if r.profileNote != "" {
		t.Logf("[%s] %s", r.phase, r.profileNote)
	}
	var reqs []string
	for _, k := range slices.Sorted(maps.Keys(r.requests)) {
		if v := r.requests[k]; v >= 1 {
			reqs = append(reqs, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	t.Logf("[%s] apiserver requests: %s", r.phase, strings.Join(reqs, ", "))
}

// compare derives the plane's CPU from the test process's: the churn's CPU
// minus what the same number of writes cost the writers alone.
func (r *churnResult) compare(t *testing.T, base *churnResult) {
	t.Helper()
	if base.writes == 0 || r.window <= 0 {
		return
	}
	writers := time.Duration(float64(base.selfCPU) * float64(r.writes) / float64(base.writes))
	t.Logf("[%s] plane and clients by difference: test process %v − writers %v (the apiserver-only phase's CPU per write × %d writes) = %v, %.2f cores over %v",
		r.phase, r.selfCPU.Round(time.Millisecond), writers.Round(time.Millisecond), r.writes, (r.selfCPU - writers).Round(time.Millisecond),
		cores(r.selfCPU-writers, r.window), r.window.Round(time.Millisecond))
}

// ---- CPU ----

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// envtestProcs finds the kube-apiserver and etcd that envtest started as
// children of this process.
func envtestProcs() map[string]int {
	out := map[string]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := os.Getpid()
	for _, d := range dirs {
		comm, fields, ok := readStat(d)
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me && (comm == "kube-apiserver" || comm == "etcd") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			out[comm] = pid
		}
	}
	return out
}

// readStat returns a /proc/<pid>/stat's command and the fields after it.
func readStat(path string) (string, []string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, false
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "", nil, false
	}
	return string(b[open+1 : closing]), strings.Fields(string(b[closing+1:])), true
}

// procCPU reads utime+stime of each process (clock ticks of 10 ms).
func procCPU(procs map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range procs {
		_, f, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid))
		if !ok || len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		out[name] = time.Duration(u+s) * 10 * time.Millisecond
	}
	return out
}

// cpuByLabel sums a CPU profile's samples by the value of their "plane" or
// "churn" pprof label ("unlabelled": the runtime's own goroutines, GC
// workers among them). It reads the profile.proto fields it needs:
// sample_type(1), sample(2){value(2), label(3){key(1), str(2)}}, string_table(6).
func cpuByLabel(gz []byte) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var strs []string
	type sample struct {
		values []int64
		labels [][2]int64
	}
	var samples []sample
	var types [][2]int64
	ints := func(v []byte, x uint64, varint bool) []int64 {
		if varint {
			return []int64{int64(x)}
		}
		var out []int64
		for len(v) > 0 {
			y, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return out
			}
			out = append(out, int64(y))
			v = v[n:]
		}
		return out
	}
	err = eachFieldOrVarint(b, func(num protowire.Number, v []byte, _ uint64, varint bool) error {
		switch {
		case num == 6 && !varint:
			strs = append(strs, string(v))
		case num == 1 && !varint:
			var vt [2]int64
			err := eachFieldOrVarint(v, func(num protowire.Number, _ []byte, x uint64, varint bool) error {
				if varint && (num == 1 || num == 2) {
					vt[num-1] = int64(x)
				}
				return nil
			})
			types = append(types, vt)
			return err
		case num == 2 && !varint:
			var s sample
			err := eachFieldOrVarint(v, func(num protowire.Number, v []byte, x uint64, varint bool) error {
				switch num {
				case 2:
					s.values = append(s.values, ints(v, x, varint)...)
				case 3:
					var l [2]int64
					err := eachFieldOrVarint(v, func(num protowire.Number, _ []byte, x uint64, varint bool) error {
						if varint && (num == 1 || num == 2) {
							l[num-1] = int64(x)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i >= 0 && int(i) < len(strs) {
			return strs[i]
		}
		return ""
	}
	ns := -1
	for i, vt := range types {
		if str(vt[1]) == "nanoseconds" {
			ns = i
		}
	}
	if ns < 0 {
		return nil, errors.New("the profile has no nanoseconds sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if ns >= len(s.values) {
			continue
		}
		key := "unlabelled"
		for _, l := range s.labels {
			switch str(l[0]) {
			case "plane":
				key = "plane " + str(l[1])
			case "churn":
				key = str(l[1])
			}
		}
		out[key] += time.Duration(s.values[ns])
	}
	return out, nil
}

// ---- counters ----

// apiserverRequests reads apiserver_request_total from the apiserver's
// /metrics, summed by verb and resource (with its subresource).
func apiserverRequests(t *testing.T) map[string]float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Logf("apiserver /metrics: %v", err)
		return map[string]float64{}
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := strings.Cut(line[len("apiserver_request_total{"):], "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(v, `"`)
			}
		}
		if l["resource"] == "" || l["verb"] == "WATCH" {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

// planeMetrics reads the plane's own counters from its /metrics.
func planeMetrics(p *plane) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(p.adminURL + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, `poise_source_batches_total{`) && strings.Contains(line, `result="applied"`):
			out["batches"] += v
		case strings.HasPrefix(line, `poise_xds_snapshot_builds_total{`) && strings.Contains(line, `result="published"`):
			out["publications"] += v
		case strings.HasPrefix(line, `poise_xds_pushes_total{`) && strings.Contains(line, `EDS`):
			out["eds_pushes"] += v
		}
	}
	return out
}
