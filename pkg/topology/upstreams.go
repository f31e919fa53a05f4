package topology

import (
	"slices"
)

// fanout is the most upstreams a leaf of the upstream tree holds, and the
// most nodes an inner node holds.
const fanout = 64

// upstreamList is the key-sorted list of upstream states, kept as a
// persistent B+ tree whose nodes snapshots share. A change copies only the
// path from the root to each leaf it touches: one leaf and one node a level
// of at most fanout pointers each, so one upstream's change allocates about
// the same at 500 upstreams as at 50,000, where copying a flat list of
// chunk pointers grew with the list (and with it the garbage every flip
// leaves for a collector that must then mark the whole topology).
type upstreamList struct {
	root   *upstreamNode // nil when empty
	n      int           // upstreams
	leaves int
	// gen stamps the nodes this list made while it was built; a merge
	// changes in place only the nodes of the list it is building, which no
	// other list can reach: every other node is copied first.
	gen uint64
}

// upstreamNode is a leaf (kids nil: states) or an inner node (kids).
type upstreamNode struct {
	gen    uint64
	max    Key // the last key under the node
	states []*UpstreamState
	kids   []*upstreamNode
}

func (nd *upstreamNode) len() int {
	if nd.kids != nil {
		return len(nd.kids)
	}
	return len(nd.states)
}

// child is the index of the kid that holds k or would: the first whose
// last key is not below k, or the last.
func (nd *upstreamNode) child(k Key) int {
	lo, hi := 0, len(nd.kids)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if nd.kids[m].max.Compare(k) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func searchLeaf(c []*UpstreamState, k Key) (int, bool) {
	lo, hi := 0, len(c)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c[m].Upstream.Key.Compare(k) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(c) && c[lo].Upstream.Key == k
}

// setMax makes the node's last key follow its contents; an empty node
// keeps the old one (its parent removes it).
func (nd *upstreamNode) setMax() {
	switch {
	case len(nd.kids) > 0:
		nd.max = nd.kids[len(nd.kids)-1].max
	case nd.kids == nil && len(nd.states) > 0:
		nd.max = nd.states[len(nd.states)-1].Upstream.Key
	}
}

func (l upstreamList) get(k Key) *UpstreamState {
	nd := l.root
	if nd == nil {
		return nil
	}
	for nd.kids != nil {
		nd = nd.kids[nd.child(k)]
	}
	if i, ok := searchLeaf(nd.states, k); ok {
		return nd.states[i]
	}
	return nil
}

func (l upstreamList) flatten() []*UpstreamState {
	out := make([]*UpstreamState, 0, l.n)
	var walk func(nd *upstreamNode)
	walk = func(nd *upstreamNode) {
		if nd.kids == nil {
			out = append(out, nd.states...)
			return
		}
		for _, kid := range nd.kids {
			walk(kid)
		}
	}
	if l.root != nil {
		walk(l.root)
	}
	return out
}

// bulkShare: a merge of more than one key in bulkShare of the list's
// upstreams builds the tree anew from one pass over both.
const bulkShare = 16

// merge returns the list with states[i] replacing, inserting or removing
// (nil) the upstream of keys[i]; keys are sorted and distinct. The nodes of
// unaffected upstreams are shared with l, which is not changed.
func (l upstreamList) merge(keys []Key, states []*UpstreamState) upstreamList {
	if len(keys) == 0 {
		return l
	}
	if len(keys) > l.n/bulkShare {
		return build(mergeSorted(l.flatten(), keys, states), l.gen+1)
	}
	out := l
	out.gen++
	for i, k := range keys {
		out.set(k, states[i])
	}
	// deletions leave leaves short; when they are many, start again
	if out.leaves > 2*(out.n/fanout)+4 {
		return build(out.flatten(), out.gen)
	}
	return out
}

// mergeSorted is flat with the changes of merge laid over it.
func mergeSorted(flat []*UpstreamState, keys []Key, states []*UpstreamState) []*UpstreamState {
	out := make([]*UpstreamState, 0, len(flat)+len(keys))
	i := 0
	for ki, k := range keys {
		for i < len(flat) && flat[i].Upstream.Key.Compare(k) < 0 {
			out = append(out, flat[i])
			i++
		}
		if i < len(flat) && flat[i].Upstream.Key == k {
			i++
		}
		if s := states[ki]; s != nil {
			out = append(out, s)
		}
	}
	return append(out, flat[i:]...)
}

// build is the tree of a key-sorted list: full leaves and inner nodes,
// stamped gen.
func build(flat []*UpstreamState, gen uint64) upstreamList {
	l := upstreamList{n: len(flat), gen: gen}
	if len(flat) == 0 {
		return l
	}
	level := make([]*upstreamNode, 0, (len(flat)+fanout-1)/fanout)
	for len(flat) > 0 {
		m := min(fanout, len(flat))
		level = append(level, &upstreamNode{gen: gen, max: flat[m-1].Upstream.Key, states: flat[:m:m]})
		flat = flat[m:]
	}
	l.leaves = len(level)
	for len(level) > 1 {
		up := make([]*upstreamNode, 0, (len(level)+fanout-1)/fanout)
		for len(level) > 0 {
			m := min(fanout, len(level))
			up = append(up, &upstreamNode{gen: gen, max: level[m-1].max, kids: level[:m:m]})
			level = level[m:]
		}
		level = up
	}
	l.root = level[0]
	return l
}

// writable is nd, or a copy of it this list may change: one allocation of
// the node and room for fanout entries.
func (l *upstreamList) writable(nd *upstreamNode) *upstreamNode {
	if nd.gen == l.gen {
		return nd
	}
	if nd.kids != nil {
		c := &struct {
			node upstreamNode
			kids [fanout]*upstreamNode
		}{node: upstreamNode{gen: l.gen, max: nd.max}}
		c.node.kids = append(c.kids[:0], nd.kids...)
		return &c.node
	}
	c := &struct {
		node   upstreamNode
		states [fanout]*UpstreamState
	}{node: upstreamNode{gen: l.gen, max: nd.max}}
	c.node.states = append(c.states[:0], nd.states...)
	return &c.node
}

// set puts s at k, or removes k when s is nil. The list is not empty, and
// does not become so: merge builds anew when a change is that large.
func (l *upstreamList) set(k Key, s *UpstreamState) {
	l.root = l.writable(l.root)
	l.put(l.root, k, s)
	if l.root.len() > fanout {
		l.root = &upstreamNode{gen: l.gen, kids: []*upstreamNode{l.root}}
		l.split(l.root, 0)
		l.root.setMax()
	}
	for len(l.root.kids) == 1 {
		l.root = l.root.kids[0]
	}
}

// put is set under the writable node nd.
func (l *upstreamList) put(nd *upstreamNode, k Key, s *UpstreamState) {
	if nd.kids == nil {
		i, found := searchLeaf(nd.states, k)
		switch {
		case found && s != nil:
			nd.states[i] = s
		case found:
			nd.states = slices.Delete(nd.states, i, i+1)
			l.n--
		case s != nil:
			nd.states = slices.Insert(nd.states, i, s)
			l.n++
		}
		nd.setMax()
		return
	}
	ci := nd.child(k)
	kid := l.writable(nd.kids[ci])
	nd.kids[ci] = kid
	l.put(kid, k, s)
	switch {
	case kid.len() == 0:
		if kid.kids == nil {
			l.leaves--
		}
		nd.kids = slices.Delete(nd.kids, ci, ci+1)
	case kid.len() > fanout:
		l.split(nd, ci)
	}
	nd.setMax()
}

// split cuts the writable kid ci of nd in two halves.
func (l *upstreamList) split(nd *upstreamNode, ci int) {
	kid := nd.kids[ci]
	right := &upstreamNode{gen: l.gen}
	if kid.kids == nil {
		h := len(kid.states) / 2
		right.states = slices.Clone(kid.states[h:])
		clear(kid.states[h:]) // the array keeps no pointer to what the right half holds
		kid.states = kid.states[:h]
		l.leaves++
	} else {
		h := len(kid.kids) / 2
		right.kids = slices.Clone(kid.kids[h:])
		clear(kid.kids[h:])
		kid.kids = kid.kids[:h]
	}
	kid.setMax()
	right.setMax()
	nd.kids = slices.Insert(nd.kids, ci+1, right)
}
