package source

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/test/testkit"
)

func upstreamRef(name string) topology.ObjectRef {
	return topology.ObjectRef{Kind: topology.KindUpstream, Key: topology.Key{Namespace: "bench", Name: name}}
}

// TestUpdatesMarkOnlyWhatTheyChange sends, on each informer, an update that
// changes nothing the source reads and then one that does; only the second
// may mark anything, and only what it changes. Events of one informer reach
// the handlers in order, so the first has been handled once the second is
// marked.
func TestUpdatesMarkOnlyWhatTheyChange(t *testing.T) {
	t.Parallel()
	fx := newChurnFixture(t, 6)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		unchanged func() // an update the source must ignore
		changed   func() // an update it must not
		want      []topology.ObjectRef
	}{{
		name: "Upstream: a status patch, then a spec change",
		unchanged: func() {
			fx.ups[0].Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}}
			fx.api.update(fx.ups[0])
		},
		changed: func() {
			fx.ups[1].Spec.ConnectTimeout = &metav1.Duration{Duration: 3 * time.Second}
			fx.ups[1].Generation++
			fx.api.update(fx.ups[1])
		},
		want: []topology.ObjectRef{upstreamRef("imp-1")},
	}, {
		name: "EndpointSet: the status writer's conditions, then a prober's health",
		unchanged: func() {
			fx.sets[0].Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}}
			fx.api.update(fx.sets[0])
		},
		changed: func() {
			fx.sets[1].Status.Health = []v1alpha1.EndpointHealth{{Address: fx.sets[1].Spec.Endpoints[0].Address, Port: 8080, Probe: v1alpha1.ProbeUnhealthy}}
			fx.api.update(fx.sets[1])
		},
		want: []topology.ObjectRef{{Kind: topology.KindEndpointSet, Key: topology.Key{Namespace: "bench", Name: "u-1-a"}}},
	}, {
		name: "Node: a heartbeat, then a zone label; only the Upstreams with endpoints on that node",
		unchanged: func() {
			fx.nodes[0].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
			fx.nodes[0].Labels["kubernetes.io/hostname"] = "node-0"
			fx.api.update(fx.nodes[0])
		},
		changed: func() {
			fx.nodes[1].Labels[LabelZone] = "z9"
			fx.api.update(fx.nodes[1])
		},
		want: []topology.ObjectRef{upstreamRef("imp-1"), upstreamRef("imp-4")},
	}, {
		name: "Service: a label, then a port",
		unchanged: func() {
			svc := &corev1.Service{}
			if err := fx.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "svc-0"}, svc); err != nil {
				t.Fatal(err)
			}
			svc.Labels = map[string]string{"team": "a"}
			fx.api.update(svc)
		},
		changed: func() {
			svc := &corev1.Service{}
			if err := fx.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "svc-1"}, svc); err != nil {
				t.Fatal(err)
			}
			svc.Spec.Ports[0].Port = 81
			fx.api.update(svc)
		},
		want: []topology.ObjectRef{upstreamRef("imp-1")},
	}, {
		name: "Service: a selector, then its trafficDistribution",
		unchanged: func() {
			svc := &corev1.Service{}
			if err := fx.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "svc-0"}, svc); err != nil {
				t.Fatal(err)
			}
			svc.Spec.Selector = map[string]string{"app": "a"}
			fx.api.update(svc)
		},
		changed: func() {
			svc := &corev1.Service{}
			if err := fx.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "svc-3"}, svc); err != nil {
				t.Fatal(err)
			}
			svc.Spec.TrafficDistribution = new(corev1.ServiceTrafficDistributionPreferClose)
			fx.api.update(svc)
		},
		want: []topology.ObjectRef{upstreamRef("imp-3")},
	}, {
		name: "EndpointSlice: an annotation, then an endpoint's conditions",
		unchanged: func() {
			fx.slices[0].Annotations = map[string]string{"note": "x"}
			fx.api.update(fx.slices[0])
		},
		changed: func() {
			fx.slices[1].Endpoints[0].Conditions.Ready = new(false)
			fx.api.update(fx.slices[1])
		},
		want: []topology.ObjectRef{upstreamRef("imp-1")},
	}, {
		name:      "EndpointSlice: moved from one Service to another; both import again",
		unchanged: func() {},
		changed: func() {
			fx.slices[2].Labels["kubernetes.io/service-name"] = "svc-5"
			fx.api.update(fx.slices[2])
		},
		want: []topology.ObjectRef{upstreamRef("imp-2"), upstreamRef("imp-5")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.unchanged()
			tc.changed()
			testkit.Eventually(t, 5*time.Second, "the changed update marked", func() (bool, string) {
				got := fx.s.dirtyNow()
				return len(got) >= len(tc.want), fmt.Sprintf("marked %v, want %v", slices.Collect(maps.Keys(got)), tc.want)
			})
			// an update marks in up to two steps, and nothing says a handler
			// is done: a mark past what is wanted would show within a
			// quiet moment, looked at throughout
			marked := func() []topology.ObjectRef {
				return slices.SortedFunc(maps.Keys(fx.s.dirtyNow()), func(a, b topology.ObjectRef) int { return a.Key.Compare(b.Key) })
			}
			quiet := time.Now().Add(20 * time.Millisecond)
			testkit.EventuallyEvery(t, 5*time.Second, time.Millisecond, "a quiet moment past the marks", func() (bool, string) {
				if keys := marked(); !slices.Equal(keys, tc.want) {
					t.Fatalf("marked %v, want %v", keys, tc.want)
				}
				return !time.Now().Before(quiet), ""
			})
			fx.s.sync(ctx)
		})
	}

	// what the marks led to: imp-1's endpoints moved to zone z9 with their
	// node, and the moved slice's endpoints left imp-2 for imp-5
	snap := fx.s.Dir.Current()
	endpoints := func(name string) (n int, zones []string) {
		u := snap.Upstream(topology.Key{Namespace: "bench", Name: name})
		if u == nil {
			t.Fatalf("no upstream %s", name)
		}
		for _, g := range u.Groups {
			zones = append(zones, g.Locality.Zone)
		}
		return len(u.Endpoints), zones
	}
	if n, zones := endpoints("imp-1"); n != 7 || !slices.Equal(zones, []string{"z9"}) {
		t.Errorf("imp-1: %d endpoints in zones %v, want 7 in z9", n, zones)
	}
	if n, _ := endpoints("imp-2"); n != 0 {
		t.Errorf("imp-2: %d endpoints after its only slice moved away, want 0", n)
	}
	if n, _ := endpoints("imp-5"); n != 14 {
		t.Errorf("imp-5: %d endpoints, want its own 7 and the moved slice's 7", n)
	}
	if m := snap.Upstream(topology.Key{Namespace: "bench", Name: "imp-3"}).Upstream.ModeOf(); m != affinity.PreferSameZone {
		t.Errorf("imp-3: mode %v after its Service turned to PreferClose, want PreferSameZone", m)
	}
}

// TestDebounceQuietWithLimit: a lone change is applied after a pause of a
// tenth of the debounce; a stream of changes is applied at least once per
// debounce.
func TestDebounceQuietWithLimit(t *testing.T) {
	t.Parallel()
	fx := newChurnFixture(t, 2)
	fx.s.Debounce = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fx.s.Start(ctx) }()
	rev := func() uint64 { return fx.s.Dir.Current().Revision }
	flip := func(i int) {
		set := fx.sets[0]
		set.Status.Health = []v1alpha1.EndpointHealth{{Address: set.Spec.Endpoints[i%7].Address, Port: 8080, Probe: v1alpha1.ProbeUnhealthy}}
		fx.api.update(set)
	}
	wait := func(after uint64, within time.Duration) time.Duration {
		t.Helper()
		return testkit.EventuallyEvery(t, within, time.Millisecond, "a batch", func() (bool, string) {
			return rev() > after, fmt.Sprintf("revision %d", rev())
		})
	}

	before := rev()
	flip(1)
	if took := wait(before, 2*time.Second); took >= 400*time.Millisecond {
		t.Errorf("a lone change took %v to apply; the quiet period is 50ms", took)
	}
	// a change every 10ms never leaves 50ms of quiet: batches still come
	before = rev()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 2; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				flip(i)
			}
		}
	}()
	took := wait(before, 3*time.Second)
	close(stop)
	<-done
	t.Logf("under a change every 10ms, the first batch came after %v (limit 500ms)", took)
}
