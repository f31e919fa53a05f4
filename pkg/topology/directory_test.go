package topology

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"

	"poise.dev/poise/pkg/weights"
)

func upstream(name string) Upstream {
	return Upstream{Key: Key{"default", name}, Policy: weights.DefaultPolicy(), HealthAdjustment: ControlPlane}
}

func set(name, up, region string, n int, unhealthy int) EndpointSet {
	s := EndpointSet{Key: Key{"default", name}, Upstream: up, Locality: weights.Locality{Region: region}}
	for i := 0; i < n; i++ {
		e := Endpoint{Address: testAddress(name, i), Port: 80, Weight: 1}
		if i < unhealthy {
			e.Health.Probe = weights.ProbeUnhealthy
			e.Health.ProbeOrigin = "test"
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// testAddress is the address of endpoint i of set name: a unique-local IPv6
// address made of the name's hash.
func testAddress(name string, i int) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	v := h.Sum64()
	return fmt.Sprintf("fd00:%x:%x:%x::%x", uint16(v>>32), uint16(v>>16), uint16(v), i)
}

func locality(name, up, region string, prio uint32, w uint64) Locality {
	return Locality{Key: Key{"default", name}, Upstream: up, Priority: prio, Locality: weights.Locality{Region: region}, Weight: w}
}

func mustApply(t *testing.T, d *Directory, b Batch) *Snapshot {
	t.Helper()
	s, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestApplyComputesSeedExample(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("api"))
	b.PutLocality(locality("x", "api", "x", 0, 1))
	b.PutLocality(locality("y", "api", "y", 0, 2))
	b.PutEndpointSet(set("x", "api", "x", 2, 1))
	b.PutEndpointSet(set("y", "api", "y", 2, 0))
	s := mustApply(t, d, b)
	if s.Revision != 1 || d.Current() != s {
		t.Fatalf("revision %d, current %p, applied %p", s.Revision, d.Current(), s)
	}
	u := s.Upstream(Key{"default", "api"})
	got := []uint64{u.Result.Localities[0].Traffic, u.Result.Localities[1].Traffic}
	if got[0] != 259_259 || got[1] != 740_741 {
		t.Fatalf("traffic %v, want [259259 740741]", got)
	}
	if len(u.Groups) != 2 || u.Groups[1].LocalityWeight != 2 || u.Groups[1].LocalityObjects[0].Name != "y" {
		t.Fatalf("groups %+v", u.Groups)
	}
}

func TestDefaultsWithoutLocalityObject(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("api"))
	b.PutEndpointSet(set("a", "api", "r1", 3, 0))
	u := mustApply(t, d, b).Upstream(Key{"default", "api"})
	g := u.Groups[0]
	if g.Priority != 0 || g.LocalityWeight != 1 || len(g.LocalityObjects) != 0 {
		t.Fatalf("group %+v, want priority 0 weight 1 defaulted", g)
	}
}

func TestInvalidBatchKeepsLastGoodSnapshot(t *testing.T) {
	d := NewDirectory()
	var good Batch
	good.PutUpstream(upstream("api"))
	good.PutEndpointSet(set("a", "api", "r1", 3, 0))
	before := mustApply(t, d, good)

	tests := []struct {
		name    string
		batch   func() Batch
		want    error
		objects []string
	}{
		{"conflicting localities", func() Batch {
			var b Batch
			b.PutLocality(locality("l1", "api", "r1", 0, 1))
			b.PutLocality(locality("l2", "api", "r1", 0, 5))
			return b
		}, weights.ErrInconsistentTopology, []string{"Locality default/l1", "Locality default/l2"}},
		{"ambiguous priority", func() Batch {
			var b Batch
			b.PutLocality(locality("l1", "api", "r1", 0, 1))
			b.PutLocality(locality("l2", "api", "r1", 1, 1))
			return b
		}, weights.ErrInconsistentTopology, []string{"EndpointSet default/a", "Locality default/l1", "Locality default/l2"}},
		{"duplicate endpoint across sets", func() Batch {
			var b Batch
			s := set("b", "api", "r2", 1, 0)
			s.Endpoints[0].Address = testAddress("a", 0)
			b.PutEndpointSet(s)
			return b
		}, weights.ErrDuplicateEndpoint, []string{"EndpointSet default/a", "EndpointSet default/b"}},
		{"zero weight", func() Batch {
			var b Batch
			s := set("a", "api", "r1", 3, 0)
			s.Endpoints[2].Weight = 0
			b.PutEndpointSet(s)
			return b
		}, weights.ErrInvalidWeight, []string{"EndpointSet default/a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := d.Apply(tc.batch())
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			var be *BatchError
			if !errors.As(err, &be) {
				t.Fatalf("err %T is not a *BatchError", err)
			}
			for _, o := range tc.objects {
				found := false
				for _, ref := range be.Problems[0].Objects {
					found = found || ref.String() == o
				}
				if !found {
					t.Errorf("problem %v does not name %s", be.Problems[0], o)
				}
			}
			if s != before || d.Current() != before {
				t.Fatalf("snapshot changed after a rejected batch")
			}
		})
	}
	// the rejected batches left nothing behind: a good batch still applies on the old state
	var b Batch
	b.PutLocality(locality("l1", "api", "r1", 0, 3))
	after := mustApply(t, d, b)
	if after.Revision != before.Revision+1 {
		t.Fatalf("revision %d after %d", after.Revision, before.Revision)
	}
}

func TestNoOpBatchKeepsRevision(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("api"))
	b.PutEndpointSet(set("a", "api", "r1", 3, 0))
	s1 := mustApply(t, d, b)
	s2 := mustApply(t, d, b)
	if s1 != s2 || s2.Revision != 1 {
		t.Fatalf("re-applying the same batch published revision %d", s2.Revision)
	}
}

func TestEndpointChangeTouchesOnlyItsUpstream(t *testing.T) {
	d := NewDirectory()
	var b Batch
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("u%d", i)
		b.PutUpstream(upstream(name))
		b.PutEndpointSet(set(name, name, "r1", 4, 0))
	}
	s1 := mustApply(t, d, b)
	var flip Batch
	flip.PutEndpointSet(set("u2", "u2", "r1", 4, 2))
	s2 := mustApply(t, d, flip)
	for i, u := range s2.Upstreams() {
		shared := u == s1.Upstreams()[i]
		if (i == 2) == shared {
			t.Errorf("upstream %s shared=%v", u.Upstream.Key, shared)
		}
	}
	u2 := s2.Upstream(Key{"default", "u2"})
	if u2.Revision != 2 || u2.ClusterRevision != 1 {
		t.Fatalf("u2 revision %d cluster revision %d, want 2 and 1", u2.Revision, u2.ClusterRevision)
	}
	if s1.Upstream(Key{"default", "u2"}).Result.Localities[0].Availability != weights.Million {
		t.Fatalf("old snapshot was modified")
	}
}

func TestOrphansAndLateUpstream(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutEndpointSet(set("a", "api", "r1", 2, 0))
	s := mustApply(t, d, b)
	if len(s.Orphans()) != 1 || s.Orphans()[0].String() != "EndpointSet default/a" {
		t.Fatalf("orphans %v", s.Orphans())
	}
	var b2 Batch
	b2.PutUpstream(upstream("api"))
	s = mustApply(t, d, b2)
	if len(s.Orphans()) != 0 || len(s.Upstream(Key{"default", "api"}).Endpoints) != 2 {
		t.Fatalf("orphans %v after the upstream arrived", s.Orphans())
	}
	var b3 Batch
	b3.DeleteUpstream(Key{"default", "api"})
	s = mustApply(t, d, b3)
	if len(s.Upstreams()) != 0 || len(s.Orphans()) != 1 {
		t.Fatalf("after delete: %d upstreams, orphans %v", len(s.Upstreams()), s.Orphans())
	}
}

func TestMovingASetBetweenUpstreams(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("a"))
	b.PutUpstream(upstream("b"))
	b.PutEndpointSet(set("s", "a", "r1", 2, 0))
	mustApply(t, d, b)
	var mv Batch
	mv.PutEndpointSet(set("s", "b", "r1", 2, 0))
	s := mustApply(t, d, mv)
	if n := len(s.Upstream(Key{"default", "a"}).Endpoints); n != 0 {
		t.Fatalf("a still has %d endpoints", n)
	}
	if n := len(s.Upstream(Key{"default", "b"}).Endpoints); n != 2 {
		t.Fatalf("b has %d endpoints", n)
	}
}

// Readers racing a writer must only ever see complete batches: every batch
// here moves all endpoints of both upstreams to the same health state.
func TestConcurrentReadersSeeWholeBatches(t *testing.T) {
	d := NewDirectory()
	apply := func(unhealthy int) {
		var b Batch
		b.PutUpstream(upstream("a"))
		b.PutUpstream(upstream("b"))
		b.PutEndpointSet(set("a", "a", "r1", 10, unhealthy))
		b.PutEndpointSet(set("b", "b", "r1", 10, unhealthy))
		if _, err := d.Apply(b); err != nil {
			t.Error(err)
		}
	}
	apply(0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := d.Current()
				if s.Revision < last {
					t.Errorf("revision went back from %d to %d", last, s.Revision)
				}
				last = s.Revision
				a, b := s.Upstream(Key{"default", "a"}), s.Upstream(Key{"default", "b"})
				if a.Result.Priorities[0].EligibleWeight != b.Result.Priorities[0].EligibleWeight {
					t.Errorf("revision %d: half-applied batch", s.Revision)
					return
				}
			}
		}()
	}
	for i := 0; i < 300; i++ {
		apply(i % 7)
	}
	close(stop)
	wg.Wait()
}

func TestChangedWakesReaders(t *testing.T) {
	d := NewDirectory()
	ch := d.Changed()
	var b Batch
	b.PutUpstream(upstream("a"))
	mustApply(t, d, b)
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed after a publish")
	}
	if d.Current().Revision != 1 {
		t.Fatal("wrong revision")
	}
}

// TestLargeBatchesResolveAsSmallOnes: a batch large enough to be resolved on
// every core gives the same states as the same objects applied in batches
// resolved one upstream at a time, and its problems come in key order.
func TestLargeBatchesResolveAsSmallOnes(t *testing.T) {
	const n = 4*parallelResolve + 3
	var big Batch
	small := make([]Batch, (n+parallelResolve-1)/parallelResolve)
	for i := range n {
		name := fmt.Sprintf("up-%04d", i)
		u, s1, s2 := upstream(name), set(name+"-a", name, "a", 3+i%5, i%3), set(name+"-b", name, "b", 2+i%4, i%2)
		for _, b := range []*Batch{&big, &small[i/parallelResolve]} {
			b.PutUpstream(u)
			b.PutEndpointSet(s1)
			b.PutEndpointSet(s2)
		}
	}
	one, many := NewDirectory(), NewDirectory()
	got := mustApply(t, one, big)
	var want *Snapshot
	for _, b := range small {
		want = mustApply(t, many, b)
	}
	if got.NumUpstreams() != n || want.NumUpstreams() != n {
		t.Fatalf("%d and %d upstreams, want %d", got.NumUpstreams(), want.NumUpstreams(), n)
	}
	for i, g := range got.Upstreams() {
		w := want.Upstreams()[i]
		if g.Upstream.Key != w.Upstream.Key || fmt.Sprint(g.Groups, g.Endpoints, origins(g), *g.Result) != fmt.Sprint(w.Groups, w.Endpoints, origins(w), *w.Result) {
			t.Fatalf("%s resolves differently in one large batch", g.Upstream.Key)
		}
	}

	// two broken upstreams, far apart: both problems, in key order
	var broken Batch
	for _, i := range []int{n - 2, 7} {
		name := fmt.Sprintf("up-%04d", i)
		dup := set(name+"-c", name, "c", 2, 0)
		dup.Endpoints[1].Address = dup.Endpoints[0].Address
		broken.PutEndpointSet(dup)
	}
	for i := range n {
		name := fmt.Sprintf("up-%04d", i)
		broken.PutEndpointSet(set(name+"-d", name, "d", 1, 0))
	}
	_, err := one.Apply(broken)
	var be *BatchError
	if !errors.As(err, &be) || len(be.Problems) != 2 || be.Problems[0].Upstream.Name != "up-0007" || be.Problems[1].Upstream.Name != fmt.Sprintf("up-%04d", n-2) {
		t.Fatalf("a large batch with two broken upstreams: %v", err)
	}
	if one.Current() != got {
		t.Fatal("a refused batch changed the current snapshot")
	}
}

// origins are an upstream's origins with their health, for comparing.
func origins(u *UpstreamState) []string {
	out := make([]string, len(u.Origins))
	for i, o := range u.Origins {
		out[i] = fmt.Sprint(o.Set, *o.Health)
	}
	return out
}

// TestSetLocalityWeight: a set's own locality weight (an imported
// cluster's) weighs its group unless a Locality object does; two sets of
// one group with different weights contradict each other.
func TestSetLocalityWeight(t *testing.T) {
	w := func(s EndpointSet, weight uint64) EndpointSet { s.LocalityWeight = &weight; return s }
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("api"))
	b.PutEndpointSet(w(set("x", "api", "x", 2, 0), 3))
	b.PutEndpointSet(set("y", "api", "y", 2, 0))
	u := mustApply(t, d, b).Upstream(Key{"default", "api"})
	if u.Groups[0].LocalityWeight != 3 || u.Groups[1].LocalityWeight != 1 || u.Result.Localities[0].Traffic != 750_000 {
		t.Fatalf("groups %+v traffic %d, want weights 3 and 1, 750000 to x", u.Groups, u.Result.Localities[0].Traffic)
	}
	// a Locality object overrides the set's weight
	b = Batch{}
	b.PutLocality(locality("x", "api", "x", 0, 1))
	u = mustApply(t, d, b).Upstream(Key{"default", "api"})
	if u.Groups[0].LocalityWeight != 1 {
		t.Fatalf("group %+v, want the Locality object's weight 1", u.Groups[0])
	}
	// two sets of one group weighing it differently, with no Locality object
	b = Batch{}
	b.DeleteLocality(Key{"default", "x"})
	other := w(set("x2", "api", "x", 1, 0), 5)
	b.PutEndpointSet(other)
	_, err := d.Apply(b)
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(be.Problems[0].Err, weights.ErrInconsistentTopology) || len(be.Problems[0].Objects) != 2 {
		t.Fatalf("err = %v, want an InconsistentTopology problem naming both sets", err)
	}
}
