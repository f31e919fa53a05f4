package server

import (
	"bytes"
	"sync"
)

// nameBlocks holds the resource_names of SotW subscriptions as they arrive
// on the wire, once for every stream that subscribes to the same names in
// the same order. A SotW client repeats its whole subscription in every
// ACK; comparing those bytes with its stream's block runs at memory speed,
// several times faster than hashing them, and fleets mostly share a few
// subscriptions, so the blocks cost little memory. The total is bounded:
// past it, a new subscription is recognised by its hash alone.
type nameBlocks struct {
	mu     sync.Mutex
	byHash map[uint64]*nameBlock
	held   int // bytes in byHash
	limit  int
}

type nameBlock struct {
	raw   []byte // the resource_names fields, tags included, in request order
	hash  uint64 // xdscache.HashNames of the names
	count int
	refs  int // guarded by nameBlocks.mu
}

// maxNameBlockBytes bounds the bytes all blocks hold: 64 MiB is 800
// distinct 5,000-name subscriptions.
const maxNameBlockBytes = 64 << 20

func newNameBlocks(limit int) *nameBlocks {
	return &nameBlocks{byHash: map[uint64]*nameBlock{}, limit: limit}
}

// acquire returns the shared block holding raw, adding it if there is room;
// nil when there is not (or, rarely, when another block has the same hash).
func (n *nameBlocks) acquire(raw []byte, hash uint64, count int) *nameBlock {
	n.mu.Lock()
	defer n.mu.Unlock()
	if b := n.byHash[hash]; b != nil {
		if !bytes.Equal(b.raw, raw) {
			return nil
		}
		b.refs++
		return b
	}
	if n.held+len(raw) > n.limit {
		return nil
	}
	b := &nameBlock{raw: bytes.Clone(raw), hash: hash, count: count, refs: 1}
	n.byHash[hash] = b
	n.held += len(raw)
	return b
}

// ref adds a holder to a block already held.
func (n *nameBlocks) ref(b *nameBlock) {
	n.mu.Lock()
	b.refs++
	n.mu.Unlock()
}

// release drops one holder of b (nil is a no-op); the last frees it.
func (n *nameBlocks) release(b *nameBlock) {
	if b == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if b.refs--; b.refs == 0 {
		delete(n.byHash, b.hash)
		n.held -= len(b.raw)
	}
}

// size reports the blocks held and their bytes.
func (n *nameBlocks) size() (blocks, held int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byHash), n.held
}
