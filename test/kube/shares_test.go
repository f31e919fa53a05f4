package kube_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"poise.dev/poise/pkg/kube/shares"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSharesCarryEachReplicasAggregate: each replica's aggregate lands in
// its own ConfigMap in the Lease's namespace (created, then replaced, each
// with one request); the leader lists the fresh ones, most recent first,
// leaves out those of another Lease and the stale, and deletes those past
// the stale bound; payloads over the bound are refused.
func TestSharesCarryEachReplicasAggregate(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	long := "poise-" + strings.Repeat("x", 80) // a Lease name too long for a label value
	share := func(lease, replica string) *shares.Store {
		return &shares.Store{Writer: k8s, Reader: k8s, Namespace: ns, Lease: lease, Replica: replica}
	}
	a, b, other := share(long, "poise-a"), share(long, "poise-b"), share("another-lease", "poise-c")
	now := time.Now()
	for _, p := range []struct {
		s       *shares.Store
		payload string
		at      time.Time
	}{
		{a, `{"v":1}`, now.Add(-3 * time.Second)},
		{a, `{"v":2}`, now.Add(-time.Second)}, // replaces the first
		{b, `{"v":3}`, now.Add(-20 * time.Second)},
		{other, `{"v":4}`, now},
	} {
		if err := p.s.Put(t.Context(), []byte(p.payload), p.at); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.List(t.Context(), now, 30*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Replica != "poise-a" || string(got[0].Payload) != `{"v":2}` || got[1].Replica != "poise-b" || string(got[1].Payload) != `{"v":3}` {
		t.Fatalf("shares %+v", got)
	}
	// later: a's is no longer fresh, b's is stale and deleted
	got, err = a.List(t.Context(), now.Add(40*time.Second), 5*time.Second, 50*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("shares past their freshness: %+v", got)
	}
	var cms corev1.ConfigMapList
	if err := k8s.List(t.Context(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range cms.Items {
		if strings.Contains(cm.Name, "-loads-") {
			names = append(names, cm.Name)
		}
	}
	slices.Sort(names)
	if len(names) != 2 || !strings.HasPrefix(names[0], "another-lease-loads-") || !strings.HasSuffix(names[1], "-loads-poise-a") {
		t.Fatalf("ConfigMaps %v: want a's and the other Lease's, b's deleted as stale", names)
	}
	if err := a.Put(t.Context(), bytes.Repeat([]byte("x"), shares.MaxPayload+1), now); !errors.Is(err, shares.ErrTooLarge) {
		t.Fatalf("an oversized payload: %v", err)
	}
	if err := a.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(t.Context()); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
}
