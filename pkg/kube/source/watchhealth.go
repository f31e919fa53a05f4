package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// The informers' own retry of a list or watch the apiserver did not
// answer. client-go's reflector backs off from 800 ms to a 30 s cap with
// full jitter, so after an apiserver restart each informer resumes 30 to
// 60 s later, each replica at its own moment, and replicas serve differing
// stale topologies meanwhile. The source retries such calls itself, from
// 250 ms doubling to 4 s with a quarter of jitter: an informer resumes at
// most 5 s after the apiserver is back, and a replica sends at most one
// request every 4 s per kind (eight kinds) to an apiserver that is down.
var watchBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.25, Cap: 4 * time.Second, Steps: 1 << 30}

// WatchHealth tracks, for each kind the informers read, whether its list
// and watch reach the apiserver: since when they have not, and why. While
// one does not, the source serves the topology it last saw.
type WatchHealth struct {
	Log *slog.Logger
	// now is the clock (tests set it).
	now func() time.Time

	mu    sync.Mutex
	kinds map[string]*watchState
	// lws are the informers' list-watchers by kind, for Relist.
	lws map[string][]*retryingLW
}

type watchState struct {
	since time.Time // of the first failure in a row; zero while it works
	err   string    // the latest failure
}

// NewWatchHealth returns a WatchHealth that logs to log (nil: nowhere).
func NewWatchHealth(log *slog.Logger) *WatchHealth {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &WatchHealth{Log: log, now: time.Now, kinds: map[string]*watchState{}, lws: map[string][]*retryingLW{}}
}

// Relist has the informers of kind list it again from the apiserver: their
// open watch ends, and the next one is answered "resource version
// expired", on which the reflector lists. A CRD's new schema needs it: the
// apiserver serves a watch opened before the CRD changed from the old
// schema until it tears that storage down, pruning the fields the old
// schema lacks, so objects read then are held without them, and nothing
// moves them again until they change. The list that follows reads them
// with the new schema, and the source marks every object that differs
// from what it held.
func (h *WatchHealth) Relist(kind string) {
	h.mu.Lock()
	lws := slices.Clone(h.lws[kind])
	h.mu.Unlock()
	for _, lw := range lws {
		lw.relist()
	}
	if len(lws) > 0 {
		h.Log.Info("listing a kind again: its CRD changed", "kind", kind)
	}
}

// kind returns the state of a kind, tracking it.
func (h *WatchHealth) kind(kind string) *watchState {
	st := h.kinds[kind]
	if st == nil {
		st = &watchState{}
		h.kinds[kind] = st
	}
	return st
}

func (h *WatchHealth) working(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.kind(kind)
	if st.since.IsZero() {
		return
	}
	h.Log.Info("kubernetes watch restored", "kind", kind, "brokenFor", h.now().Sub(st.since).Round(time.Millisecond))
	st.since, st.err = time.Time{}, ""
}

func (h *WatchHealth) broken(kind string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.kind(kind)
	if st.since.IsZero() {
		st.since = h.now()
		h.Log.Warn("kubernetes watch broken; the topology last seen keeps serving", "kind", kind, "error", err)
	}
	st.err = err.Error()
}

// Stale returns, for every kind tracked, how long its watch has been
// broken (0 while it works).
func (h *WatchHealth) Stale() map[string]time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	out := make(map[string]time.Duration, len(h.kinds))
	for kind, st := range h.kinds {
		if !st.since.IsZero() {
			out[kind] = now.Sub(st.since)
		} else {
			out[kind] = 0
		}
	}
	return out
}

// BrokenSince is when the longest-broken watch broke (zero while every
// watch works).
func (h *WatchHealth) BrokenSince() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for _, st := range h.kinds {
		if !st.since.IsZero() && (first.IsZero() || st.since.Before(first)) {
			first = st.since
		}
	}
	return first
}

// lastError is a kind's latest failure ("" while it works).
func (h *WatchHealth) lastError(kind string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.kinds[kind]; st != nil {
		return st.err
	}
	return ""
}

// StaleSeconds is Stale in seconds, as poise_kube_source_stale_seconds reports it.
func (h *WatchHealth) StaleSeconds() map[string]float64 {
	stale := h.Stale()
	out := make(map[string]float64, len(stale))
	for kind, d := range stale {
		out[kind] = d.Seconds()
	}
	return out
}

// maxWatchErrorText bounds the error a warning quotes.
const maxWatchErrorText = 300

// Warnings returns a line for /readyz while a watch is broken: the kinds,
// since when, and the latest error of the longest broken; and one while
// the apiserver does not answer the heartbeat. It is a warning,
// not unreadiness: an apiserver outage breaks every replica's watch at
// once, and the topology last seen is the best any of them can serve.
func (h *WatchHealth) Warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	if hb := h.kinds[HeartbeatKind]; hb != nil && !hb.since.IsZero() {
		lines = append(lines, fmt.Sprintf("kubernetes: the apiserver has not answered since %s (%v ago): %s; the topology last seen keeps serving",
			hb.since.UTC().Format(time.RFC3339), h.now().Sub(hb.since).Round(time.Second), quoteError(hb.err)))
	}
	var kinds []string
	var first *watchState
	for kind, st := range h.kinds {
		if st.since.IsZero() || kind == HeartbeatKind {
			continue
		}
		kinds = append(kinds, kind)
		if first == nil || st.since.Before(first.since) {
			first = st
		}
	}
	if first == nil {
		return lines
	}
	slices.Sort(kinds)
	return append(lines, fmt.Sprintf("kubernetes: the watch of %s is broken since %s (%v ago): %s; the topology last seen keeps serving",
		strings.Join(kinds, ", "), first.since.UTC().Format(time.RFC3339), h.now().Sub(first.since).Round(time.Second), quoteError(first.err)))
}

// quoteError is an error's text cut to maxWatchErrorText.
func quoteError(text string) string {
	if len(text) > maxWatchErrorText {
		text = strings.ToValidUTF8(text[:maxWatchErrorText], "") + "…"
	}
	return text
}

// NewInformer is a controller-runtime cache.Options.NewInformer: a shared
// informer whose lists and watches are retried with watchBackoff and
// report to h.
func (h *WatchHealth) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	kind := reflect.TypeOf(obj).String()
	if t := reflect.TypeOf(obj); t.Kind() == reflect.Pointer {
		kind = t.Elem().Name()
	}
	rlw := &retryingLW{kind: kind, health: h, lw: toolscache.ToListerWatcherWithContext(lw), inner: lw}
	h.mu.Lock()
	h.kind(kind)
	h.lws[kind] = append(h.lws[kind], rlw)
	h.mu.Unlock()
	return toolscache.NewSharedIndexInformer(rlw, obj, resync, indexers)
}

// retryingLW lists and watches one kind, retrying what the apiserver did
// not answer (unreachable, restarting, overloaded) itself, so the
// reflector's backoff, meant for a whole fleet of clients, never grows
// while the apiserver is away.
type retryingLW struct {
	kind   string
	health *WatchHealth
	lw     toolscache.ListerWatcherWithContext
	inner  toolscache.ListerWatcher

	mu      sync.Mutex
	current watch.Interface // the open watch, to end for a relist
	expire  bool            // the next watch answers "expired": list again
}

// relist ends the open watch and has the next one answered "expired".
func (r *retryingLW) relist() {
	r.mu.Lock()
	r.expire = true
	w := r.current
	r.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}

func (r *retryingLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return r.ListWithContext(context.Background(), opts)
}

func (r *retryingLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return r.WatchWithContext(context.Background(), opts)
}

func (r *retryingLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return retry(ctx, r, func() (runtime.Object, error) { return r.lw.ListWithContext(ctx, opts) })
}

// WatchWithContext: a watch the apiserver accepted from the last resource
// version seen delivers every change since, so the kind works again. After
// a relist it answers "expired" once, as the apiserver would, and the
// reflector lists.
func (r *retryingLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	r.mu.Lock()
	expire := r.expire
	r.expire = false
	r.mu.Unlock()
	if expire {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("the %s CRD changed: listing again to read every object with its new schema", r.kind))
	}
	w, err := retry(ctx, r, func() (watch.Interface, error) { return r.lw.WatchWithContext(ctx, opts) })
	if err == nil {
		r.mu.Lock()
		r.current = w
		r.mu.Unlock()
	}
	return w, err
}

// IsWatchListSemanticsUnSupported keeps the wrapped client's answer, so
// the reflector streams its lists (watch-list) where the client can.
func (r *retryingLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(r.inner)
}

func retry[T any](ctx context.Context, r *retryingLW, call func() (T, error)) (T, error) {
	b := watchBackoff
	for {
		v, err := call()
		if err == nil {
			r.health.working(r.kind)
			return v, nil
		}
		if ctx.Err() != nil {
			return v, err
		}
		r.health.broken(r.kind, err)
		if !unanswered(err) {
			return v, err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}

// unanswered reports whether an error says the apiserver did not answer
// the request (down, restarting, overloaded, not yet serving the kind or
// authorizing it), to be retried as it was, rather than answered it in a
// way the reflector acts on: a resource version expired or too large
// (list again), a request it cannot take.
func unanswered(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer: refused, reset, timed out, TLS
	}
	switch {
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err),
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge),
		strings.Contains(status.Status().Message, "Too large resource version"),
		apierrors.IsBadRequest(err), apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return false
	}
	return true
}
