package source

import (
	"context"
	"fmt"
	"log/slog"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
)

// Live reads the topology that is in a cluster now, once, through r, a
// plain API client (no informer cache): the same conversion, Service
// imports and conflict rules as the running source, so `controlplane
// explain --kubeconfig` shows what a replica would serve. namespace, when
// set, limits it as --namespace limits the source. Objects the source would
// set aside are returned with why; an object that cannot be read fails the
// whole read.
func Live(ctx context.Context, r client.Reader, namespace string, log *slog.Logger) (*topology.Snapshot, map[topology.ObjectRef]conditions.Rejection, error) {
	s := &Source{Reader: liveReader{r: r, namespace: namespace}, Dir: topology.NewDirectory(), Log: log}
	s.init()
	if err := s.InitialSync(ctx); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	unread, err := len(s.dirty), s.readErr
	s.mu.Unlock()
	if unread > 0 {
		return nil, nil, fmt.Errorf("%d objects could not be read: %w", unread, err)
	}
	return s.Dir.Current(), s.Rejections(), nil
}

// liveReader reads the API directly as the source reads its informer
// cache: lists stay in the watched namespace, and the EndpointSlices of a
// Service, which the cache finds by an index of its own, are found by the
// label Kubernetes gives them.
type liveReader struct {
	r         client.Reader
	namespace string
}

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return l.r.Get(ctx, key, obj, opts...)
}

func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	if lo.FieldSelector != nil {
		if svc, ok := lo.FieldSelector.RequiresExactMatch(sliceServiceIndex); ok {
			lo.FieldSelector = nil
			lo.LabelSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc})
		}
	}
	if l.namespace != "" && lo.Namespace == "" {
		lo.Namespace = l.namespace // only namespaced kinds are listed; Nodes are read one by one
	}
	return l.r.List(ctx, list, lo)
}
