package topology

import (
	"slices"
	"sync"
	"sync/atomic"

	"poise.dev/poise/pkg/weights"
)

// Snapshot is one coherent, immutable revision of the whole topology.
// Snapshots share unchanged UpstreamStates with their predecessors, so a
// reader may keep any snapshot for as long as it likes. Nothing in a
// Snapshot may be modified.
type Snapshot struct {
	Revision uint64
	list     upstreamList
	spatial  []*SpatialState // sorted by key
	orphans  []ObjectRef     // sorted
	changes  *changeSet      // the upstreams that changed at this revision, and before
	classes  *ClientClasses  // the client classes with clients (never nil)
	// superseded is closed when a newer snapshot is published.
	superseded chan struct{}

	flatOnce sync.Once
	flat     []*UpstreamState
}

// Upstreams returns every upstream in key order. It is built on first use;
// the slice is shared: do not modify it.
func (s *Snapshot) Upstreams() []*UpstreamState {
	s.flatOnce.Do(func() { s.flat = s.list.flatten() })
	return s.flat
}

// Upstream returns the state of one upstream, or nil.
func (s *Snapshot) Upstream(k Key) *UpstreamState { return s.list.get(k) }

// NumUpstreams is the number of upstreams.
func (s *Snapshot) NumUpstreams() int { return s.list.n }

// changeSet is the upstreams whose state changed at one revision; older
// links to the revision before, for a bounded number of revisions.
type changeSet struct {
	revision uint64
	keys     []Key // sorted
	older    atomic.Pointer[changeSet]
}

// changeHistory is how many revisions a snapshot can say what changed in.
const changeHistory = 64

func newChangeSet(rev uint64, keys []Key, prev *changeSet) *changeSet {
	cs := &changeSet{revision: rev, keys: keys}
	cs.older.Store(prev)
	n := cs
	for range changeHistory {
		if n = n.older.Load(); n == nil {
			return cs
		}
	}
	n.older.Store(nil) // forget the rest: readers that need it fall back to a full comparison
	return cs
}

// ChangedSince returns the keys of the upstreams whose state may differ
// between the snapshot of revision rev and this one, sorted, and false when
// this snapshot no longer remembers that far back.
func (s *Snapshot) ChangedSince(rev uint64) ([]Key, bool) {
	if rev >= s.Revision {
		return nil, true
	}
	var lists [][]Key
	for cs := s.changes; ; cs = cs.older.Load() {
		if cs == nil {
			return nil, false
		}
		if cs.revision <= rev {
			break
		}
		lists = append(lists, cs.keys)
		if cs.revision == rev+1 {
			break
		}
	}
	if len(lists) == 1 {
		return lists[0], true
	}
	var out []Key
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortFunc(out, Key.Compare)
	return slices.Compact(out), true
}

// ClientClasses are the locality classes that have connected clients, per
// view, as the demand signal last handed them over (none offline).
func (s *Snapshot) ClientClasses() *ClientClasses {
	if s.classes == nil {
		return noClasses
	}
	return s.classes
}

// Orphans lists the Locality and EndpointSet objects whose upstream does not
// exist (yet). They are kept and take effect when it appears.
func (s *Snapshot) Orphans() []ObjectRef { return s.orphans }

// ObjectRef names an object of a kind.
type ObjectRef struct {
	Kind string
	Key  Key
}

func (r ObjectRef) String() string { return r.Kind + " " + r.Key.String() }

func (r ObjectRef) compare(o ObjectRef) int {
	switch {
	case r.Kind < o.Kind:
		return -1
	case r.Kind > o.Kind:
		return 1
	}
	return r.Key.Compare(o.Key)
}

// UpstreamState is one upstream resolved into its weights input and computed.
type UpstreamState struct {
	Upstream Upstream
	// Groups are the (priority, locality) groups in canonical order, with
	// the objects that placed and weighed them.
	Groups []Group
	// Endpoints is the weights input; Origins[i] says where Endpoints[i] came from.
	Endpoints []weights.Endpoint
	Origins   []Origin
	Result    *weights.Result
	// Demand is the demand a Balanced upstream's split is divided by for
	// each client zone (ForClass); empty when it is not Balanced or no
	// demand is applied (offline, or no client connected).
	Demand AppliedDemand
	// Revision is the last revision that changed anything of this upstream;
	// ClusterRevision the last that changed the Upstream object itself.
	Revision        uint64
	ClusterRevision uint64
}

// Group is one (priority, locality) group and how it was resolved.
type Group struct {
	Priority       uint32
	Locality       weights.Locality
	LocalityWeight uint64
	// LocalityObjects set the priority and weight; empty means the defaults
	// (priority 0 or the set's own, weight 1) apply.
	LocalityObjects []Key
	// Sets are the endpoint sets whose endpoints are in the group.
	Sets []ObjectRef
}

// Origin is where one endpoint of the weights input came from.
type Origin struct {
	Set ObjectRef
	// Health is the endpoint's own, in its set (which is never modified in
	// place): pointing at it keeps one copy of every signal and origin. An
	// endpoint with an active check verdict points at its merged copy instead.
	Health *Health
	// HashKey and Generation are the endpoint's (Endpoint.HashKey,
	// Endpoint.Generation).
	HashKey, Generation string
}

// EndpointResult pairs a computed endpoint with its input and origin.
func (u *UpstreamState) EndpointResult(i int) (weights.EndpointResult, weights.Endpoint, Origin) {
	er := u.Result.Endpoints[i]
	return er, u.Endpoints[er.Index], u.Origins[er.Index]
}
