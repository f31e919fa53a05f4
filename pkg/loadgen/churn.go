package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Churner changes clusters' endpoints, one cluster at a time.
type Churner interface {
	// Clusters are the published names of the clusters it changes; Flip's
	// u indexes them.
	Clusters() []string
	// Flip changes cluster u's endpoints once: the content of its
	// ClusterLoadAssignment differs from before for 2^4 flips in a row.
	Flip(ctx context.Context, u int) error
}

// Flusher is a Churner whose Flip may return before the change is
// written: Flush waits for every change flipped so far.
type Flusher interface {
	Flush(ctx context.Context) error
}

// FileChurn flips the upstreams of a generated manifest tree, each flip an
// atomic rename of the upstream's file.
type FileChurn struct{ Tree *Tree }

// Clusters are the tree's cluster names.
func (c FileChurn) Clusters() []string {
	out := make([]string, c.Tree.N)
	for u := range out {
		out[u] = ClusterName(u)
	}
	return out
}

// Flip rewrites upstream u's file.
func (c FileChurn) Flip(_ context.Context, u int) error { return c.Tree.Flip(u) }

// upstreamsGVR is poise.dev/v1alpha1 Upstreams.
var upstreamsGVR = schema.GroupVersionResource{Group: "poise.dev", Version: "v1alpha1", Resource: "upstreams"}

// maxListed bounds the Upstreams and EndpointSlices KubeChurn lists.
const maxListed = 100000

// KubeChurn flips endpoints of the EndpointSlices of Services that
// Upstreams import (spec.endpointsFrom.service), through the apiserver: a
// flip sets the ready condition of the first (up to 4) endpoints of the
// Service's first slice to the bits of a Gray code, as the file tree's
// probes do.
type KubeChurn struct {
	client kubernetes.Interface
	names  []string // published cluster names: NAMESPACE/UPSTREAM
	slices []sliceRef
	// last is each slice as the last update returned it: the next flip
	// updates it without reading it again (a conflict reads it).
	last     []*discoveryv1.EndpointSlice
	flips    []uint32
	attempts atomic.Int64 // updates tried, conflicts included

	// Flips are written by kubeWriters goroutines, cluster u's always by
	// writer u mod kubeWriters, so one cluster's flips stay in order while
	// others' overlap (one update is a round trip to the apiserver).
	start   sync.Once
	queues  []chan int
	pending sync.WaitGroup
	errMu   sync.Mutex
	err     error
}

// kubeWriters is how many updates KubeChurn has in flight at most.
const kubeWriters = 8

type sliceRef struct{ namespace, name string }

// NewKubeChurn finds, in namespace (every namespace when empty), each
// Upstream that imports a Service with EndpointSlices, and flips those.
func NewKubeChurn(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, namespace string) (*KubeChurn, error) {
	ups, err := dyn.Resource(upstreamsGVR).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: maxListed})
	if err != nil {
		return nil, fmt.Errorf("list Upstreams in namespace %q: %w", namespace, err)
	}
	c := &KubeChurn{client: kube}
	for _, u := range ups.Items {
		svc, _, _ := unstructured.NestedString(u.Object, "spec", "endpointsFrom", "service", "name")
		if svc == "" {
			continue
		}
		list, err := kube.DiscoveryV1().EndpointSlices(u.GetNamespace()).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + svc, Limit: maxListed})
		if err != nil {
			return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s (Upstream %s): %w", u.GetNamespace(), svc, u.GetName(), err)
		}
		i := slices.IndexFunc(list.Items, func(s discoveryv1.EndpointSlice) bool { return len(s.Endpoints) > 0 })
		if i < 0 {
			continue
		}
		c.names = append(c.names, u.GetNamespace()+"/"+u.GetName())
		c.slices = append(c.slices, sliceRef{u.GetNamespace(), list.Items[i].Name})
	}
	if len(c.names) == 0 {
		return nil, fmt.Errorf("no Upstream in namespace %q imports a Service with endpoints (spec.endpointsFrom.service)", namespace)
	}
	c.flips = make([]uint32, len(c.names))
	c.last = make([]*discoveryv1.EndpointSlice, len(c.names))
	return c, nil
}

// Clusters are the Upstreams' cluster names.
func (c *KubeChurn) Clusters() []string { return c.names }

// Attempts is how many updates the flips tried, conflicts included.
func (c *KubeChurn) Attempts() int { return int(c.attempts.Load()) }

// maxConflicts bounds the retries of one flip whose slice changed meanwhile.
const maxConflicts = 5

// Flip queues an update of cluster u's slice: its first endpoints' ready
// conditions follow the Gray code of the flip count. It returns the error
// of an earlier update, if one failed; Flush waits for the queued ones.
func (c *KubeChurn) Flip(ctx context.Context, u int) error {
	if u < 0 || u >= len(c.names) {
		return fmt.Errorf("flip cluster %d: %d clusters", u, len(c.names))
	}
	if err := c.failed(); err != nil {
		return err
	}
	c.start.Do(func() {
		c.queues = make([]chan int, kubeWriters)
		for i := range c.queues {
			q := make(chan int, 64)
			c.queues[i] = q
			go func() {
				for {
					select {
					case u := <-q:
						if err := c.update(ctx, u); err != nil {
							c.errMu.Lock()
							if c.err == nil {
								c.err = err
							}
							c.errMu.Unlock()
						}
						c.pending.Done()
					case <-ctx.Done(): // the run is over; Flush sees ctx end
						return
					}
				}
			}()
		}
	})
	c.pending.Add(1)
	select {
	case c.queues[u%kubeWriters] <- u:
		return nil
	case <-ctx.Done():
		c.pending.Done()
		return ctx.Err()
	}
}

// Flush waits until every queued update is written and returns the first
// that failed.
func (c *KubeChurn) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return c.failed()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *KubeChurn) failed() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// update writes cluster u's next flip.
func (c *KubeChurn) update(ctx context.Context, u int) error {
	c.flips[u]++
	ref := c.slices[u]
	api := c.client.DiscoveryV1().EndpointSlices(ref.namespace)
	for range maxConflicts {
		s := c.last[u]
		if s == nil {
			var err error
			if s, err = api.Get(ctx, ref.name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("EndpointSlice %s/%s: %w", ref.namespace, ref.name, err)
			}
		}
		// Over m endpoints the last 2^m states differ, each one flip apart.
		m := min(len(s.Endpoints), grayBits)
		bits := gray(c.flips[u] % (1 << m))
		for i := range m {
			ready := bits&(1<<i) == 0
			s.Endpoints[i].Conditions.Ready = &ready
		}
		c.attempts.Add(1)
		got, err := api.Update(ctx, s, metav1.UpdateOptions{})
		if err == nil {
			c.last[u] = got
			return nil
		}
		c.last[u] = nil // read it again
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("update EndpointSlice %s/%s: %w", ref.namespace, ref.name, err)
		}
	}
	return errors.New("update EndpointSlice " + ref.namespace + "/" + ref.name + ": it kept changing under the update")
}
