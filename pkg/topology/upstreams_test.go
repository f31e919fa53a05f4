package topology

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"poise.dev/poise/pkg/weights"
)

// The chunked list equals a plain sorted list after any sequence of merges,
// and stays balanced.
func TestUpstreamListMatchesSortedList(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l upstreamList
		ref := map[Key]*UpstreamState{}
		keyPool := rapid.IntRange(1, 2000).Draw(t, "keys")
		for range rapid.IntRange(1, 20).Draw(t, "merges") {
			states := map[Key]*UpstreamState{}
			for range rapid.IntRange(0, 600).Draw(t, "changes") {
				k := Key{Namespace: "ns", Name: fmt.Sprintf("u%05d", rapid.IntRange(0, keyPool).Draw(t, "key"))}
				if rapid.IntRange(0, 3).Draw(t, "op") == 0 {
					states[k] = nil
				} else {
					states[k] = &UpstreamState{Upstream: Upstream{Key: k}}
				}
			}
			keys := sortedKeys(states)
			list := make([]*UpstreamState, len(keys))
			for i, k := range keys {
				list[i] = states[k]
			}
			l = l.merge(keys, list)
			for k, s := range states {
				if s == nil {
					delete(ref, k)
				} else {
					ref[k] = s
				}
			}
			want := make([]*UpstreamState, 0, len(ref))
			for _, k := range sortedKeys(ref) {
				want = append(want, ref[k])
			}
			if got := l.flatten(); !slices.Equal(got, want) || l.n != len(want) {
				t.Fatalf("list of %d differs from the sorted list of %d", l.n, len(want))
			}
			for _, c := range l.chunks {
				if len(c) == 0 || len(c) > 2*chunkSize {
					t.Fatalf("a chunk of %d", len(c))
				}
			}
			if len(l.chunks) > 2*(l.n/chunkSize)+4 {
				t.Fatalf("%d chunks for %d upstreams", len(l.chunks), l.n)
			}
			for k, s := range ref {
				if l.get(k) != s {
					t.Fatalf("get %s", k)
				}
			}
			if l.get(Key{Namespace: "ns", Name: "absent"}) != nil {
				t.Fatal("found an absent key")
			}
		}
	})
}

// ChangedSince names every upstream whose state differs between two
// revisions, or says it cannot.
func TestChangedSince(t *testing.T) {
	d := NewDirectory()
	snaps := []*Snapshot{d.Current()}
	for i := range 100 {
		var b Batch
		for j := range 1 + i%3 {
			k := Key{Namespace: "ns", Name: fmt.Sprintf("u%d", (i*7+j)%23)}
			if (i+j)%5 == 0 {
				b.DeleteUpstream(k)
			} else {
				b.PutUpstream(Upstream{Key: k, Policy: weights.DefaultPolicy(), Protocol: fmt.Sprint(i)})
			}
		}
		s, err := d.Apply(b)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, s)
	}
	last := snaps[len(snaps)-1]
	for _, old := range snaps {
		keys, ok := last.ChangedSince(old.Revision)
		if !ok {
			if last.Revision-old.Revision <= changeHistory {
				t.Fatalf("forgot revision %d at %d", old.Revision, last.Revision)
			}
			continue
		}
		if !slices.IsSortedFunc(keys, Key.Compare) {
			t.Fatal("keys not sorted")
		}
		for i := range 23 {
			k := Key{Namespace: "ns", Name: fmt.Sprintf("u%d", i)}
			if old.Upstream(k) != last.Upstream(k) && !slices.Contains(keys, k) {
				t.Fatalf("%s changed between %d and %d but is not listed", k, old.Revision, last.Revision)
			}
		}
	}
}

func sortedKeys[V any](m map[Key]V) []Key {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, Key.Compare)
	return keys
}
