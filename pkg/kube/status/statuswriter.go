package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
)

// Publication is what the status writer reads of xDS publication (a
// *publish.Publisher).
type Publication interface {
	// Published reports whether any snapshot has been published.
	Published() bool
	// LastRevision is the topology revision last published.
	LastRevision() uint64
	// Changed is closed by the next publication.
	Changed() <-chan struct{}
}

// ClientRejections is what a Publication whose xDS clients can reject
// what it sends (NACK) also tells the status writer: whether this
// replica's clients reject the current resources of an upstream, and when
// that changes. Only the leader's own clients are known to it; the NACKs of
// clients of other replicas are not combined.
type ClientRejections interface {
	// RejectedBy says how this replica's clients reject an upstream's
	// resources ("" when none does): how many, and one's reason.
	RejectedBy(topology.Key) string
	RejectedChanged() <-chan struct{}
}

// Budget bounds what the status writer asks of the apiserver: every
// status write takes a token from a bucket refilled at QPS, holding at most
// Burst, and at most Workers writes are in flight at once.
type Budget struct {
	QPS     float64
	Burst   int
	Workers int
}

// DefaultBudget is the budget of a replica's default options: 80% of a
// client of 1,000 requests per second and a burst of 2,000, and 16 writes in
// flight (replica.Options.StatusBudgetOf, which a test holds equal).
func DefaultBudget() Budget {
	return Budget{QPS: 800, Burst: 1600, Workers: 16}
}

const (
	// defaultPublishGrace is how long a change waits for the publication of
	// its revision before its status says Pending.
	defaultPublishGrace = 2 * time.Second
	// writeTimeout bounds one status write, so a hung apiserver holds a worker no longer.
	writeTimeout = 30 * time.Second
	// retryBase and retryMax bound the per-object backoff of a failed write.
	retryBase = 20 * time.Millisecond
	retryMax  = time.Minute
	// errorLogEvery: failed writes are logged at most this often, with a count.
	errorLogEvery = 10 * time.Second
)

// Cache indexes the status writer reads objects by.
const (
	localityUpstreamIndex    = "poise.dev/locality-upstream"
	endpointSetUpstreamIndex = "poise.dev/endpointset-upstream"
	partitionDomainIndex     = "poise.dev/partition-domain"
)

// Writer writes what was computed into the status of every Upstream,
// Locality, EndpointSet, SpatialDomain and Partition. Only the replica
// holding the Lease runs it.
//
// It works object by object from a rate-limited work queue: an object is
// queued when it is created or updated, when its upstream's (or domain's)
// part of the topology changes, when its rejection changes, and when the
// revision it waits for is published. A queued object whose status would be
// byte-identical to the informer cache's is not written. Writes are JSON
// merge patches of the status subresource carrying the resourceVersion they
// were computed from; a conflict or error is retried with per-object
// exponential backoff. All writes share the Budget.
type Writer struct {
	// Client reads from the informer cache and writes the status subresource.
	Client client.Client
	Dir    *topology.Directory
	Source *source.Source
	// Publication says what xDS carries; nil counts every snapshot of Dir as
	// published once it is current (a replica that serves no xDS).
	Publication Publication
	Log         *slog.Logger
	Metrics     *metrics.Status
	// Budget: the zero value means DefaultBudget.
	Budget Budget
	// PublishGrace: 0 means 2s.
	PublishGrace time.Duration
	// Events, when set, receives an Event for each condition that turns bad
	// or good again (statusEvents), once the status saying so is written.
	Events EventRecorder

	informers cache.Informers // set by Register
}

// Register adds the indexes the writer reads by, and keeps the informers
// whose events it follows while it leads. Call it before the cache starts.
func (w *Writer) Register(ctx context.Context, c cache.Cache) error {
	for _, ix := range statusIndexes {
		if err := c.IndexField(ctx, ix.obj, ix.name, ix.value); err != nil {
			return fmt.Errorf("status writer: index %s: %w", ix.name, err)
		}
	}
	w.informers = c
	return nil
}

// statusIndexes: Localities and EndpointSets by the Upstream they name,
// Partitions by their SpatialDomain.
var statusIndexes = []struct {
	obj   client.Object
	name  string
	value client.IndexerFunc
}{
	{&v1alpha1.Locality{}, localityUpstreamIndex, func(o client.Object) []string { return []string{o.(*v1alpha1.Locality).Spec.Upstream} }},
	{&v1alpha1.EndpointSet{}, endpointSetUpstreamIndex, func(o client.Object) []string { return []string{o.(*v1alpha1.EndpointSet).Spec.Upstream} }},
	{&v1alpha1.Partition{}, partitionDomainIndex, func(o client.Object) []string { return []string{o.(*v1alpha1.Partition).Spec.Domain} }},
}

// Start writes status until ctx is done (the Lease is lost). It first waits
// for the first publication, then queues every object once (from the
// informer cache: a new leader catches up without writing what is already
// right), and from then on only what changes.
func (w *Writer) Start(ctx context.Context) error {
	if w.informers == nil {
		return errors.New("status writer: Register was not called")
	}
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pub := w.Publication
	if pub == nil {
		pub = directoryPublication{w.Dir}
	}
	m := w.Metrics
	if m == nil {
		m = metrics.NewStatus()
	}
	budget := w.Budget
	if budget == (Budget{}) {
		budget = DefaultBudget()
	}
	grace := w.PublishGrace
	if grace <= 0 {
		grace = defaultPublishGrace
	}
	log.Info("status writer started: this replica leads", "writesPerSecond", budget.QPS, "burst", budget.Burst, "workers", budget.Workers)

	for !pub.Published() {
		ch := pub.Changed()
		if pub.Published() {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
	}

	r := &statusRun{
		w: w, pub: pub, log: log, m: m, grace: grace,
		q: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[topology.ObjectRef](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[topology.ObjectRef]{Name: "status", MetricsProvider: queueMetrics{m}}),
		budget:    flowcontrol.NewTokenBucketRateLimiter(float32(budget.QPS), max(budget.Burst, 1)),
		deferred:  map[topology.ObjectRef]time.Time{},
		unmatched: map[topology.ObjectRef]time.Time{},
	}
	defer m.QueueDepth.Set(0)

	// what the followers compare with is taken before the handlers queue
	// every object, so no change falls between the two
	snap, published := w.Dir.Current(), pub.LastRevision()
	rejected, refs := w.Source.Rejections(), w.Source.ServiceRefs()
	unregister, err := r.watchObjects(ctx)
	if err != nil {
		r.q.ShutDown()
		return err
	}
	defer unregister()

	var wg sync.WaitGroup
	wg.Go(func() { r.followDirectory(ctx, snap) })
	wg.Go(func() { r.followPublication(ctx, published) })
	wg.Go(func() { r.followRejections(ctx, rejected, refs) })
	if cr, ok := pub.(ClientRejections); ok {
		wg.Go(func() { r.followClientRejections(ctx, cr) })
	}
	for range max(budget.Workers, 1) {
		wg.Go(func() { r.work(ctx) })
	}
	<-ctx.Done()
	r.q.ShutDown()
	wg.Wait()
	return nil
}

// directoryPublication counts every current snapshot as published.
type directoryPublication struct{ d *topology.Directory }

func (p directoryPublication) Published() bool { return true }

func (p directoryPublication) LastRevision() uint64 { return p.d.Current().Revision }

func (p directoryPublication) Changed() <-chan struct{} { return p.d.Changed() }

// statusRun is one term of leadership: its queue, budget and the objects
// waiting for a publication.
type statusRun struct {
	w      *Writer
	pub    Publication
	log    *slog.Logger
	m      *metrics.Status
	grace  time.Duration
	q      workqueue.TypedRateLimitingInterface[topology.ObjectRef]
	budget flowcontrol.RateLimiter

	mu sync.Mutex
	// deferred: objects whose part of the topology is newer than what is
	// published, and since when they wait
	deferred map[topology.ObjectRef]time.Time
	// unmatched: the Localities whose status would newly say they match no
	// endpoints, and since when (holdUnmatched)
	unmatched map[topology.ObjectRef]time.Time
	// failed writes since the last log line about them
	failed    int
	lastErr   error
	lastLogAt time.Time
}

// work processes queued objects until the queue shuts down.
func (r *statusRun) work(ctx context.Context) {
	for {
		ref, quit := r.q.Get()
		if quit {
			return
		}
		if ctx.Err() != nil {
			r.q.Done(ref)
			continue
		}
		err := r.process(ctx, ref)
		switch {
		case err == nil:
			r.q.Forget(ref)
		case ctx.Err() != nil:
		default:
			r.failedWrite(ref, err)
			r.q.AddRateLimited(ref)
		}
		r.q.Done(ref)
	}
}

// failedWrite counts a failed write and logs failures at most every errorLogEvery.
func (r *statusRun) failedWrite(ref topology.ObjectRef, err error) {
	reason := "error"
	switch {
	case apierrors.IsConflict(err):
		reason = "conflict"
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	case apierrors.IsTooManyRequests(err):
		reason = "throttled"
	case apierrors.IsInvalid(err):
		reason = "invalid"
	}
	r.m.WriteErrors.WithLabelValues(ref.Kind, reason).Inc()
	if reason == "conflict" {
		return // the cache was behind our own last write; the retry reads it again
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	r.lastErr = err
	if time.Since(r.lastLogAt) < errorLogEvery {
		return
	}
	r.log.Warn("status writes failed; each object retries with backoff, and xDS keeps serving", "failed", r.failed, "lastError", r.lastErr)
	r.failed, r.lastLogAt = 0, time.Now()
}

// process brings one object's status up to date.
func (r *statusRun) process(ctx context.Context, ref topology.ObjectRef) error {
	snap := r.w.Dir.Current()
	published := r.pub.LastRevision()
	var rej *conditions.Rejection
	if v, ok := r.w.Source.Rejection(ref); ok {
		rej = &v
	}
	nn := types.NamespacedName{Namespace: ref.Key.Namespace, Name: ref.Key.Name}
	switch ref.Kind {
	case topology.KindUpstream:
		var u v1alpha1.Upstream
		if err := r.w.Client.Get(ctx, nn, &u); err != nil {
			return r.gone(ref, err)
		}
		state := snap.Upstream(ref.Key)
		programmed := state != nil && published >= state.Revision
		if r.waitForPublication(ref, state != nil && !programmed) {
			r.publishedMeanwhile(ref, state.Revision)
			return nil
		}
		var refs *metav1.Condition
		if u.Spec.EndpointsFrom != nil {
			c := resolvedRefs(ctx, r.w.Client, &u)
			if _, multi := r.w.Source.ClusterConditions()[ref.Key]; multi {
				// from several clusters, the reference resolves where it resolves best
				c = clusterRefs(&u, r.w.Source.ServiceRefs()[ref.Key])
			}
			refs = &c
		}
		rejectedBy := ""
		if cr, ok := r.pub.(ClientRejections); ok && state != nil {
			rejectedBy = cr.RejectedBy(ref.Key)
		}
		want := upstreamStatus(&u, state, rej, refs, programmed, rejectedBy)
		if c, ok := r.w.Source.ClusterConditions()[ref.Key]; ok && u.Spec.EndpointsFrom != nil {
			c.ObservedGeneration = u.Generation
			meta.SetStatusCondition(&want.Conditions, c)
		} else {
			meta.RemoveStatusCondition(&want.Conditions, conditions.ConditionRemoteClustersSynced)
		}
		return writeStatus(ctx, r, ref, &u, &u.Status, want)
	case topology.KindLocality:
		var l v1alpha1.Locality
		if err := r.w.Client.Get(ctx, nn, &l); err != nil {
			return r.gone(ref, err)
		}
		// a new generation is written once the topology holds it, with its figures
		if r.waitForPublication(ref, rej == nil && localityPending(&l, snap)) {
			return nil
		}
		want := localityStatus(&l, snap, rej)
		if r.holdUnmatched(ref, newlyUnmatched(l.Status.Conditions, want.Conditions)) {
			return nil
		}
		return writeStatus(ctx, r, ref, &l, &l.Status, want)
	case topology.KindEndpointSet:
		var s v1alpha1.EndpointSet
		if err := r.w.Client.Get(ctx, nn, &s); err != nil {
			return r.gone(ref, err)
		}
		if r.waitForPublication(ref, rej == nil && endpointSetPending(&s, snap)) {
			return nil
		}
		return writeStatus(ctx, r, ref, &s, &s.Status, endpointSetStatus(&s, snap, rej))
	case topology.KindSpatialDomain:
		var d v1alpha1.SpatialDomain
		if err := r.w.Client.Get(ctx, nn, &d); err != nil {
			return r.gone(ref, err)
		}
		st := snap.SpatialDomain(ref.Key)
		programmed := st != nil && published >= st.Revision
		if r.waitForPublication(ref, st != nil && st.Serving() && rej == nil && !programmed) {
			r.publishedMeanwhile(ref, st.Revision)
			return nil
		}
		return writeStatus(ctx, r, ref, &d, &d.Status, spatialDomainStatus(&d, st, rej, programmed))
	case topology.KindPartition:
		var p v1alpha1.Partition
		if err := r.w.Client.Get(ctx, nn, &p); err != nil {
			return r.gone(ref, err)
		}
		return writeStatus(ctx, r, ref, &p, &p.Status, partitionStatus(&p, snap.SpatialDomain(topology.Key{Namespace: p.Namespace, Name: p.Spec.Domain}), rej))
	}
	return nil
}

// gone handles a failed cache read: an object that no longer exists needs no status.
func (r *statusRun) gone(ref topology.ObjectRef, err error) error {
	if apierrors.IsNotFound(err) {
		r.mu.Lock()
		delete(r.deferred, ref)
		delete(r.unmatched, ref)
		r.mu.Unlock()
		return nil
	}
	return fmt.Errorf("reading %s from the cache: %w", ref, err)
}

// waitForPublication reports whether an object whose part of the topology
// is not yet published (waiting) should wait for it: a change is written
// once, with Programmed=True, when its revision is published, unless that
// takes longer than the grace (a publication refused): then it is written
// with Programmed=False at once. Localities and EndpointSets wait the same
// way for the topology to hold their generation, so that their figures
// are written with their observedGeneration, not after it.
func (r *statusRun) waitForPublication(ref topology.ObjectRef, waiting bool) bool {
	return r.holdBack(r.deferred, ref, waiting)
}

// holdUnmatched reports whether the write of a Locality whose status would
// newly say it matches no endpoints (unmatched) should wait: objects arrive
// in any order, and a Locality applied a moment before its EndpointSets
// would otherwise turn ResolvedRefs False, with a Warning Event, and back.
// It waits the publish grace from when it was first found so, and is
// written at once if its endpoints come meanwhile.
func (r *statusRun) holdUnmatched(ref topology.ObjectRef, unmatched bool) bool {
	return r.holdBack(r.unmatched, ref, unmatched)
}

// holdBack reports whether an object that waits for something (waiting)
// is held back: for the grace from the first time it is found waiting,
// since when held records (under r.mu); it is queued again when the grace
// ends.
func (r *statusRun) holdBack(held map[topology.ObjectRef]time.Time, ref topology.ObjectRef, waiting bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := held[ref]
	switch {
	case !waiting:
		delete(held, ref)
		return false
	case !ok:
		held[ref] = time.Now()
		r.q.AddAfter(ref, r.grace)
		return true
	}
	return time.Since(since) < r.grace
}

// newlyUnmatched reports whether a Locality's status cur says it matches no
// endpoints and its status old did not.
func newlyUnmatched(old, cur []metav1.Condition) bool {
	unmatched := func(conds []metav1.Condition) bool {
		c := meta.FindStatusCondition(conds, v1alpha1.ConditionResolvedRefs)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonMatchesNoEndpoints
	}
	return unmatched(cur) && !unmatched(old)
}

// publishedMeanwhile queues a deferred object again when the revision it waits
// for was published after process read the published revision (and perhaps
// before followPublication saw it deferred).
func (r *statusRun) publishedMeanwhile(ref topology.ObjectRef, rev uint64) {
	if r.pub.LastRevision() >= rev {
		r.q.Add(ref)
	}
}

// writeStatus patches obj's status (status points into obj, a copy from
// the cache) to want, unless it already is want. The patch carries the
// resourceVersion of the copy, so a cache that is behind gets a conflict
// and a retry, never an overwrite.
func writeStatus[S any](ctx context.Context, r *statusRun, ref topology.ObjectRef, obj client.Object, status *S, want S) error {
	if equality.Semantic.DeepEqual(want, *status) {
		r.m.Unchanged.WithLabelValues(ref.Kind).Inc()
		return nil
	}
	if err := r.budget.Wait(ctx); err != nil {
		return fmt.Errorf("status of %s: waiting for the write budget: %w", ref, err)
	}
	orig := obj.DeepCopyObject().(client.Object)
	old := conditionsOf(*status)
	*status = want
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := r.w.Client.Status().Patch(wctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("status of %s: %w", ref, err)
	}
	r.m.Writes.WithLabelValues(ref.Kind).Inc()
	statusEvents(r.w.Events, obj, old, conditionsOf(want))
	return nil
}

// queueMetrics hands the work queue's depth, adds, latency, work duration
// and retries to the control plane's registry.
type queueMetrics struct{ m *metrics.Status }

func (q queueMetrics) NewDepthMetric(string) workqueue.GaugeMetric { return q.m.QueueDepth }

func (q queueMetrics) NewAddsMetric(string) workqueue.CounterMetric {
	return q.m.QueueAdds
}

func (q queueMetrics) NewLatencyMetric(string) workqueue.HistogramMetric {
	return q.m.QueueLatency
}

func (q queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return q.m.WorkDuration
}

func (q queueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return discardGauge{}
}

func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return discardGauge{}
}

func (q queueMetrics) NewRetriesMetric(string) workqueue.CounterMetric { return q.m.Retries }

// discardGauge is a queue metric the control plane does not export.
type discardGauge struct{}

func (discardGauge) Set(float64) {}
