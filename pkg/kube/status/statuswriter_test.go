package status

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

// fakePublication publishes what the test says, when it says.
type fakePublication struct {
	mu      sync.Mutex
	rev     uint64
	changed chan struct{}
}

func newFakePublication() *fakePublication { return &fakePublication{changed: make(chan struct{})} }

func (p *fakePublication) Published() bool { return true }
func (p *fakePublication) LastRevision() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev
}
func (p *fakePublication) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}
func (p *fakePublication) publish(rev uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rev = rev
	close(p.changed)
	p.changed = make(chan struct{})
}

// statusFixture is a status writer's term on a fake apiserver: the objects
// of n upstreams (u-i with Locality and EndpointSet u-i-a and u-i-b, two
// endpoints each), a Directory fed from them by a Source, and a counter of
// the status patches the writer issues.
type statusFixture struct {
	t       *testing.T
	c       client.Client
	src     *source.Source
	dir     *topology.Directory
	pub     *fakePublication
	m       *metrics.Status
	run     *statusRun
	patches atomic.Int64
	// conflicts: how many of the next patches answer 409 Conflict
	conflicts atomic.Int64
	// down: while set, every patch answers 500
	down     atomic.Bool
	mu       sync.Mutex
	byObject map[string]int
}

func statusObjects(n int) []client.Object {
	var objs []client.Object
	for i := range n {
		name := fmt.Sprintf("u-%d", i)
		objs = append(objs, &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1}})
		for z, zone := range []string{"a", "b"} {
			id := v1alpha1.LocalityID{Region: "eu", Zone: zone}
			objs = append(objs, &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-" + zone, Generation: 1},
				Spec: v1alpha1.LocalitySpec{Upstream: name, LocalityID: id, Weight: new(int64(1 + z))}})
			objs = append(objs, &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-" + zone, Generation: 1},
				Spec: v1alpha1.EndpointSetSpec{Upstream: name, Locality: id, Endpoints: []v1alpha1.Endpoint{
					{Address: fmt.Sprintf("10.0.%d.%d", i, 2*z+1), Port: 80}, {Address: fmt.Sprintf("10.0.%d.%d", i, 2*z+2), Port: 80}}}})
		}
	}
	return objs
}

func newStatusFixture(t *testing.T, n int, budget Budget) *statusFixture {
	t.Helper()
	scheme, err := source.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	fx := &statusFixture{t: t, dir: topology.NewDirectory(), pub: newFakePublication(), m: metrics.NewStatus(), byObject: map[string]int{}}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(statusObjects(n)...).
		WithStatusSubresource(&v1alpha1.Upstream{}, &v1alpha1.Locality{}, &v1alpha1.EndpointSet{}, &v1alpha1.SpatialDomain{}, &v1alpha1.Partition{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			fx.patches.Add(1)
			if fx.down.Load() {
				return apierrors.NewInternalError(fmt.Errorf("etcdserver: request timed out"))
			}
			if fx.conflicts.Add(-1) >= 0 {
				return apierrors.NewConflict(schema.GroupResource{Group: "poise.dev", Resource: "upstreams"}, obj.GetName(), fmt.Errorf("the object has been modified"))
			}
			fx.conflicts.Store(0)
			fx.mu.Lock()
			fx.byObject[fmt.Sprintf("%T/%s", obj, obj.GetName())]++
			fx.mu.Unlock()
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}})
	for _, ix := range statusIndexes {
		b = b.WithIndex(ix.obj, ix.name, ix.value)
	}
	fx.c = b.Build()
	fx.src = &source.Source{Reader: fx.c, Dir: fx.dir}
	if err := fx.src.InitialSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	fx.pub.publish(fx.dir.Current().Revision)
	w := &Writer{Client: fx.c, Dir: fx.dir, Source: fx.src, Publication: fx.pub, Metrics: fx.m}
	fx.run = &statusRun{w: w, pub: fx.pub, log: slog.New(slog.DiscardHandler), m: fx.m, grace: time.Hour,
		q: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[topology.ObjectRef](time.Millisecond, 50*time.Millisecond),
			workqueue.TypedRateLimitingQueueConfig[topology.ObjectRef]{Name: "status", MetricsProvider: queueMetrics{fx.m}}),
		budget:    flowcontrol.NewTokenBucketRateLimiter(float32(budget.QPS), budget.Burst),
		deferred:  map[topology.ObjectRef]time.Time{},
		unmatched: map[topology.ObjectRef]time.Time{},
	}
	t.Cleanup(fx.run.q.ShutDown)
	return fx
}

// start runs workers until the test ends.
func (fx *statusFixture) start(workers int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { fx.run.work(ctx) })
	}
	fx.t.Cleanup(func() {
		cancel()
		fx.run.q.ShutDown()
		wg.Wait()
	})
}

// queueAll queues every object, as a new leader's informer handlers do.
func (fx *statusFixture) queueAll(n int) {
	for _, o := range statusObjects(n) {
		kind := map[string]string{"*v1alpha1.Upstream": topology.KindUpstream, "*v1alpha1.Locality": topology.KindLocality,
			"*v1alpha1.EndpointSet": topology.KindEndpointSet}[fmt.Sprintf("%T", o)]
		fx.run.q.Add(topology.ObjectRef{Kind: kind, Key: keyOf(o)})
	}
}

// processed is how many queued objects the workers have finished with
// (written, found unchanged, failed or put off), from the queue's own
// work-duration histogram.
func (fx *statusFixture) processed() uint64 {
	var d dto.Metric
	if err := fx.m.WorkDuration.Write(&d); err != nil {
		fx.t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// waitProcessed waits until the workers have finished with n more objects than at mark.
func (fx *statusFixture) waitProcessed(mark uint64, n int) {
	fx.t.Helper()
	testkit.Eventually(fx.t, 20*time.Second, fmt.Sprintf("the workers finished with %d objects", n), func() (bool, string) {
		done := fx.processed() - mark
		return done >= uint64(n), fmt.Sprintf("%d of %d", done, n)
	})
}

// waitRevision waits until Upstream name's status is at the Directory's
// current revision.
func (fx *statusFixture) waitRevision(name string) {
	fx.t.Helper()
	testkit.Eventually(fx.t, 10*time.Second, name+"'s status at the current revision", func() (bool, string) {
		got, want := fx.upstream(name).Status.Revision, int64(fx.dir.Current().Revision)
		return got == want, fmt.Sprintf("revision %d, want %d", got, want)
	})
}

// sumOf adds up the counters of a vector.
func sumOf(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil && d.Counter != nil {
			sum += d.Counter.GetValue()
		}
	}
	return sum
}

func (fx *statusFixture) writes() map[string]int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	out := fx.byObject
	fx.byObject = map[string]int{}
	return out
}

func (fx *statusFixture) upstream(name string) v1alpha1.Upstream {
	fx.t.Helper()
	var u v1alpha1.Upstream
	if err := fx.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &u); err != nil {
		fx.t.Fatal(err)
	}
	return u
}

// setHealth writes a prober's verdict on endpoint 10.0.i.1 and feeds it to the Directory.
func (fx *statusFixture) setHealth(i int, probe v1alpha1.ProbeState) {
	fx.t.Helper()
	var es v1alpha1.EndpointSet
	if err := fx.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: fmt.Sprintf("u-%d-a", i)}, &es); err != nil {
		fx.t.Fatal(err)
	}
	es.Status.Health = []v1alpha1.EndpointHealth{{Address: fmt.Sprintf("10.0.%d.1", i), Port: 80, Probe: probe}}
	if err := fx.c.Status().Update(context.Background(), &es); err != nil {
		fx.t.Fatal(err)
	}
	// the source reads every object again, this EndpointSet among them
	if err := fx.src.InitialSync(context.Background()); err != nil {
		fx.t.Fatal(err)
	}
}

func TestStatusWriterWritesEachObjectOnceAndNothingUnchanged(t *testing.T) {
	t.Parallel()
	const n = 20
	fx := newStatusFixture(t, n, Budget{QPS: 1e6, Burst: 1e6})
	fx.start(4)
	mark := fx.processed()
	fx.queueAll(n)
	fx.waitProcessed(mark, 5*n)
	if got := len(fx.writes()); got != 5*n {
		t.Fatalf("first pass wrote %d objects; want %d", got, 5*n)
	}
	u := fx.upstream("u-3")
	if c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionProgrammed); c == nil || c.Status != metav1.ConditionTrue ||
		c.Message != fmt.Sprintf("published over xDS at revision %d", u.Status.Revision) || u.Status.Revision != 1 {
		t.Errorf("u-3: revision %d, Programmed %+v", u.Status.Revision, c)
	}

	// everything again (a new leader, or a resync): nothing is written
	before := fx.patches.Load()
	mark = fx.processed()
	fx.queueAll(n)
	fx.waitProcessed(mark, 5*n)
	if got := fx.patches.Load() - before; got != 0 {
		t.Errorf("queueing unchanged objects issued %d patches; want 0", got)
	}
	if got := testutil.ToFloat64(fx.m.Unchanged.WithLabelValues(topology.KindUpstream)); got != n {
		t.Errorf("poise_status_unchanged_total{kind=Upstream} = %v; want %d", got, n)
	}

	// one endpoint flips: the directory follower queues u-7 and its objects; only u-7's are written
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go fx.run.followDirectory(ctx, fx.dir.Current())
	go fx.run.followPublication(ctx, fx.pub.LastRevision())
	others := map[string]int64{}
	for i := range n {
		others[fmt.Sprintf("u-%d", i)] = fx.upstream(fmt.Sprintf("u-%d", i)).Status.Revision
	}
	mark = fx.processed()
	fx.setHealth(7, v1alpha1.ProbeUnhealthy)
	fx.pub.publish(fx.dir.Current().Revision)
	fx.waitRevision("u-7")
	fx.waitProcessed(mark, 5) // u-7, its two Localities and two EndpointSets
	// the Upstream's figures, the set's eligible count, and the shares of both Localities of the priority
	if got, want := fx.writes(), map[string]int{"*v1alpha1.EndpointSet/u-7-a": 1, "*v1alpha1.Locality/u-7-a": 1, "*v1alpha1.Locality/u-7-b": 1,
		"*v1alpha1.Upstream/u-7": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("one endpoint flip wrote %v; want %v", got, want)
	}
	for name, rev := range others {
		u := fx.upstream(name)
		switch {
		case name == "u-7" && u.Status.Revision != int64(fx.dir.Current().Revision):
			t.Errorf("u-7: revision %d after its change at topology revision %d", u.Status.Revision, fx.dir.Current().Revision)
		case name != "u-7" && u.Status.Revision != rev:
			t.Errorf("%s: revision moved from %d to %d on u-7's change", name, rev, u.Status.Revision)
		}
	}
}

func TestStatusWriterWaitsForPublication(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 2, Budget{QPS: 1e6, Burst: 1e6})
	fx.start(1)
	mark := fx.processed()
	fx.queueAll(2)
	fx.waitProcessed(mark, 10)
	fx.writes()

	// the change is in the Directory but not yet published: nothing is written
	fx.setHealth(1, v1alpha1.ProbeUnhealthy)
	ref := topology.ObjectRef{Kind: topology.KindUpstream, Key: topology.Key{Namespace: "ns", Name: "u-1"}}
	mark = fx.processed()
	fx.run.q.Add(ref)
	fx.waitProcessed(mark, 1)
	if got := fx.writes(); len(got) != 0 {
		t.Fatalf("a change not yet published wrote %v", got)
	}
	// its publication writes it once, Programmed at the new revision
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go fx.run.followPublication(ctx, fx.pub.LastRevision())
	mark = fx.processed()
	fx.pub.publish(fx.dir.Current().Revision)
	fx.waitRevision("u-1")
	fx.waitProcessed(mark, 1)
	if got, want := fx.writes(), map[string]int{"*v1alpha1.Upstream/u-1": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the publication wrote %v; want %v", got, want)
	}
	u := fx.upstream("u-1")
	if c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionProgrammed); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("u-1 Programmed = %+v", c)
	}

	// a publication that never comes: after the grace, Pending is written
	fx.run.grace = 30 * time.Millisecond
	fx.setHealth(1, v1alpha1.ProbeHealthy)
	fx.run.q.Add(ref)
	testkit.Eventually(t, 5*time.Second, "u-1 says Pending after the grace", func() (bool, string) {
		u := fx.upstream("u-1")
		c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionProgrammed)
		return c != nil && c.Reason == v1alpha1.ReasonPending, fmt.Sprintf("Programmed %+v", c)
	})
}

func TestStatusWriterRetriesConflictsWithBackoff(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 1, Budget{QPS: 1e6, Burst: 1e6})
	fx.conflicts.Store(3)
	fx.start(1)
	fx.run.q.Add(topology.ObjectRef{Kind: topology.KindUpstream, Key: topology.Key{Namespace: "ns", Name: "u-0"}})
	testkit.Eventually(t, 5*time.Second, "u-0 written", func() (bool, string) {
		return fx.upstream("u-0").Status.Revision != 0, fmt.Sprintf("%d patches", fx.patches.Load())
	})
	if got := testutil.ToFloat64(fx.m.WriteErrors.WithLabelValues(topology.KindUpstream, "conflict")); got != 3 {
		t.Errorf("poise_status_write_errors_total{reason=conflict} = %v; want 3", got)
	}
	if got := testutil.ToFloat64(fx.m.Retries); got != 3 {
		t.Errorf("poise_status_retries_total = %v; want 3", got)
	}
	if got := fx.patches.Load(); got != 4 {
		t.Errorf("%d patches; want 4 (3 conflicts, then the write)", got)
	}
	ref := topology.ObjectRef{Kind: topology.KindUpstream, Key: topology.Key{Namespace: "ns", Name: "u-0"}}
	testkit.Eventually(t, time.Second, "the backoff of the written object forgotten", func() (bool, string) {
		n := fx.run.q.NumRequeues(ref)
		return n == 0, fmt.Sprintf("%d requeues", n)
	})
}

func TestStatusWriterBacksOffWhileTheApiserverFails(t *testing.T) {
	t.Parallel()
	const n = 2 // 10 objects
	fx := newStatusFixture(t, n, Budget{QPS: 1e6, Burst: 1e6})
	fx.down.Store(true)
	fx.start(4)
	fx.queueAll(n)
	// sleep: the figure is a rate, attempts within 300ms of failures
	time.Sleep(300 * time.Millisecond)
	// backoff from 1 ms doubling to the fixture's 50 ms cap: about 10 attempts
	// an object in 300 ms, where retrying at once would make thousands
	attempts := fx.patches.Load()
	if attempts < 10 || attempts > 150 {
		t.Errorf("%d patch attempts for 10 objects in 300ms of failures; want about 100 (backoff)", attempts)
	}
	if got := testutil.ToFloat64(fx.m.WriteErrors.WithLabelValues(topology.KindUpstream, "error")); got == 0 {
		t.Error("failed writes were not counted")
	}
	// the apiserver recovers: every object is written, once
	fx.down.Store(false)
	testkit.Eventually(t, 5*time.Second, "every object written after the recovery", func() (bool, string) {
		w := sumOf(fx.m.Writes)
		return w >= 5*n, fmt.Sprintf("%v of %d", w, 5*n)
	})
	for obj, c := range fx.writes() {
		if c != 1 {
			t.Errorf("%s written %d times after the recovery", obj, c)
		}
	}
	t.Logf("%d attempts in 300ms of failures, then each object written once", attempts)
}

func TestStatusWriterKeepsToItsBudget(t *testing.T) {
	t.Parallel()
	const n = 4 // 20 objects
	fx := newStatusFixture(t, n, Budget{QPS: 50, Burst: 5})
	fx.start(8)
	mark := fx.processed()
	start := time.Now()
	fx.queueAll(n)
	fx.waitProcessed(mark, 5*n)
	took := time.Since(start)
	// 5 at once, then 15 at 50/s: at least 300ms
	if took < 280*time.Millisecond {
		t.Errorf("20 writes at 50/s with a burst of 5 took %v; want at least 300ms", took)
	}
	if got := testutil.ToFloat64(fx.m.Writes.WithLabelValues(topology.KindUpstream)); got != n {
		t.Errorf("poise_status_writes_total{kind=Upstream} = %v; want %d", got, n)
	}
}

func TestUpstreamRevisionOnlyGoesUp(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 1, Budget{QPS: 1e6, Burst: 1e6})
	state := fx.dir.Current().Upstream(topology.Key{Namespace: "ns", Name: "u-0"})
	u := fx.upstream("u-0")
	first := upstreamStatus(&u, state, nil, nil, true, "")
	if first.Revision != int64(state.Revision) {
		t.Fatalf("first status: revision %d; want the topology revision %d", first.Revision, state.Revision)
	}

	// a leader whose revisions ran higher wrote 90: the same figures keep it, byte for byte
	u.Status = first
	u.Status.Revision = 90
	meta.SetStatusCondition(&u.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgrammed, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonProgrammed, ObservedGeneration: 1, Message: "published over xDS at revision 90"})
	if again := upstreamStatus(&u, state, nil, nil, true, ""); fmt.Sprint(again) != fmt.Sprint(u.Status) {
		t.Errorf("same figures under a new leader:\n got %+v\nwant %+v", again, u.Status)
	}
	// changed figures go past it, whatever this leader's own count
	rej := &conditions.Rejection{Reason: v1alpha1.ReasonInvalid, Message: "bad"}
	if next := upstreamStatus(&u, state, rej, nil, true, ""); next.Revision != 91 {
		t.Errorf("changed figures: revision %d; want 91", next.Revision)
	}
	// Programmed alone does not move it
	if pending := upstreamStatus(&u, state, nil, nil, false, ""); pending.Revision != 90 {
		t.Errorf("not yet published: revision %d; want 90", pending.Revision)
	}
}

// TestRefusedUpstreamIsNotProgrammed: while an Upstream's generation (or
// what it imports) is refused, its status never says Programmed, though its
// last accepted version is published.
func TestRefusedUpstreamIsNotProgrammed(t *testing.T) {
	t.Parallel()
	u := v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "u", Namespace: "n", Generation: 2}}
	state := &topology.UpstreamState{Revision: 7, Result: &weights.Result{}}
	rej := &conditions.Rejection{Reason: v1alpha1.ReasonAddressNotAllowed, Message: "AddressNotAllowed: ..."}
	st := upstreamStatus(&u, state, rej, nil, true, "")
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgrammed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAddressNotAllowed || c.ObservedGeneration != 2 {
		t.Fatalf("Programmed = %+v; want False, AddressNotAllowed, generation 2", c)
	}
	if a := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAccepted); a == nil || a.Status != metav1.ConditionFalse {
		t.Fatalf("Accepted = %+v; want False", a)
	}
}

// rejectingPublication is a fakePublication whose clients reject what the test says.
type rejectingPublication struct {
	*fakePublication
	mu      sync.Mutex
	by      map[topology.Key]string
	changed chan struct{}
}

func (p *rejectingPublication) RejectedBy(k topology.Key) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[k]
}

func (p *rejectingPublication) RejectedChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

func (p *rejectingPublication) reject(k topology.Key, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by[k] = why
	close(p.changed)
	p.changed = make(chan struct{})
}

// TestStatusWriterFollowsClientRejections: when this replica's clients
// start rejecting an upstream's resources its Upstream is written
// Programmed=False, RejectedByClients, and True again when they stop,
// without moving its revision; nothing else is written.
func TestStatusWriterFollowsClientRejections(t *testing.T) {
	t.Parallel()
	fx := newStatusFixture(t, 2, Budget{QPS: 1e6, Burst: 1e6})
	pub := &rejectingPublication{fakePublication: fx.pub, by: map[topology.Key]string{}, changed: make(chan struct{})}
	fx.run.pub, fx.run.w.Publication = pub, pub
	fx.start(2)
	mark := fx.processed()
	fx.queueAll(2)
	fx.waitProcessed(mark, 10)
	fx.writes()
	rev := fx.upstream("u-1").Status.Revision

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go fx.run.followClientRejections(ctx, pub)
	k := topology.Key{Namespace: "ns", Name: "u-1"}
	programmed := func(what string, status metav1.ConditionStatus, reason string) {
		t.Helper()
		var u v1alpha1.Upstream
		testkit.Eventually(t, 10*time.Second, what, func() (bool, string) {
			u = fx.upstream("u-1")
			c := meta.FindStatusCondition(u.Status.Conditions, v1alpha1.ConditionProgrammed)
			return c != nil && c.Status == status && c.Reason == reason, fmt.Sprintf("Programmed = %+v; want %s %s", c, status, reason)
		})
		if u.Status.Revision != rev {
			t.Errorf("%s: revision moved from %d to %d", what, rev, u.Status.Revision)
		}
	}
	pub.reject(k, "1 xDS stream(s) of this replica; resource ns/u-1: bad")
	programmed("a client rejects", metav1.ConditionFalse, conditions.ReasonRejectedByClients)
	pub.reject(k, "")
	programmed("no client rejects", metav1.ConditionTrue, v1alpha1.ReasonProgrammed)
	if got, want := fx.writes(), map[string]int{"*v1alpha1.Upstream/u-1": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("wrote %v; want %v", got, want)
	}
}
