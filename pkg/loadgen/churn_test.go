package loadgen

import (
	"context"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestKubeChurn: the churn finds the Upstreams that import a Service, and
// each flip changes the ready condition of exactly one of the first
// endpoints of the Service's slice, through 2^m states that all differ.
func TestKubeChurn(t *testing.T) {
	ctx := context.Background()
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-x1", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
		}}
	upstream := func(name, service string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "poise.dev/v1alpha1", "kind": "Upstream",
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{}}}
		if service != "" {
			_ = unstructured.SetNestedField(u.Object, service, "spec", "endpointsFrom", "service", "name")
		}
		return u
	}
	kube := fake.NewClientset(slice)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{upstreamsGVR: "UpstreamList"},
		upstream("web", "web"), upstream("files-only", ""), upstream("gone", "gone"))
	c, err := NewKubeChurn(ctx, kube, dyn, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Clusters(); len(got) != 1 || got[0] != "shop/web" {
		t.Fatalf("clusters %q, want [shop/web]", got)
	}
	seen := map[[2]bool]bool{{true, true}: true}
	prev := [2]bool{true, true}
	for i := range 4 {
		if err := c.Flip(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := kube.DiscoveryV1().EndpointSlices("shop").Get(ctx, "web-x1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := [2]bool{*s.Endpoints[0].Conditions.Ready, *s.Endpoints[1].Conditions.Ready}
		if (now[0] != prev[0]) == (now[1] != prev[1]) {
			t.Errorf("flip %d: ready %v after %v, want exactly one changed", i+1, now, prev)
		}
		if i < 3 && seen[now] {
			t.Errorf("flip %d: ready %v again within 2^2 flips", i+1, now)
		}
		seen[now], prev = true, now
	}
	if err := c.Flip(ctx, 1); err == nil {
		t.Error("a flip of a cluster the churn does not have passed")
	}
	// An update that fails is Flush's error, and every Flip's after.
	if err := kube.DiscoveryV1().EndpointSlices("shop").Delete(ctx, "web-x1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flip(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err == nil || !strings.Contains(err.Error(), "web-x1") {
		t.Errorf("flush after the slice was deleted: %v, want its update's error", err)
	}
	if err := c.Flip(ctx, 0); err == nil {
		t.Error("a flip after a failed update passed")
	}
	if _, err := NewKubeChurn(ctx, kube, dyn, "other"); err == nil {
		t.Error("a namespace without Upstreams that import a Service gave a churn")
	}
}
