package kube_test

import (
	"encoding/json"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/topology"
)

// TestLiveReadMatchesTheServedTopology: source.Live, what `controlplane
// explain --kubeconfig` reads, builds from the apiserver alone (no informer
// cache) the same split a running replica serves: an imported Service with
// its Nodes' zones and a Locality weight, EndpointSets, and a conflicting
// Locality set aside as Conflicted.
func TestLiveReadMatchesTheServedTopology(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	createEchoImport(t, ns)
	// a newer Locality of the same group with another weight loses
	late := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-a-late", Namespace: ns}, Spec: v1alpha1.LocalitySpec{
		Upstream: "echo", Weight: new(int64(7)), LocalityID: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-a"},
	}}
	if err := k8s.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	p := startPlane(t, ns, "live")
	served, _ := p.waitExplain(t, ns, "echo", "three imported endpoints", func(u explain.Upstream) (bool, string) {
		n := 0
		for _, pr := range u.Priorities {
			for _, l := range pr.Localities {
				n += len(l.Endpoints)
			}
		}
		return n == 3, fmt.Sprintf("%d endpoints", n)
	})

	snap, rejected, err := source.Live(t.Context(), k8s, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	live := explain.Build(snap, topology.Key{Namespace: ns, Name: "echo"})
	if len(live.Upstreams) != 1 {
		t.Fatalf("the live read explains %d upstreams", len(live.Upstreams))
	}
	got, _ := json.Marshal(live.Upstreams[0])
	want, _ := json.Marshal(served.Upstreams[0])
	if string(got) != string(want) {
		t.Errorf("the live read explains\n%s\nthe replica serves\n%s", got, want)
	}
	ref := topology.ObjectRef{Kind: topology.KindLocality, Key: topology.Key{Namespace: ns, Name: late.Name}}
	if r, ok := rejected[ref]; !ok || r.Reason != v1alpha1.ReasonConflicted {
		t.Errorf("the newer conflicting Locality: %+v (set aside: %v), want Conflicted", r, ok)
	}
	// another namespace's objects are not read
	other, _, err := source.Live(t.Context(), k8s, ns+"-elsewhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(other.Upstreams()); n != 0 {
		t.Errorf("a read limited to another namespace found %d upstreams", n)
	}
}
