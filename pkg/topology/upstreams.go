package topology

import (
	"slices"
	"sort"
)

// chunkSize is the length a chunk of the upstream list is cut to.
const chunkSize = 128

// upstreamList is the key-sorted list of upstream states, cut into chunks
// that snapshots share: a change copies the list of chunk pointers and the
// chunks it touches, so one upstream's change costs O(N/128) pointer copies
// instead of O(N) key comparisons and a copy of every pointer.
type upstreamList struct {
	chunks [][]*UpstreamState
	n      int
}

// locate returns the chunk that holds k or would: the first whose last key
// is not below k, or the last chunk.
func (l upstreamList) locate(k Key) int {
	i := sort.Search(len(l.chunks), func(i int) bool {
		c := l.chunks[i]
		return c[len(c)-1].Upstream.Key.Compare(k) >= 0
	})
	return min(i, len(l.chunks)-1)
}

func searchChunk(c []*UpstreamState, k Key) (int, bool) {
	i := sort.Search(len(c), func(i int) bool { return c[i].Upstream.Key.Compare(k) >= 0 })
	return i, i < len(c) && c[i].Upstream.Key == k
}

func (l upstreamList) get(k Key) *UpstreamState {
	if len(l.chunks) == 0 {
		return nil
	}
	c := l.chunks[l.locate(k)]
	if i, ok := searchChunk(c, k); ok {
		return c[i]
	}
	return nil
}

func (l upstreamList) flatten() []*UpstreamState {
	out := make([]*UpstreamState, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c...)
	}
	return out
}

// merge returns the list with states[i] replacing, inserting or removing
// (nil) the upstream of keys[i]; keys are sorted. The chunks of unaffected
// upstreams are shared with l.
func (l upstreamList) merge(keys []Key, states []*UpstreamState) upstreamList {
	if len(keys) == 0 {
		return l
	}
	out := upstreamList{chunks: slices.Clone(l.chunks), n: l.n}
	copied := -1
	for ki, k := range keys {
		s := states[ki]
		if len(out.chunks) == 0 {
			if s != nil {
				out.chunks = [][]*UpstreamState{{s}}
				out.n++
				copied = 0
			}
			continue
		}
		ci := out.locate(k)
		if ci != copied {
			out.chunks[ci] = slices.Clone(out.chunks[ci])
			copied = ci
		}
		c := out.chunks[ci]
		i, found := searchChunk(c, k)
		switch {
		case found && s != nil:
			c[i] = s
		case found:
			c = slices.Delete(c, i, i+1)
			out.n--
		case s != nil:
			c = slices.Insert(c, i, s)
			out.n++
		}
		if len(c) == 0 {
			// an empty chunk has no last key to search by
			out.chunks = slices.Delete(out.chunks, ci, ci+1)
			copied = -1
			continue
		}
		out.chunks[ci] = c
	}
	return out.balance()
}

// balance cuts long chunks and rebuilds the list when deletions have left
// it with many short ones, so the chunk list stays O(N/chunkSize).
func (l upstreamList) balance() upstreamList {
	long := false
	for _, c := range l.chunks {
		if len(c) > 2*chunkSize {
			long = true
			break
		}
	}
	if !long && len(l.chunks) <= 2*(l.n/chunkSize)+4 {
		return l
	}
	flat := l.flatten()
	out := upstreamList{n: len(flat)}
	for len(flat) > 0 {
		n := min(chunkSize, len(flat))
		out.chunks = append(out.chunks, flat[:n:n])
		flat = flat[n:]
	}
	return out
}
