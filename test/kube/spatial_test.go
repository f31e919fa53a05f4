package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	kubereplica "poise.dev/poise/pkg/kube/replica"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/test/testkit"
)

// TestSpatialSource: the Kubernetes source puts SpatialDomains and Partitions into
// the Directory — those that exist when it starts and those created later — and
// follows their updates and deletions.
func TestSpatialSource(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	domain := domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.LocalityCapPercent = new(int32(25)) })
	domain.GenerateName, domain.Name = "", "cadastre"
	if err := k8s.Create(t.Context(), domain); err != nil {
		t.Fatal(err)
	}

	dir := topology.NewDirectory()
	r, err := kubereplica.NewReplica(restConfig, dir, kubereplica.Options{
		Namespace: ns, LeaderElectionNamespace: ns,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
		Debounce: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc, err := r.Start(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("manager did not stop within 20s")
		}
	})

	key := topology.Key{Namespace: ns, Name: "cadastre"}
	// The domain existed before the start: the initial sync carries it.
	st := dir.Current().SpatialDomain(key)
	if st == nil {
		t.Fatalf("SpatialDomain %s is not in the Directory after the initial sync", key)
	}
	if d := st.Domain.Domain; d.Name != "cadastre" || d.GridDeg != partitionmap.DefaultGridDeg || d.MaxCells != partitionmap.DefaultMaxCells ||
		d.CapPercent != 25 || len(d.Replicas) != 2 || len(d.Products) != 2 {
		t.Errorf("domain in the Directory = %+v", d)
	}

	wait := func(what string, cond func(*topology.SpatialState) (bool, string)) {
		t.Helper()
		testkit.Eventually(t, 15*time.Second, what, func() (bool, string) { return cond(dir.Current().SpatialDomain(key)) })
	}
	partitions := func(st *topology.SpatialState) string {
		if st == nil {
			return "no domain"
		}
		var out []string
		for _, p := range st.Partitions {
			out = append(out, fmt.Sprintf("%s %+v %v", p.Partition.Key, p.Partition.Extent, p.Partition.Replicas))
		}
		return fmt.Sprint(out)
	}

	// A Partition created later arrives through the watch.
	part := partitionWith(ns, func(s *v1alpha1.PartitionSpec) {
		s.Extent = v1alpha1.PartitionExtent{West: 170, South: -20, East: -170, North: 10.5}
		s.Replicas = []string{"us-1", "eu-1"}
	})
	part.GenerateName, part.Name = "", "pacific"
	if err := k8s.Create(t.Context(), part); err != nil {
		t.Fatal(err)
	}
	wantExtent := partitionmap.BBox{West: 170, South: -20, East: -170, North: 10.5}
	wait("the Partition in the Directory", func(st *topology.SpatialState) (bool, string) {
		ok := st != nil && len(st.Partitions) == 1 && st.Partitions[0].Partition.Extent == wantExtent &&
			st.Partitions[0].Partition.Domain == "cadastre" && fmt.Sprint(st.Partitions[0].Partition.Replicas) == "[us-1 eu-1]"
		return ok, partitions(st)
	})

	// An update follows.
	// The status writer patches status meanwhile: update the latest version.
	updateLatest(t, part, func() { part.Spec.Extent.North = 20 })
	wait("the Partition's new extent", func(st *topology.SpatialState) (bool, string) {
		return st != nil && len(st.Partitions) == 1 && st.Partitions[0].Partition.Extent.North == 20, partitions(st)
	})
	updateLatest(t, domain, func() { domain.Spec.GridDegrees = new(int32(10)) })
	wait("the domain's new grid", func(st *topology.SpatialState) (bool, string) {
		if st == nil {
			return false, "no domain"
		}
		return st.Domain.Domain.GridDeg == 10, fmt.Sprintf("grid %d", st.Domain.Domain.GridDeg)
	})

	// Deletions follow.
	if err := k8s.Delete(t.Context(), part); err != nil {
		t.Fatal(err)
	}
	wait("the Partition gone", func(st *topology.SpatialState) (bool, string) {
		return st != nil && len(st.Partitions) == 0, partitions(st)
	})
	if err := k8s.Delete(t.Context(), &v1alpha1.SpatialDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cadastre"}}); err != nil {
		t.Fatal(err)
	}
	wait("the SpatialDomain gone", func(st *topology.SpatialState) (bool, string) { return st == nil, partitions(st) })
}

// updateLatest applies change to the latest version of obj and updates it, retrying
// when the status writer changed the object in between.
func updateLatest(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	if err := tryUpdateLatest(t, obj, change); err != nil {
		t.Fatal(err)
	}
}

// tryUpdateLatest is updateLatest returning the error, for an update the
// apiserver may refuse.
func tryUpdateLatest(t *testing.T, obj client.Object, change func()) error {
	t.Helper()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return k8s.Update(t.Context(), obj)
	})
}
