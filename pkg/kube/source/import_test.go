package source

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/testkit"
)

func TestAdminStateFromEndpointConditions(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, tc := range []struct {
		name                        string
		ready, serving, terminating *bool
		want                        weights.AdminState
	}{
		{"unset means ready", nil, nil, nil, weights.Ready},
		{"ready", &yes, &yes, &no, weights.Ready},
		{"serving and terminating", &no, &yes, &yes, weights.Draining},
		{"terminating, not serving", &no, &no, &yes, weights.Unavailable},
		{"not ready, not terminating", &no, &yes, &no, weights.Unavailable},
		{"ready but terminating", &yes, &yes, &yes, weights.Draining},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AdminState(discoveryv1.EndpointConditions{Ready: tc.ready, Serving: tc.serving, Terminating: tc.terminating})
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestServicePortByNameOrNumber(t *testing.T) {
	t.Parallel()
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 9090}, {Name: "http", Port: 80}}}}
	for _, tc := range []struct {
		ref  string
		want string
		ok   bool
	}{{"grpc", "grpc", true}, {"80", "http", true}, {"9090", "grpc", true}, {"8080", "", false}, {"admin", "", false}} {
		p, ok := ServicePort(svc, tc.ref)
		if ok != tc.ok || p.Name != tc.want {
			t.Errorf("ServicePort(%q) = %q %v, want %q %v", tc.ref, p.Name, ok, tc.want, tc.ok)
		}
	}
}

func TestImportedSetNamesCannotCollideWithObjects(t *testing.T) {
	t.Parallel()
	n := ImportedSetName("checkout", "checkout-svc", "eu-west", "eu-west-1a")
	if n != "checkout:checkout-svc:eu-west:eu-west-1a" {
		t.Fatalf("name %q", n)
	}
}

func TestServiceAffinityFromTrafficDistribution(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		td   *string
		want *topology.Affinity
	}{
		{nil, nil},
		{new(""), nil},
		{new(corev1.ServiceTrafficDistributionPreferClose),
			&topology.Affinity{Mode: affinity.PreferSameZone, Origin: "Service shop/checkout trafficDistribution PreferClose"}},
		{new(corev1.ServiceTrafficDistributionPreferSameZone),
			&topology.Affinity{Mode: affinity.PreferSameZone, Origin: "Service shop/checkout trafficDistribution PreferSameZone"}},
		// the closest level Poise places endpoints at is the zone
		{new(corev1.ServiceTrafficDistributionPreferSameNode),
			&topology.Affinity{Mode: affinity.PreferSameZone, Origin: "Service shop/checkout trafficDistribution PreferSameNode"}},
		// a value a newer Kubernetes may add is not followed, and says so
		{new("PreferSameRack"), &topology.Affinity{Mode: affinity.None, Origin: "Service shop/checkout trafficDistribution PreferSameRack"}},
	} {
		name := "absent"
		if tc.td != nil {
			name = fmt.Sprintf("%q", *tc.td)
		}
		t.Run(name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}, Spec: corev1.ServiceSpec{TrafficDistribution: tc.td}}
			if got := ServiceAffinity(svc); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestServicePreferenceUnlessTheUpstreamSetsAMode: through the informer
// cache, an importing Upstream without spec.localityAffinity follows its
// Service's trafficDistribution, and follows it when it changes; one that
// sets a mode, None included, keeps it.
func TestServicePreferenceUnlessTheUpstreamSetsAMode(t *testing.T) {
	t.Parallel()
	fx := newChurnFixture(t, 2)
	ctx := context.Background()
	setTD := func(svcName string, td *string) {
		t.Helper()
		svc := &corev1.Service{}
		if err := fx.c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: svcName}, svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.TrafficDistribution = td
		fx.api.update(svc)
	}
	affinityOf := func(name string) *topology.Affinity {
		u := fx.s.Dir.Current().Upstream(topology.Key{Namespace: "bench", Name: name})
		if u == nil {
			t.Fatalf("no upstream %s", name)
		}
		return u.Upstream.Affinity
	}
	// wait until the handlers marked each Upstream the updates change (a
	// handler runs after the cache holds the new object), then apply; each
	// Upstream is marked by one update at a time, so no mark is early
	settle := func(want ...topology.ObjectRef) {
		t.Helper()
		testkit.EventuallyEvery(t, 5*time.Second, time.Millisecond, "the updates marked", func() (bool, string) {
			dirty := fx.s.dirtyNow()
			return !slices.ContainsFunc(want, func(r topology.ObjectRef) bool { _, ok := dirty[r]; return !ok }),
				fmt.Sprintf("marked %v, want %v", dirty, want)
		})
		fx.s.sync(ctx)
	}

	fx.ups[1].Spec.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityNone}
	fx.ups[1].Generation++
	fx.api.update(fx.ups[1])
	settle(upstreamRef("imp-1"))
	setTD("svc-0", new(corev1.ServiceTrafficDistributionPreferClose))
	setTD("svc-1", new(corev1.ServiceTrafficDistributionPreferClose))
	settle(upstreamRef("imp-0"), upstreamRef("imp-1"))
	rev := fx.s.Dir.Current().Upstream(topology.Key{Namespace: "bench", Name: "imp-0"}).ClusterRevision
	if got, want := affinityOf("imp-0"), (&topology.Affinity{Mode: affinity.PreferSameZone, Origin: "Service bench/svc-0 trafficDistribution PreferClose"}); !reflect.DeepEqual(got, want) {
		t.Errorf("imp-0 follows its Service: %+v, want %+v", got, want)
	}
	if got, want := affinityOf("imp-1"), (&topology.Affinity{Mode: affinity.None, Origin: topology.OriginLocalityAffinity}); !reflect.DeepEqual(got, want) {
		t.Errorf("imp-1 sets None: %+v, want %+v", got, want)
	}

	setTD("svc-0", nil)
	settle(upstreamRef("imp-0"))
	if got := affinityOf("imp-0"); got != nil {
		t.Errorf("imp-0 after its Service dropped trafficDistribution: %+v, want none", got)
	}
	if now := fx.s.Dir.Current().Upstream(topology.Key{Namespace: "bench", Name: "imp-0"}).ClusterRevision; now <= rev {
		t.Errorf("imp-0's cluster revision stayed %d: the publisher would not translate it again", now)
	}
}

// An imported endpoint's generation is its targetRef's uid; its hash key
// the Pod's name when the Upstream asks for it, and only for a Pod.
func TestEndpointIdentity(t *testing.T) {
	t.Parallel()
	pod := &corev1.ObjectReference{Kind: "Pod", Name: "db-0", UID: "uid-a"}
	for _, tc := range []struct {
		name         string
		ref          *corev1.ObjectReference
		podName      bool
		key, wantGen string
	}{
		{"no targetRef", nil, true, "", ""},
		{"a Pod, hash keys not asked for", pod, false, "", "uid-a"},
		{"a Pod, hashKeyFrom PodName", pod, true, "db-0", "uid-a"},
		{"not a Pod", &corev1.ObjectReference{Kind: "VirtualMachine", Name: "vm-1", UID: "uid-v"}, true, "", "uid-v"},
		{"a uid past the bound is cut to it", &corev1.ObjectReference{Kind: "Pod", Name: "p", UID: types.UID(strings.Repeat("u", 200))}, true, "p", strings.Repeat("u", 128)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, gen := endpointIdentity(tc.ref, tc.podName)
			if key != tc.key || gen != tc.wantGen {
				t.Errorf("endpointIdentity = %q, %q; want %q, %q", key, gen, tc.key, tc.wantGen)
			}
		})
	}
}
