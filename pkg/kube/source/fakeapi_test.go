package source

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// fakeAPI stands in for the apiserver behind controller-runtime's real
// informer cache: each informer lists the objects given at the start and
// then watches events the test sends. The Source reads that cache and gets
// those events through its registered handlers, as in a cluster.
type fakeAPI struct {
	scheme *runtime.Scheme
	mu     sync.Mutex
	cond   *sync.Cond
	objs   map[reflect.Type][]runtime.Object
	watch  map[reflect.Type]*watch.FakeWatcher
	rv     int
}

// fakeLW lists and watches one kind; it declines the WatchList protocol, so
// the reflector lists, then watches.
type fakeLW struct {
	api *fakeAPI
	typ reflect.Type
	obj runtime.Object
}

func (lw *fakeLW) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *fakeLW) List(metav1.ListOptions) (runtime.Object, error) {
	gvk, err := apiutil.GVKForObject(lw.obj, lw.api.scheme)
	if err != nil {
		return nil, err
	}
	list, err := lw.api.scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	lw.api.mu.Lock()
	defer lw.api.mu.Unlock()
	var items []runtime.Object
	for _, o := range lw.api.objs[lw.typ] {
		items = append(items, o.DeepCopyObject())
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	list.(metav1.ListInterface).SetResourceVersion(strconv.Itoa(lw.api.rv))
	return list, nil
}

func (lw *fakeLW) Watch(metav1.ListOptions) (watch.Interface, error) {
	lw.api.mu.Lock()
	defer lw.api.mu.Unlock()
	w := watch.NewFakeWithChanSize(1024, false)
	lw.api.watch[lw.typ] = w
	lw.api.cond.Broadcast()
	return w, nil
}

// newFakeCache starts an informer cache over objs, registers the source's
// handlers on it and runs the first sync.
func newFakeCache(tb testing.TB, objs ...client.Object) (*fakeAPI, *Source, cache.Cache) {
	tb.Helper()
	scheme, err := Scheme()
	if err != nil {
		tb.Fatal(err)
	}
	api := &fakeAPI{scheme: scheme, objs: map[reflect.Type][]runtime.Object{}, watch: map[reflect.Type]*watch.FakeWatcher{}, rv: 1}
	api.cond = sync.NewCond(&api.mu)
	for _, o := range objs {
		o.SetResourceVersion("1")
		api.objs[reflect.TypeOf(o)] = append(api.objs[reflect.TypeOf(o)], o)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		obj   client.Object
		scope meta.RESTScope
	}{
		{&v1alpha1.Upstream{}, meta.RESTScopeNamespace}, {&v1alpha1.Locality{}, meta.RESTScopeNamespace},
		{&v1alpha1.EndpointSet{}, meta.RESTScopeNamespace}, {&v1alpha1.SpatialDomain{}, meta.RESTScopeNamespace},
		{&v1alpha1.Partition{}, meta.RESTScopeNamespace}, {&corev1.Service{}, meta.RESTScopeNamespace},
		{&discoveryv1.EndpointSlice{}, meta.RESTScopeNamespace}, {&corev1.Node{}, meta.RESTScopeRoot},
	} {
		gvk, err := apiutil.GVKForObject(k.obj, scheme)
		if err != nil {
			tb.Fatal(err)
		}
		mapper.Add(gvk, k.scope)
	}
	c, err := cache.New(&rest.Config{Host: "http://127.0.0.1:1"}, cache.Options{
		Scheme: scheme, Mapper: mapper, HTTPClient: http.DefaultClient,
		NewInformer: func(_ toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(&fakeLW{api: api, typ: reflect.TypeOf(obj), obj: obj}, obj, resync, idx)
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	s := &Source{Reader: c, Dir: topology.NewDirectory()}
	if err := s.Register(ctx, c); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		tb.Fatal("the informer cache did not sync")
	}
	if err := s.InitialSync(ctx); err != nil {
		tb.Fatal(err)
	}
	return api, s, c
}

// update sends a MODIFIED event for obj, with a new resource version.
func (a *fakeAPI) update(obj client.Object) {
	a.mu.Lock()
	typ := reflect.TypeOf(obj)
	for a.watch[typ] == nil {
		a.cond.Wait()
	}
	a.rv++
	obj.SetResourceVersion(strconv.Itoa(a.rv))
	w := a.watch[typ]
	a.mu.Unlock()
	w.Modify(obj.DeepCopyObject())
}

// dirty returns the objects the source has marked and not yet synced.
func (s *Source) dirtyNow() map[topology.ObjectRef]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[topology.ObjectRef]struct{}{}
	for k := range s.dirty {
		out[k] = struct{}{}
	}
	return out
}

func init() {
	// controller-runtime warns, with a stack, when its logger is never set
	ctrllog.SetLogger(logr.Discard())
}
