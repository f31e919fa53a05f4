package topology

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"poise.dev/poise/pkg/weights"
)

// Kinds of the objects a Directory holds, as named in messages.
const (
	KindUpstream    = "Upstream"
	KindLocality    = "Locality"
	KindEndpointSet = "EndpointSet"
)

// Batch is a set of changes applied together. Later changes to the same
// object replace earlier ones in the batch.
type Batch struct {
	upstreams  map[Key]*Upstream // nil value: delete
	localities map[Key]*Locality
	sets       map[Key]*EndpointSet
	domains    map[Key]*SpatialDomain
	partitions map[Key]*Partition
}

// PutUpstream adds or replaces an upstream.
func (b *Batch) PutUpstream(u Upstream) { setOp(&b.upstreams, u.Key, &u) }

// DeleteUpstream removes an upstream; its localities and sets stay as orphans.
func (b *Batch) DeleteUpstream(k Key) { setOp(&b.upstreams, k, nil) }

// PutLocality adds or replaces a Locality object.
func (b *Batch) PutLocality(l Locality) { setOp(&b.localities, l.Key, &l) }

// DeleteLocality removes a Locality object.
func (b *Batch) DeleteLocality(k Key) { setOp(&b.localities, k, nil) }

// PutEndpointSet adds or replaces an endpoint set. The Directory keeps its own copy.
func (b *Batch) PutEndpointSet(s EndpointSet) {
	s.Endpoints = slices.Clone(s.Endpoints)
	if s.Priority != nil {
		p := *s.Priority
		s.Priority = &p
	}
	if s.Kind == "" {
		s.Kind = KindEndpointSet
	}
	setOp(&b.sets, s.Key, &s)
}

// DeleteEndpointSet removes an endpoint set.
func (b *Batch) DeleteEndpointSet(k Key) { setOp(&b.sets, k, nil) }

// Len is the number of objects the batch touches.
func (b *Batch) Len() int {
	return len(b.upstreams) + len(b.localities) + len(b.sets) + len(b.domains) + len(b.partitions)
}

func setOp[T any](m *map[Key]*T, k Key, v *T) {
	if *m == nil {
		*m = make(map[Key]*T)
	}
	(*m)[k] = v
}

// Directory is the single writer of the topology. Apply may be called from
// any goroutine (calls are serialized); Current is lock-free and always
// returns a complete snapshot.
type Directory struct {
	mu         sync.Mutex
	upstreams  map[Key]Upstream
	localities map[Key]Locality
	sets       map[Key]EndpointSet
	domains    map[Key]SpatialDomain
	partitions map[Key]Partition
	// indexes from an upstream to the objects that name it, present or not
	localitiesOf map[Key]map[Key]struct{}
	setsOf       map[Key]map[Key]struct{}
	domainsOf    map[Key]map[Key]struct{} // upstream → domains with a replica on it
	partitionsOf map[Key]map[Key]struct{} // domain → its partitions, present or not
	calc         *weights.Calculator

	current atomic.Pointer[Snapshot]
	changed atomic.Pointer[chan struct{}]
}

// NewDirectory returns a Directory publishing an empty snapshot at revision 0.
func NewDirectory() *Directory {
	d := &Directory{
		upstreams:    map[Key]Upstream{},
		localities:   map[Key]Locality{},
		sets:         map[Key]EndpointSet{},
		localitiesOf: map[Key]map[Key]struct{}{},
		setsOf:       map[Key]map[Key]struct{}{},
		domains:      map[Key]SpatialDomain{},
		partitions:   map[Key]Partition{},
		domainsOf:    map[Key]map[Key]struct{}{},
		partitionsOf: map[Key]map[Key]struct{}{},
		calc:         weights.NewCalculator(),
	}
	d.current.Store(&Snapshot{})
	ch := make(chan struct{})
	d.changed.Store(&ch)
	return d
}

// Current returns the latest published snapshot.
func (d *Directory) Current() *Snapshot { return d.current.Load() }

// Changed returns a channel that is closed when a snapshot newer than the
// current one is published. Readers then call Current, so a slow reader
// skips straight to the newest revision.
func (d *Directory) Changed() <-chan struct{} { return *d.changed.Load() }

// Apply applies a batch atomically: every affected upstream is resolved,
// validated and computed; if any fails the batch is rejected whole with a
// *BatchError and the current snapshot is unchanged. A batch that changes
// nothing returns the current snapshot without a new revision.
func (d *Directory) Apply(b Batch) (*Snapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()

	st := d.stage(b)
	prev := d.current.Load()
	if len(st.affected) == 0 && !st.objectsChanged && !st.spatialChanged() {
		return prev, nil
	}
	rev := prev.Revision + 1

	var problems []Problem
	states := make(map[Key]*UpstreamState, len(st.affected))
	for _, k := range sortedKeys(st.affected) {
		u, ok := st.upstream(k)
		if !ok {
			states[k] = nil
			continue
		}
		state, prob := d.resolve(st, u)
		if prob != nil {
			problems = append(problems, *prob)
			continue
		}
		state.Revision = rev
		state.ClusterRevision = rev
		if old := prev.Upstream(k); old != nil && !st.upstreamChanged(k) {
			state.ClusterRevision = old.ClusterRevision
		}
		states[k] = state
	}
	if len(problems) > 0 {
		return prev, &BatchError{Problems: problems}
	}
	if st.spatialChanged() {
		st.orphansChanged = true
	}
	d.commit(st)
	keys := sortedKeys(states)
	next := &Snapshot{Revision: rev, list: prev.list.merge(keys, states), changes: newChangeSet(rev, keys, prev.changes)}
	next.spatial = d.applySpatial(prev, st, states, next)
	next.orphans = d.orphans(prev, st)
	d.current.Store(next)
	ch := make(chan struct{})
	old := d.changed.Swap(&ch)
	close(*old)
	return next, nil
}

// staged is a batch laid over the directory's state: reads see the batch
// first, and nothing is written until commit.
type staged struct {
	d        *Directory
	b        Batch
	affected map[Key]struct{}
	// the batch's puts indexed by the upstream they name
	batchLocalitiesOf map[Key][]Key
	batchSetsOf       map[Key][]Key
	// orphansChanged: the orphan list may differ from the previous snapshot's
	orphansChanged bool
	// objectsChanged: some locality or set changed even if no upstream is affected (orphans)
	objectsChanged bool
}

func (d *Directory) stage(b Batch) *staged {
	st := &staged{d: d, affected: map[Key]struct{}{}, batchLocalitiesOf: map[Key][]Key{}, batchSetsOf: map[Key][]Key{}}
	st.stageSpatial(b)
	for k, u := range b.upstreams {
		old, had := d.upstreams[k]
		if (u == nil && !had) || (u != nil && had && reflect.DeepEqual(old, *u)) {
			continue
		}
		setOp(&st.b.upstreams, k, u)
		st.affected[k] = struct{}{}
		if (u == nil) == had {
			st.orphansChanged = true // an upstream appeared or went away
		}
	}
	for k, l := range b.localities {
		old, had := d.localities[k]
		if (l == nil && !had) || (l != nil && had && reflect.DeepEqual(old, *l)) {
			continue
		}
		setOp(&st.b.localities, k, l)
		st.objectsChanged = true
		if had {
			st.touch(Key{k.Namespace, old.Upstream})
		}
		if l != nil {
			up := Key{k.Namespace, l.Upstream}
			st.touch(up)
			st.batchLocalitiesOf[up] = append(st.batchLocalitiesOf[up], k)
		}
	}
	for k, s := range b.sets {
		old, had := d.sets[k]
		if (s == nil && !had) || (s != nil && had && reflect.DeepEqual(old, *s)) {
			continue
		}
		setOp(&st.b.sets, k, s)
		st.objectsChanged = true
		if had {
			st.touch(Key{k.Namespace, old.Upstream})
		}
		if s != nil {
			up := Key{k.Namespace, s.Upstream}
			st.touch(up)
			st.batchSetsOf[up] = append(st.batchSetsOf[up], k)
		}
	}
	return st
}

// touch marks an upstream affected if it exists before or after the batch;
// an object naming one that exists neither before nor after is an orphan.
func (st *staged) touch(k Key) {
	_, after := st.upstream(k)
	_, before := st.d.upstreams[k]
	if after || before {
		st.affected[k] = struct{}{}
	}
	if !after || !before {
		st.orphansChanged = true
	}
}

func (st *staged) upstreamChanged(k Key) bool {
	_, ok := st.b.upstreams[k]
	return ok
}

func (st *staged) upstream(k Key) (Upstream, bool) {
	if u, ok := st.b.upstreams[k]; ok {
		if u == nil {
			return Upstream{}, false
		}
		return *u, true
	}
	u, ok := st.d.upstreams[k]
	return u, ok
}

// localitiesOf returns the Locality objects naming upstream k after the batch, sorted by key.
func (st *staged) localitiesOf(k Key) []Locality {
	var out []Locality
	for lk := range st.d.localitiesOf[k] {
		if _, overridden := st.b.localities[lk]; !overridden {
			out = append(out, st.d.localities[lk])
		}
	}
	for _, lk := range st.batchLocalitiesOf[k] {
		out = append(out, *st.b.localities[lk])
	}
	slices.SortFunc(out, func(a, b Locality) int { return a.Key.Compare(b.Key) })
	return out
}

// setsOf returns the endpoint sets naming upstream k after the batch, sorted by key.
func (st *staged) setsOf(k Key) []EndpointSet {
	var out []EndpointSet
	for sk := range st.d.setsOf[k] {
		if _, overridden := st.b.sets[sk]; !overridden {
			out = append(out, st.d.sets[sk])
		}
	}
	for _, sk := range st.batchSetsOf[k] {
		out = append(out, *st.b.sets[sk])
	}
	slices.SortFunc(out, func(a, b EndpointSet) int { return a.Key.Compare(b.Key) })
	return out
}

func (d *Directory) commit(st *staged) {
	for k, u := range st.b.upstreams {
		if u == nil {
			delete(d.upstreams, k)
		} else {
			d.upstreams[k] = *u
		}
	}
	for k, l := range st.b.localities {
		if old, had := d.localities[k]; had {
			unindex(d.localitiesOf, Key{k.Namespace, old.Upstream}, k)
		}
		if l == nil {
			delete(d.localities, k)
			continue
		}
		d.localities[k] = *l
		index(d.localitiesOf, Key{k.Namespace, l.Upstream}, k)
	}
	for k, s := range st.b.sets {
		if old, had := d.sets[k]; had {
			unindex(d.setsOf, Key{k.Namespace, old.Upstream}, k)
		}
		if s == nil {
			delete(d.sets, k)
			continue
		}
		d.sets[k] = *s
		index(d.setsOf, Key{k.Namespace, s.Upstream}, k)
	}
}

func index(m map[Key]map[Key]struct{}, up, obj Key) {
	if m[up] == nil {
		m[up] = map[Key]struct{}{}
	}
	m[up][obj] = struct{}{}
}

func unindex(m map[Key]map[Key]struct{}, up, obj Key) {
	delete(m[up], obj)
	if len(m[up]) == 0 {
		delete(m, up)
	}
}

// orphans recomputes the orphan list only when an upstream appeared or went
// away, or an object named a missing upstream before or after the batch.
func (d *Directory) orphans(prev *Snapshot, st *staged) []ObjectRef {
	if !st.orphansChanged {
		return prev.orphans
	}
	var out []ObjectRef
	for up, objs := range d.localitiesOf {
		if _, ok := d.upstreams[up]; !ok {
			for k := range objs {
				out = append(out, ObjectRef{KindLocality, k})
			}
		}
	}
	for up, objs := range d.setsOf {
		if _, ok := d.upstreams[up]; !ok {
			for k := range objs {
				out = append(out, ObjectRef{d.sets[k].Kind, k})
			}
		}
	}
	out = append(out, d.spatialOrphans()...)
	slices.SortFunc(out, ObjectRef.compare)
	return out
}

func sortedKeys[V any](m map[Key]V) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, Key.Compare)
	return keys
}

// resolve places every endpoint of one upstream into its (priority,
// locality) group, then validates and computes it with pkg/weights.
func (d *Directory) resolve(st *staged, u Upstream) (*UpstreamState, *Problem) {
	locs := st.localitiesOf(u.Key)
	sets := st.setsOf(u.Key)

	type groupKey struct {
		priority uint32
		locality weights.Locality
	}
	byLocality := map[weights.Locality][]Locality{}
	for _, l := range locs {
		byLocality[l.Locality] = append(byLocality[l.Locality], l)
	}
	groups := map[groupKey]*Group{}
	group := func(k groupKey) *Group {
		g := groups[k]
		if g == nil {
			g = &Group{Priority: k.priority, Locality: k.locality, LocalityWeight: 1}
			groups[k] = g
		}
		return g
	}
	// Locality objects first: their weight, and a conflict between two of them.
	for _, l := range locs {
		g := group(groupKey{l.Priority, l.Locality})
		if len(g.LocalityObjects) > 0 && g.LocalityWeight != l.Weight {
			return nil, &Problem{
				Upstream: u.Key,
				Objects:  []ObjectRef{{KindLocality, g.LocalityObjects[0]}, {KindLocality, l.Key}},
				Err: fmt.Errorf("%w: Locality %s sets weight %d and Locality %s sets weight %d for priority %d locality %q",
					weights.ErrInconsistentTopology, g.LocalityObjects[0], g.LocalityWeight, l.Key, l.Weight, l.Priority, l.Locality.String()),
			}
		}
		g.LocalityWeight = l.Weight
		g.LocalityObjects = append(g.LocalityObjects, l.Key)
	}

	total := 0
	for _, s := range sets {
		total += len(s.Endpoints)
	}
	state := &UpstreamState{Upstream: u, Endpoints: make([]weights.Endpoint, 0, total), Origins: make([]Origin, 0, total)}
	for _, s := range sets {
		ref := ObjectRef{s.Kind, s.Key}
		var prio uint32
		switch matches := byLocality[s.Locality]; {
		case s.Priority != nil:
			prio = *s.Priority
		case len(matches) == 0:
			prio = 0
		default:
			prio = matches[0].Priority
			for _, m := range matches[1:] {
				if m.Priority != prio {
					return nil, &Problem{
						Upstream: u.Key,
						Objects:  []ObjectRef{ref, {KindLocality, matches[0].Key}, {KindLocality, m.Key}},
						Err: fmt.Errorf("%w: %s sets no priority and locality %q has Locality %s at priority %d and Locality %s at priority %d; set spec.priority",
							weights.ErrInconsistentTopology, ref, s.Locality.String(), matches[0].Key, prio, m.Key, m.Priority),
					}
				}
			}
		}
		g := group(groupKey{prio, s.Locality})
		g.Sets = append(g.Sets, ref)
		for _, e := range s.Endpoints {
			state.Endpoints = append(state.Endpoints, weights.Endpoint{
				Address: e.Address, Port: e.Port, Priority: prio, Locality: s.Locality,
				LocalityWeight: g.LocalityWeight, Weight: e.Weight, Admin: e.Admin,
				Probe: e.Health.Probe, Circuit: e.Health.Circuit, Ejected: e.Health.Ejected, Scope: e.Health.Scope,
			})
			state.Origins = append(state.Origins, Origin{Set: ref, Health: e.Health})
		}
	}
	state.Groups = make([]Group, 0, len(groups))
	for _, g := range groups {
		state.Groups = append(state.Groups, *g)
	}
	slices.SortFunc(state.Groups, func(a, b Group) int {
		if a.Priority != b.Priority {
			if a.Priority < b.Priority {
				return -1
			}
			return 1
		}
		return a.Locality.Compare(b.Locality)
	})

	res, err := d.calc.Compute(u.Policy, state.Endpoints)
	if err != nil {
		return nil, &Problem{Upstream: u.Key, Objects: state.involved(u, err), Err: err}
	}
	state.Result = res.Clone()
	return state, nil
}

// involved names the objects a weights error is about.
func (s *UpstreamState) involved(u Upstream, err error) []ObjectRef {
	var idx []int
	switch e := err.(type) {
	case *weights.DuplicateEndpointError:
		idx = e.Indexes[:]
	case *weights.InconsistentTopologyError:
		idx = e.Indexes[:]
	case *weights.InvalidWeightError:
		idx = []int{e.Index}
	case *weights.InvalidPriorityError:
		idx = []int{e.Index}
	case *weights.WeightOverflowError:
		for _, g := range s.Groups {
			if g.Priority == e.Priority && g.Locality == e.Locality {
				return append([]ObjectRef(nil), g.Sets...)
			}
		}
	}
	var out []ObjectRef
	for _, i := range idx {
		if ref := s.Origins[i].Set; !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	if len(out) == 0 {
		out = []ObjectRef{{KindUpstream, u.Key}}
	}
	return out
}
