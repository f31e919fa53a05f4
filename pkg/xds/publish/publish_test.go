package publish_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
)

func apply(t *testing.T, d *topology.Directory, b topology.Batch) *topology.Snapshot {
	t.Helper()
	s, err := d.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPublishGrowsWithTheChange(t *testing.T) {
	d := topology.NewDirectory()
	c := newCache()
	p := publish.New(c, "inst", nil)
	st, err := p.Publish(apply(t, d, topologytest.Batch(10)))
	if err != nil {
		t.Fatal(err)
	}
	// 10 clusters, CLAs and routes in each of the two views; listeners only for gRPC
	if st.Version != "inst-1" || st.Upstreams != 10 || st.Changes.Of(resource.ClusterType) != 20 ||
		st.Changes.Of(resource.EndpointType) != 20 || st.Changes.Of(resource.ListenerType) != 10 || st.Changes.Of(resource.RouteType) != 20 {
		t.Fatalf("first publication: %+v", st)
	}
	if len(c.Resources(int(translate.Weighted))[resource.ListenerType]) != 0 {
		t.Fatal("Envoy's view holds API listeners")
	}
	for v := range translate.NumRenderings {
		if err := publish.Consistent(c.Resources(int(v))); err != nil {
			t.Fatalf("view %d: %v", v, err)
		}
	}
	clusterBefore := c.Resources(0)[resource.ClusterType][3]

	// an endpoint flip: only that upstream's two CLAs
	var flip topology.Batch
	flip.PutEndpointSet(topologytest.Set(3, 1, map[int]bool{2: true}))
	st, err = p.Publish(apply(t, d, flip))
	if err != nil {
		t.Fatal(err)
	}
	if st.Upstreams != 1 || st.EndpointOnly != 1 || st.Changes.Types() != 1 || st.Changes.Of(resource.EndpointType) != 2 {
		t.Fatalf("endpoint flip published %+v", st)
	}
	if c.Resources(0)[resource.ClusterType][3] != clusterBefore {
		t.Fatal("an endpoint flip replaced a cluster entry")
	}

	// a change of the Upstream object: its cluster, and always its endpoints again
	up := d.Current().Upstream(topology.Key{Namespace: "bench", Name: topologytest.UpstreamName(3)}).Upstream
	up.ConnectTimeout = 2 * time.Second
	var b topology.Batch
	b.PutUpstream(up)
	st, err = p.Publish(apply(t, d, b))
	if err != nil {
		t.Fatal(err)
	}
	if st.Upstreams != 1 || st.EndpointOnly != 0 || st.Changes.Of(resource.ClusterType) != 2 || st.Changes.Of(resource.EndpointType) != 2 {
		t.Fatalf("cluster change published %+v", st)
	}
	if st.Changes.Of(resource.ListenerType) != 0 || st.Changes.Of(resource.RouteType) != 0 {
		t.Fatalf("an unchanged listener or route was re-published: %+v", st)
	}

	// deleting an upstream deletes all of its resources
	var del topology.Batch
	del.DeleteUpstream(up.Key)
	st, err = p.Publish(apply(t, d, del))
	if err != nil {
		t.Fatal(err)
	}
	if st.Changes.Of(resource.ClusterType) != 2 || st.Changes.Of(resource.EndpointType) != 2 || st.Changes.Of(resource.ListenerType) != 1 || st.Changes.Of(resource.RouteType) != 2 {
		t.Fatalf("deletion published %+v", st)
	}
	for v := range translate.NumRenderings {
		res := c.Resources(int(v))
		if len(res[resource.ClusterType]) != 9 || len(res[resource.EndpointType]) != 9 {
			t.Fatalf("view %d holds %d clusters, %d CLAs after a deletion", v, len(res[resource.ClusterType]), len(res[resource.EndpointType]))
		}
		if err := publish.Consistent(res); err != nil {
			t.Fatalf("view %d: %v", v, err)
		}
	}

	// an older snapshot is never published over a newer one
	if st, _ := p.Publish(topology.NewDirectory().Current()); st.Upstreams != 0 || p.LastRevision() != 4 {
		t.Fatalf("an older revision was published: %+v, last %d", st, p.LastRevision())
	}
}

func TestVersionsCarryTheInstance(t *testing.T) {
	a, b := publish.NewInstanceID(), publish.NewInstanceID()
	if a == b || len(a) != 16 {
		t.Fatalf("instance ids %q and %q", a, b)
	}
	if v := publish.New(newCache(), a, nil).Version(7); v != a+"-7" {
		t.Fatalf("version %q", v)
	}
}

// TestFlipAllocs guards the allocations of one endpoint flip from the batch
// to the new CLA bytes in the cache, before any fan-out, on the
// 100k-endpoint topology: they do not grow with the topology.
func TestFlipAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 100k-endpoint topology takes seconds to build")
	}
	for _, upstreams := range []int{500, 5000} {
		d := topology.NewDirectory()
		p := publish.New(newCache(), "inst", nil)
		if _, err := p.Publish(apply(t, d, topologytest.Batch(upstreams))); err != nil {
			t.Fatal(err)
		}
		flips := [2]topology.Batch{topologytest.Flip(upstreams/2, 0), topologytest.Flip(upstreams/2, 1)}
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			i++
			st, err := p.Publish(apply(t, d, flips[i%2]))
			if err != nil || st.Changes.Of(resource.EndpointType) != 2 {
				t.Fatalf("a flip published %+v (%v)", st, err)
			}
		})
		// The race detector's sync.Pool drops pooled objects at random.
		limit := 30.0
		if raceEnabled {
			limit += 16
		}
		t.Logf("%d upstreams: %.0f allocations per flip", upstreams, allocs)
		if allocs > limit {
			t.Errorf("%d upstreams: a flip allocates %.0f times, want at most %.0f", upstreams, allocs, limit)
		}
	}
}

// TestLargePublicationsAsSmallOnes: a publication large enough to be
// translated on every core publishes the same bytes as the same upstreams
// published a few at a time.
func TestLargePublicationsAsSmallOnes(t *testing.T) {
	const n = 700
	full := topologytest.Batch(n)
	one, many := newCache(), newCache()
	if _, err := publish.New(one, "inst", nil).Publish(apply(t, topology.NewDirectory(), full)); err != nil {
		t.Fatal(err)
	}
	d, p := topology.NewDirectory(), publish.New(many, "inst", nil)
	for i := 0; i < n; i += 50 {
		var b topology.Batch
		for u := i; u < i+50; u++ {
			b.PutUpstream(topologytest.Upstream(u))
			for r := range topologytest.Regions {
				b.PutEndpointSet(topologytest.Set(u, r, nil))
			}
		}
		if _, err := p.Publish(apply(t, d, b)); err != nil {
			t.Fatal(err)
		}
	}
	for v := range translate.NumRenderings {
		a, b := one.Resources(int(v)), many.Resources(int(v))
		for typeURL, entries := range a {
			if len(entries) != len(b[typeURL]) {
				t.Fatalf("%s view %d: %d and %d resources", typeURL, v, len(entries), len(b[typeURL]))
			}
			for i, e := range entries {
				if o := b[typeURL][i]; e.Name != o.Name || !bytes.Equal(e.Any.GetValue(), o.Any.GetValue()) {
					t.Fatalf("%s %s differs when published in one large publication", typeURL, e.Name)
				}
			}
		}
	}
}

// TestBeforeApplyPrecedesClients: BeforeApply sees a publication's changes
// while the cache still holds the previous one, so what it updates (the
// load-report catalog) knows a cluster before any client can be sent it;
// OnPublish sees the cache holding it.
func TestBeforeApplyPrecedesClients(t *testing.T) {
	cache := newCache()
	p := publish.New(cache, "order", nil)
	clusters := func() int { return len(cache.Resources(0)[resource.ClusterType]) }
	var before, after []int
	p.BeforeApply = func(st publish.Stats) {
		if st.Snapshot == nil || len(st.Changed) == 0 {
			t.Errorf("BeforeApply: snapshot %v, %d changed", st.Snapshot != nil, len(st.Changed))
		}
		before = append(before, clusters())
	}
	p.OnPublish = func(publish.Stats) { after = append(after, clusters()) }
	dir := topology.NewDirectory()
	for _, n := range []int{2, 5} {
		snap, err := dir.Apply(topologytest.Batch(n))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(snap); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(before, []int{0, 2}) || !slices.Equal(after, []int{2, 5}) {
		t.Errorf("clusters in the cache: at BeforeApply %v, want [0 2]; at OnPublish %v, want [2 5]", before, after)
	}
}
