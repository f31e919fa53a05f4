package source

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// TestOldestLocalityWins: of two Localities of one group that set
// different weights, the older (by creationTimestamp, then name) stays in
// the topology and only the newer is rejected as Conflicted, naming the
// winner, whichever of them changed and whatever the order they arrived.
func TestOldestLocalityWins(t *testing.T) {
	t.Parallel()
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	locality := func(name string, created metav1.Time, weight int64) *v1alpha1.Locality {
		return &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: created, Generation: 1},
			Spec: v1alpha1.LocalitySpec{Upstream: "u", LocalityID: v1alpha1.LocalityID{Zone: "a"}, Weight: new(weight), Priority: new(int32(0))}}
	}
	ref := func(name string) topology.ObjectRef {
		return topology.ObjectRef{Kind: topology.KindLocality, Key: topology.Key{Namespace: "ns", Name: name}}
	}
	for _, tc := range []struct {
		name string
		// first are applied in one batch, then second (updates or creations) in the next
		first, second []*v1alpha1.Locality
		winner        string
		weight        uint64
		loser         string
	}{
		{name: "both in one batch: the older wins", first: []*v1alpha1.Locality{locality("b", t0, 3), locality("a", t1, 2)},
			winner: "b", weight: 3, loser: "a"},
		{name: "a newcomer conflicts with a served one", first: []*v1alpha1.Locality{locality("z", t0, 3)},
			second: []*v1alpha1.Locality{locality("a", t1, 2)}, winner: "z", weight: 3, loser: "a"},
		{name: "the older changes its weight: the newer, served until then, goes",
			first:  []*v1alpha1.Locality{locality("old", t0, 2), locality("new", t1, 2)},
			second: []*v1alpha1.Locality{locality("old", t0, 5)}, winner: "old", weight: 5, loser: "new"},
		{name: "same creation time: the name decides", first: []*v1alpha1.Locality{locality("y", t0, 3), locality("x", t0, 2)},
			winner: "x", weight: 2, loser: "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scheme, err := Scheme()
			if err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
				&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u", Generation: 1}},
				&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Generation: 1}, Spec: v1alpha1.EndpointSetSpec{
					Upstream: "u", Locality: v1alpha1.LocalityID{Zone: "a"}, Endpoints: []v1alpha1.Endpoint{{Address: "10.0.0.1", Port: 80}}}},
			).Build()
			src := &Source{Reader: c, Dir: topology.NewDirectory()}
			src.mu.Lock()
			src.init()
			src.mu.Unlock()
			src.mark(topology.KindUpstream, &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u"}})
			src.mark(topology.KindEndpointSet, &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}})
			for _, batch := range [][]*v1alpha1.Locality{tc.first, tc.second} {
				for _, l := range batch {
					var cur v1alpha1.Locality
					if err := c.Get(t.Context(), client.ObjectKeyFromObject(l), &cur); err == nil {
						cur.Spec = l.Spec
						if err := c.Update(t.Context(), &cur); err != nil {
							t.Fatal(err)
						}
					} else if err := c.Create(t.Context(), l.DeepCopy()); err != nil {
						t.Fatal(err)
					}
					src.mark(topology.KindLocality, l)
				}
				src.sync(t.Context())
			}

			u := src.Dir.Current().Upstream(topology.Key{Namespace: "ns", Name: "u"})
			if u == nil || len(u.Groups) != 1 || u.Groups[0].LocalityWeight != tc.weight ||
				len(u.Groups[0].LocalityObjects) != 1 || u.Groups[0].LocalityObjects[0].Name != tc.winner {
				t.Fatalf("groups %+v; want one group of weight %d placed by Locality %s alone", u.Groups, tc.weight, tc.winner)
			}
			if rej, ok := src.Rejection(ref(tc.winner)); ok {
				t.Errorf("the winner %s is rejected: %+v", tc.winner, rej)
			}
			rej, ok := src.Rejection(ref(tc.loser))
			if !ok || rej.Reason != v1alpha1.ReasonConflicted || !strings.Contains(rej.Message, "ns/"+tc.winner+" is older") {
				t.Errorf("the loser %s: %+v, %v; want Conflicted naming %s", tc.loser, rej, ok, tc.winner)
			}

			// the next batch keeps it so (set-aside objects are tried again)
			src.sync(t.Context())
			if rej2, _ := src.Rejection(ref(tc.loser)); rej2 != rej {
				t.Errorf("after another batch the loser's rejection is %+v; was %+v", rej2, rej)
			}
			// once the winner goes, the loser is accepted
			var w v1alpha1.Locality
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: tc.winner}, &w); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(t.Context(), &w); err != nil {
				t.Fatal(err)
			}
			src.mark(topology.KindLocality, &w)
			src.sync(t.Context())
			if rej, ok := src.Rejection(ref(tc.loser)); ok {
				t.Errorf("with the winner deleted, %s is still rejected: %+v", tc.loser, rej)
			}
		})
	}
}
