package topology

import (
	"sort"

	"poise.dev/poise/pkg/weights"
)

// Snapshot is one coherent, immutable revision of the whole topology.
// Snapshots share unchanged UpstreamStates with their predecessors, so a
// reader may keep any snapshot for as long as it likes. Nothing in a
// Snapshot may be modified.
type Snapshot struct {
	Revision  uint64
	upstreams []*UpstreamState // sorted by key
	spatial   []*SpatialState  // sorted by key
	orphans   []ObjectRef      // sorted
}

// Upstreams returns every upstream in key order. The slice is shared: do not modify it.
func (s *Snapshot) Upstreams() []*UpstreamState { return s.upstreams }

// Upstream returns the state of one upstream, or nil.
func (s *Snapshot) Upstream(k Key) *UpstreamState {
	i, ok := s.find(k)
	if !ok {
		return nil
	}
	return s.upstreams[i]
}

func (s *Snapshot) find(k Key) (int, bool) {
	i := sort.Search(len(s.upstreams), func(i int) bool { return s.upstreams[i].Upstream.Key.Compare(k) >= 0 })
	return i, i < len(s.upstreams) && s.upstreams[i].Upstream.Key == k
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
	Set    ObjectRef
	Health Health
}

// EndpointResult pairs a computed endpoint with its input and origin.
func (u *UpstreamState) EndpointResult(i int) (weights.EndpointResult, weights.Endpoint, Origin) {
	er := u.Result.Endpoints[i]
	return er, u.Endpoints[er.Index], u.Origins[er.Index]
}
