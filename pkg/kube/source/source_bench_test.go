package source

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/test/testkit"
)

// churnFixture is n Upstreams importing a Service each (one EndpointSlice
// of 7 endpoints, all on node i%3) and n Upstreams with one EndpointSet of 7
// endpoints, in one namespace, behind a real informer cache.
type churnFixture struct {
	api    *fakeAPI
	s      *Source
	c      cache.Cache
	slices []*discoveryv1.EndpointSlice
	sets   []*v1alpha1.EndpointSet
	ups    []*v1alpha1.Upstream // the importing ones
	nodes  []*corev1.Node
}

func newChurnFixture(tb testing.TB, n int) *churnFixture {
	tb.Helper()
	const ns = "bench"
	fx := &churnFixture{}
	var objs []client.Object
	for z := range 3 {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", z), Labels: map[string]string{
			LabelRegion: "r", LabelZone: fmt.Sprintf("z%d", z),
		}}}
		fx.nodes = append(fx.nodes, node)
		objs = append(objs, node)
	}
	for i := range n {
		svc := fmt.Sprintf("svc-%d", i)
		up := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("imp-%d", i), Namespace: ns, Generation: 1}, Spec: v1alpha1.UpstreamSpec{
			EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: svc, Port: intstr.FromString("grpc")}},
		}}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc + "-0", Namespace: ns, Generation: 1, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(int32(9090))}},
		}
		plain := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("u-%d", i), Namespace: ns, Generation: 1}}
		set := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("u-%d-a", i), Namespace: ns, Generation: 1}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: plain.Name, Locality: v1alpha1.LocalityID{Region: "r", Zone: "z0"},
		}}
		for e := range 7 {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, e+1)},
				NodeName:   new(fx.nodes[i%3].Name),
				Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			})
			set.Spec.Endpoints = append(set.Spec.Endpoints, v1alpha1.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", 100+i/250, i%250, e+1), Port: 8080})
		}
		fx.slices, fx.sets, fx.ups = append(fx.slices, sl), append(fx.sets, set), append(fx.ups, up)
		objs = append(objs, up, sl, plain, set, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 80}},
		}})
	}
	fx.api, fx.s, fx.c = newFakeCache(tb, objs...)
	if got := fx.s.Dir.Current().NumUpstreams(); got != 2*n {
		tb.Fatalf("%d upstreams in the topology, want %d", got, 2*n)
	}
	select { // the first sync's kick
	case <-fx.s.kick:
	default:
	}
	return fx
}

// BenchmarkSliceEvent: one EndpointSlice endpoint flips ready; the source
// takes the informer's event and applies the batch. It should cost the same
// whatever the number of Services.
func BenchmarkSliceEvent(b *testing.B) {
	for _, n := range []int{20, 200, 2000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			fx := newChurnFixture(b, n)
			ctx := context.Background()
			sl := fx.slices[n/2]
			for i := 0; b.Loop(); i++ {
				sl.Endpoints[0].Conditions.Ready = new(i%2 == 1)
				sl.Generation++
				fx.api.update(sl)
				<-fx.s.kick
				fx.s.sync(ctx)
			}
		})
	}
}

// BenchmarkSetHealthEvent: a prober flips one endpoint's health in an
// EndpointSet's status.
func BenchmarkSetHealthEvent(b *testing.B) {
	for _, n := range []int{20, 200, 2000} {
		b.Run(fmt.Sprintf("upstreams=%d", 2*n), func(b *testing.B) {
			fx := newChurnFixture(b, n)
			ctx := context.Background()
			set := fx.sets[n/2]
			for i := 0; b.Loop(); i++ {
				set.Status.Health = []v1alpha1.EndpointHealth{{Address: set.Spec.Endpoints[i%7].Address, Port: 8080, Probe: v1alpha1.ProbeUnhealthy}}
				fx.api.update(set)
				<-fx.s.kick
				fx.s.sync(ctx)
			}
		})
	}
}

// BenchmarkNodeHeartbeat: a kubelet updates its Node's status (no label
// changes); the source takes the informer's event and applies what it marked.
func BenchmarkNodeHeartbeat(b *testing.B) {
	for _, n := range []int{20, 200, 2000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			fx := newChurnFixture(b, n)
			ctx := context.Background()
			seen := make(chan struct{}, 1)
			inf, err := fx.c.GetInformer(ctx, &corev1.Node{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) { seen <- struct{}{} }}); err != nil {
				b.Fatal(err)
			}
			node := fx.nodes[0]
			for i := 0; b.Loop(); i++ {
				node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Unix(int64(i), 0)}}
				fx.api.update(node)
				<-seen
				fx.s.sync(ctx)
			}
		})
	}
}

// BenchmarkSourceBatch: 100 EndpointSets of 1,200 Upstreams change health
// (what 1,000 changes/s bring in one 100ms window), their events arrive
// through the informer, and the source applies them as one batch. The
// apiserver's JSON decoding is not included: the fake watch hands over
// objects.
func BenchmarkSourceBatch(b *testing.B) {
	const changes = 100
	fx := newChurnFixture(b, 600)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		for j := range changes {
			set := fx.sets[(i*changes+j)%len(fx.sets)]
			set.Status.Health = []v1alpha1.EndpointHealth{{Address: set.Spec.Endpoints[i%7].Address, Port: 8080, Probe: v1alpha1.ProbeUnhealthy}}
			fx.api.update(set)
		}
		testkit.EventuallyEvery(b, 10*time.Second, 20*time.Microsecond, "the changes marked", func() (bool, string) {
			return len(fx.s.dirtyNow()) >= changes, ""
		})
		fx.s.sync(ctx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*changes), "ns/change")
}
