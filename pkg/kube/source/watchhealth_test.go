package source

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"poise.dev/poise/api/v1alpha1"
)

// TestUnanswered: what the apiserver did not answer is retried by the
// source; what the reflector acts on goes to it.
func TestUnanswered(t *testing.T) {
	t.Parallel()
	gr := schema.GroupResource{Group: "poise.dev", Resource: "upstreams"}
	tooLarge := apierrors.NewTimeoutError("Too large resource version", 1)
	tooLarge.ErrStatus.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), true},
		{errors.New("http2: client connection lost"), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewNotFound(gr, ""), true},
		{apierrors.NewForbidden(gr, "", errors.New("RBAC not ready")), true},
		{apierrors.NewResourceExpired("too old resource version"), false},
		{apierrors.NewGone("gone"), false},
		{tooLarge, false},
		{apierrors.NewBadRequest("bad"), false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestWatchHealth: a kind is stale from its first failure until a call
// works, and /readyz's line names the broken kinds.
func TestWatchHealth(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 10, 42, 7, 0, time.UTC)
	h := NewWatchHealth(nil)
	h.now = func() time.Time { return now }
	h.working("Upstream")
	h.working("EndpointSet")
	if w := h.Warnings(); w != nil {
		t.Fatalf("warnings while every watch works: %q", w)
	}
	h.broken("EndpointSet", errors.New("connection refused"))
	now = now.Add(3 * time.Second)
	h.broken("Upstream", errors.New("connection reset"))
	h.broken("EndpointSet", errors.New("connection refused again"))
	now = now.Add(2 * time.Second)
	stale := h.StaleSeconds()
	if stale["EndpointSet"] != 5 || stale["Upstream"] != 2 {
		t.Errorf("stale seconds %v, want EndpointSet 5 and Upstream 2", stale)
	}
	w := h.Warnings()
	want := "kubernetes: the watch of EndpointSet, Upstream is broken since 2026-01-02T10:42:07Z (5s ago): connection refused again; the topology last seen keeps serving"
	if len(w) != 1 || w[0] != want {
		t.Errorf("warnings %q, want %q", w, want)
	}
	h.working("EndpointSet")
	h.working("Upstream")
	if w := h.Warnings(); w != nil || h.StaleSeconds()["Upstream"] != 0 {
		t.Errorf("after the watches work again: warnings %q, stale %v", w, h.StaleSeconds())
	}
}

// TestRelist: Relist ends the open watch of the kind's informers and has
// the next watch answered "expired", once, so the reflector lists again;
// another kind's watch is left alone.
func TestRelist(t *testing.T) {
	t.Parallel()
	h := NewWatchHealth(nil)
	watches := map[string][]*watch.FakeWatcher{}
	informer := func(kind string, obj runtime.Object) {
		h.NewInformer(&toolscache.ListWatch{
			ListFunc: func(metav1.ListOptions) (runtime.Object, error) { return &v1alpha1.UpstreamList{}, nil },
			WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
				w := watch.NewFake()
				watches[kind] = append(watches[kind], w)
				return w, nil
			},
		}, obj, 0, nil)
	}
	informer("Upstream", &v1alpha1.Upstream{})
	informer("Locality", &v1alpha1.Locality{})
	lw := func(kind string) *retryingLW { return h.lws[kind][0] }
	ctx := t.Context()
	for _, kind := range []string{"Upstream", "Locality"} {
		if _, err := lw(kind).WatchWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.Relist("Upstream")
	if _, open := <-watches["Upstream"][0].ResultChan(); open {
		t.Error("the Upstream watch is still open after Relist")
	}
	if watches["Locality"][0].IsStopped() {
		t.Error("Relist of Upstream ended the Locality watch")
	}
	if _, err := lw("Upstream").WatchWithContext(ctx, metav1.ListOptions{}); !apierrors.IsResourceExpired(err) {
		t.Errorf("the watch after Relist: %v, want resource version expired", err)
	}
	if _, err := lw("Upstream").WatchWithContext(ctx, metav1.ListOptions{}); err != nil || len(watches["Upstream"]) != 2 {
		t.Errorf("the watch after that: %v (%d watches opened), want a watch", err, len(watches["Upstream"]))
	}
	if w := h.Warnings(); w != nil {
		t.Errorf("a relist is no broken watch: %q", w)
	}
}

// A relist's copy of an object held marks nothing, unless it differs: the
// copy held was read while the CRD's schema pruned a field.
func TestRelistedCopyThatDiffersIsMarked(t *testing.T) {
	t.Parallel()
	s := &Source{}
	s.init()
	held := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "7", Generation: 1}}
	s.update("Upstream", held, held.DeepCopy())
	if d := s.dirtyNow(); len(d) != 0 {
		t.Fatalf("an identical relisted copy marked %v", d)
	}
	full := held.DeepCopy()
	full.Spec.ExportTo = []string{"."}
	s.update("Upstream", held, full)
	if d := s.dirtyNow(); len(d) != 1 {
		t.Fatalf("a relisted copy with spec.exportTo, same resource version and generation: marked %v, want the Upstream", d)
	}
}
