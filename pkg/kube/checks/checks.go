package checks

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/kube/status"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/healthcheck"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Bounds of the check writer's status writes.
const (
	// checkWriteQPS and checkWriteBurst bound the writes of
	// status.activeChecks: a mass failure writes each checked Upstream once,
	// spread out, never all at once.
	checkWriteQPS   = 20
	checkWriteBurst = 40
	// checkRescan is how often every checked Upstream's status is compared
	// with the checker's state, so a write that failed or raced is retried
	// and the counts follow endpoint changes.
	checkRescan = 5 * time.Second
)

// Writer runs the active health checks of spec.healthCheck while this
// replica leads (docs/health.md, "Where checks run"), and writes each
// Upstream's verdicts to its status.activeChecks, where every replica, this
// one included, reads them into the topology. A new leader starts from what
// the previous one wrote: those endpoints start Unhealthy.
type Writer struct {
	Client client.Client // reads from the informer cache
	Dir    *topology.Directory
	Config healthcheck.Config
	Log    *slog.Logger
	// Metrics, when set, reads this term's checker for
	// poise_active_check_endpoints (Config.Observe counts the checks).
	Metrics *metrics.Checks
}

// unhealthyEndpoint is one endpoint the checker holds Unhealthy.
type unhealthyEndpoint struct {
	origin string
	since  metav1.Time
}

// checkRun is one term of leadership's checking.
type checkRun struct {
	w       *Writer
	checker *healthcheck.Checker
	limiter flowcontrol.RateLimiter
	kick    chan struct{}

	mu        sync.Mutex
	unhealthy map[topology.Key]map[healthcheck.Target]unhealthyEndpoint
	dirty     map[topology.Key]struct{}
}

// Run checks and writes until ctx ends (leadership is lost or the replica
// stops); the checks in flight end with it.
func (w *Writer) Run(ctx context.Context) error {
	r := &checkRun{
		w:         w,
		checker:   healthcheck.New(w.Config),
		limiter:   flowcontrol.NewTokenBucketRateLimiter(checkWriteQPS, checkWriteBurst),
		kick:      make(chan struct{}, 1),
		unhealthy: map[topology.Key]map[healthcheck.Target]unhealthyEndpoint{},
		dirty:     map[topology.Key]struct{}{},
	}
	defer r.limiter.Stop()
	if w.Metrics != nil {
		w.Metrics.SetEndpoints(r.checker.States)
		defer w.Metrics.SetEndpoints(nil)
	}
	if err := r.seed(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.checker.Run(ctx, r.record)
	}()
	go func() {
		defer wg.Done()
		healthcheck.Follow(ctx, w.Dir, r.checker)
	}()
	r.writeLoop(ctx)
	wg.Wait()
	return nil
}

// seed reads what the previous leader wrote: the endpoints it found
// Unhealthy start Unhealthy here, and status left on an Upstream that no
// longer has a check is cleared.
func (r *checkRun) seed(ctx context.Context) error {
	var list v1alpha1.UpstreamList
	if err := r.w.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("reading the Upstreams' active-check verdicts: %w", err)
	}
	for i := range list.Items {
		u := &list.Items[i]
		ac := u.Status.ActiveChecks
		if ac == nil {
			continue
		}
		k := topology.Key{Namespace: u.Namespace, Name: u.Name}
		r.dirty[k] = struct{}{}
		if u.Spec.HealthCheck == nil {
			continue
		}
		var targets []healthcheck.Target
		m := map[healthcheck.Target]unhealthyEndpoint{}
		for _, v := range source.CheckVerdicts(u) {
			t := healthcheck.Target{Address: v.Address, Port: v.Port, Generation: v.Generation}
			targets = append(targets, t)
			m[t] = unhealthyEndpoint{origin: v.Origin, since: sinceOf(ac, v)}
		}
		if len(m) > 0 {
			r.unhealthy[k] = m
			r.checker.Seed(k, targets)
		}
	}
	r.poke()
	return nil
}

// sinceOf finds when the previous leader recorded verdict v.
func sinceOf(ac *v1alpha1.ActiveCheckStatus, v topology.CheckVerdict) metav1.Time {
	for _, e := range ac.Unhealthy {
		if e.Port == int32(v.Port) && e.Since != nil && e.Address == v.Address {
			return *e.Since
		}
	}
	return metav1.Now()
}

// record takes a batch of verdict changes from the checker.
func (r *checkRun) record(vs []healthcheck.Verdict) {
	r.mu.Lock()
	now := metav1.Now()
	for _, v := range vs {
		m := r.unhealthy[v.Upstream]
		if v.Probe == weights.ProbeUnhealthy {
			if m == nil {
				m = map[healthcheck.Target]unhealthyEndpoint{}
				r.unhealthy[v.Upstream] = m
			}
			m[v.Target] = unhealthyEndpoint{origin: v.Origin, since: now}
		} else {
			delete(m, v.Target)
			if len(m) == 0 {
				delete(r.unhealthy, v.Upstream)
			}
		}
		r.dirty[v.Upstream] = struct{}{}
	}
	r.mu.Unlock()
	r.poke()
}

func (r *checkRun) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// writeLoop writes the dirty Upstreams' status when kicked, and compares
// every checked one every checkRescan.
func (r *checkRun) writeLoop(ctx context.Context) {
	tick := time.NewTicker(checkRescan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
			r.mu.Lock()
			for k := range r.checker.Checked() {
				r.dirty[k] = struct{}{}
			}
			for k := range r.unhealthy {
				r.dirty[k] = struct{}{}
			}
			r.mu.Unlock()
		}
		r.mu.Lock()
		keys := make([]topology.Key, 0, len(r.dirty))
		for k := range r.dirty {
			keys = append(keys, k)
		}
		r.dirty = map[topology.Key]struct{}{}
		r.mu.Unlock()
		slices.SortFunc(keys, topology.Key.Compare)
		checked, unchecked := r.checker.Checked(), r.checker.Unchecked()
		for _, k := range keys {
			if ctx.Err() != nil {
				return
			}
			if err := r.write(ctx, k, checked[k], unchecked[k]); err != nil {
				r.w.Log.Warn("writing active-check verdicts failed; retried", "upstream", k.String(), "error", err)
				r.mu.Lock()
				r.dirty[k] = struct{}{}
				r.mu.Unlock()
			}
		}
	}
}

// want is what upstream k's status.activeChecks should say.
func (r *checkRun) want(k topology.Key, checked, unchecked int) *v1alpha1.ActiveCheckStatus {
	r.mu.Lock()
	m := r.unhealthy[k]
	list := make([]v1alpha1.CheckedEndpoint, 0, len(m))
	for t, e := range m {
		since := e.since
		list = append(list, v1alpha1.CheckedEndpoint{Address: t.Address, Port: int32(t.Port), Origin: conditions.Clip(e.origin, 256), Since: &since,
			Generation: conditions.Clip(t.Generation, v1alpha1.MaxGenerationLength)})
	}
	r.mu.Unlock()
	// nothing to say while every endpoint is checked and none is
	// Unhealthy: the steady state of a healthy fleet writes nothing, and a
	// new leader does not write every checked Upstream once
	if unchecked == 0 && len(list) == 0 {
		return nil
	}
	slices.SortFunc(list, func(a, b v1alpha1.CheckedEndpoint) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	return &v1alpha1.ActiveCheckStatus{
		Unhealthy: list[:min(len(list), v1alpha1.MaxCheckedEndpointsPerUpstream)],
		Checked:   int32(checked), Unchecked: int32(unchecked),
	}
}

// write patches upstream k's status.activeChecks when it differs.
func (r *checkRun) write(ctx context.Context, k topology.Key, checked, unchecked int) error {
	return status.PatchUpstreamStatus(ctx, r.w.Client, r.limiter, k, func(u *v1alpha1.Upstream) {
		var want *v1alpha1.ActiveCheckStatus
		if u.Spec.HealthCheck != nil {
			want = r.want(k, checked, unchecked)
		}
		u.Status.ActiveChecks = want
	})
}
