package source

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHeartbeat: an apiserver that stops answering (a silent partition:
// the request hangs, nothing errs) makes the source stale at once, with a
// /readyz line, and every connection is closed once per outage; the first
// answer clears it.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	var silent atomic.Bool
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if silent.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = w.Write([]byte(`{"major":"1"}`))
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	h := NewWatchHealth(nil)
	var closed atomic.Int32
	asked := make(chan error, 100)
	b := &Heartbeat{Health: h, Client: srv.Client(), URL: srv.URL + "/version", Every: 5 * time.Millisecond, Timeout: 50 * time.Millisecond,
		CloseAll: func() { closed.Add(1) }, Asked: func(err error) { asked <- err }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	next := func() error {
		select {
		case err := <-asked:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the heartbeat asked nothing for 10s")
			return nil
		}
	}
	if err := next(); err != nil {
		t.Fatalf("an apiserver that answers: %v", err)
	}
	if w := h.Warnings(); w != nil {
		t.Fatalf("warnings while the apiserver answers: %q", w)
	}
	silent.Store(true)
	for range 3 {
		if err := next(); err == nil || !strings.Contains(err.Error(), "did not answer within 50ms") {
			t.Fatalf("a silent apiserver: %v", err)
		}
	}
	if w := h.Warnings(); len(w) != 1 || !strings.Contains(w[0], "the apiserver has not answered since") {
		t.Errorf("warnings while the apiserver is silent: %q", w)
	}
	if h.Stale()[HeartbeatKind] <= 0 || h.BrokenSince().IsZero() {
		t.Errorf("not stale while the apiserver is silent: %v", h.Stale())
	}
	if n := closed.Load(); n != 1 {
		t.Errorf("connections closed %d times over one outage, want 1", n)
	}
	silent.Store(false)
	for next() != nil {
	}
	if w := h.Warnings(); w != nil {
		t.Errorf("warnings once the apiserver answers again: %q", w)
	}
	if h.Stale()[HeartbeatKind] != 0 {
		t.Errorf("still stale once the apiserver answers: %v", h.Stale())
	}
}
