package topology

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"poise.dev/poise/pkg/weights"
)

// The tree equals a plain sorted list after any sequence of merges, stays
// balanced, and leaves every list it was merged from as it was.
func TestUpstreamListMatchesSortedList(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l upstreamList
		ref := map[Key]*UpstreamState{}
		keyPool := rapid.IntRange(1, 2000).Draw(t, "keys")
		var lists []upstreamList
		var wants [][]*UpstreamState
		for range rapid.IntRange(1, 20).Draw(t, "merges") {
			states := map[Key]*UpstreamState{}
			for range rapid.IntRange(0, rapid.SampledFrom([]int{3, 40, 600}).Draw(t, "most")).Draw(t, "changes") {
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
			lists, wants = append(lists, l), append(wants, want)
			for i := range lists {
				if got := lists[i].flatten(); !slices.Equal(got, wants[i]) || lists[i].n != len(wants[i]) {
					t.Fatalf("list %d of %d differs from the sorted list of %d", i, lists[i].n, len(wants[i]))
				}
			}
			checkTree(t, l)
			for k, s := range ref {
				if l.get(k) != s {
					t.Fatalf("get %s", k)
				}
			}
			if l.get(Key{Namespace: "ns", Name: "absent"}) != nil || l.get(Key{Namespace: "ns", Name: "u99999"}) != nil {
				t.Fatal("found an absent key")
			}
		}
	})
}

// A tree of three levels splits inner nodes as one region grows and
// collapses as it empties, keeping every list it was merged from.
func TestUpstreamListDeep(t *testing.T) {
	key := func(i int) Key { return Key{Namespace: "ns", Name: fmt.Sprintf("u%07d", i)} }
	state := func(i int) *UpstreamState { return &UpstreamState{Upstream: Upstream{Key: key(i)}} }
	const n = 100_000
	ref := map[Key]*UpstreamState{}
	var keys []Key
	var states []*UpstreamState
	for i := 0; i < n; i += 2 {
		keys, states = append(keys, key(i)), append(states, state(i))
		ref[key(i)] = states[len(states)-1]
	}
	l := upstreamList{}.merge(keys, states)
	l0, first := l, l.flatten()
	check := func(l upstreamList) {
		checkTree(t, l)
		want := make([]*UpstreamState, 0, len(ref))
		for _, k := range sortedKeys(ref) {
			want = append(want, ref[k])
		}
		if !slices.Equal(l.flatten(), want) {
			t.Fatal("the tree differs from the sorted list")
		}
	}
	check(l)
	// the odd keys of one region, a few at a time: leaves split, then their parent
	for lo := 20_001; lo < 30_000; lo += 20 {
		keys, states = keys[:0], states[:0]
		for i := lo; i < lo+20; i += 2 {
			keys, states = append(keys, key(i)), append(states, state(i))
			ref[key(i)] = states[len(states)-1]
		}
		l = l.merge(keys, states)
	}
	check(l)
	// three of every four keys, scattered: short leaves, then a new tree
	leaves := l.leaves
	for lo := 0; lo < 4; lo++ {
		for hi := 0; hi < 1000; hi++ {
			keys, states = keys[:0], states[:0]
			for i := hi*2 + lo*2000; i < n; i += 8000 {
				if _, ok := ref[key(i)]; ok && i%8 != 0 {
					keys, states = append(keys, key(i)), append(states, nil)
					delete(ref, key(i))
				}
			}
			l = l.merge(keys, states)
		}
	}
	if l.leaves >= leaves {
		t.Fatalf("%d leaves before, %d after", leaves, l.leaves)
	}
	check(l)
	// then every key of the tree but a few, a few at a time
	for lo := 0; lo < n; lo += 500 {
		keys, states = keys[:0], states[:0]
		for i := lo; i < lo+500; i++ {
			if _, ok := ref[key(i)]; ok && i%5000 != 0 {
				keys, states = append(keys, key(i)), append(states, nil)
				delete(ref, key(i))
			}
		}
		l = l.merge(keys, states)
	}
	check(l)
	// a root of two leaves loses one: the leaf left is the root
	keys, states, ref = keys[:0], states[:0], map[Key]*UpstreamState{}
	for i := range fanout + 1 {
		keys, states = append(keys, key(i)), append(states, state(i))
		ref[key(i)] = states[i]
	}
	l = upstreamList{}.merge(keys, states)
	l = l.merge([]Key{key(fanout)}, []*UpstreamState{nil})
	delete(ref, key(fanout))
	check(l)
	if l.root.kids != nil {
		t.Fatal("a root of one kid")
	}
	if !slices.Equal(l0.flatten(), first) {
		t.Fatal("the first list changed")
	}
}

// One upstream's change allocates a node a level, whatever the list's size:
// at 50,000 upstreams no more than twice what it does at 500 (a list that
// copied a pointer per chunk allocated ten times as much).
func TestMergeOfOneDoesNotGrowWithTheList(t *testing.T) {
	perMerge := map[int]uint64{}
	for _, n := range []int{500, 50_000} {
		keys := make([]Key, n)
		states := make([]*UpstreamState, n)
		for i := range n {
			keys[i] = Key{Namespace: "ns", Name: fmt.Sprintf("u%07d", i)}
			states[i] = &UpstreamState{Upstream: Upstream{Key: keys[i]}}
		}
		l := upstreamList{}.merge(keys, states)
		k, s := []Key{keys[n/2]}, []*UpstreamState{{Upstream: Upstream{Key: keys[n/2]}}}
		const runs = 100
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			if l.merge(k, s).n != n {
				t.Fatal("a replacement changed the count")
			}
		}
		runtime.ReadMemStats(&after)
		perMerge[n] = (after.TotalAlloc - before.TotalAlloc) / runs
		depth := 0
		for nd := l.root; nd != nil; depth++ {
			if nd.kids == nil {
				nd = nil
			} else {
				nd = nd.kids[0]
			}
		}
		if a := testing.AllocsPerRun(runs, func() { l.merge(k, s) }); a > float64(depth) {
			t.Errorf("%d upstreams, %d levels: a merge of one allocates %.0f times", n, depth, a)
		}
		t.Logf("%d upstreams, %d levels: %d bytes a merge of one", n, depth, perMerge[n])
	}
	if perMerge[50_000] > 2*perMerge[500] {
		t.Errorf("a merge of one allocates %d bytes at 500 upstreams and %d at 50,000", perMerge[500], perMerge[50_000])
	}
}

// checkTree holds a list to its shape: every leaf at one depth, no node
// empty or over fanout, each node's last key its contents', the counts
// right, and no more leaves than the merge allows.
func checkTree(t interface {
	Fatal(...any)
	Fatalf(string, ...any)
}, l upstreamList) {
	if l.root == nil {
		if l.n != 0 || l.leaves != 0 {
			t.Fatalf("an empty tree counts %d upstreams in %d leaves", l.n, l.leaves)
		}
		return
	}
	depth, leaves, n := -1, 0, 0
	var walk func(nd *upstreamNode, d int)
	walk = func(nd *upstreamNode, d int) {
		if nd.len() == 0 || nd.len() > fanout {
			t.Fatalf("a node of %d", nd.len())
		}
		if nd.gen > l.gen {
			t.Fatalf("a node of generation %d in a list of %d", nd.gen, l.gen)
		}
		if nd.kids == nil {
			if depth >= 0 && depth != d {
				t.Fatalf("leaves at depths %d and %d", depth, d)
			}
			depth = d
			leaves++
			n += len(nd.states)
			if nd.max != nd.states[len(nd.states)-1].Upstream.Key {
				t.Fatalf("a leaf's last key %s is not %s", nd.max, nd.states[len(nd.states)-1].Upstream.Key)
			}
			return
		}
		for _, kid := range nd.kids {
			walk(kid, d+1)
		}
		if nd.max != nd.kids[len(nd.kids)-1].max {
			t.Fatal("an inner node's last key is not its last kid's")
		}
	}
	walk(l.root, 0)
	if leaves != l.leaves || n != l.n {
		t.Fatalf("%d upstreams in %d leaves counted as %d in %d", n, leaves, l.n, l.leaves)
	}
	if l.leaves > 2*(l.n/fanout)+4 {
		t.Fatalf("%d leaves for %d upstreams", l.leaves, l.n)
	}
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
