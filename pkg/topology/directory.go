package topology

import (
	"fmt"
	"runtime"
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
	checks     overlay[CheckVerdict]
	outliers   overlay[OutlierVerdict]
	// replaceChecks, replaceOutliers: upstreams whose verdicts of that kind
	// the batch does not name are withdrawn
	replaceChecks, replaceOutliers map[Key]struct{}
	// demand applied to Balanced upstreams, and the client classes when set
	demand  map[Key]AppliedDemand
	classes *ClientClasses
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
	if s.LocalityWeight != nil {
		w := *s.LocalityWeight
		s.LocalityWeight = &w
	}
	if s.Kind == "" {
		s.Kind = KindEndpointSet
	}
	s.addresses = checkAddresses(s.Endpoints)
	setOp(&b.sets, s.Key, &s)
}

// DeleteEndpointSet removes an endpoint set.
func (b *Batch) DeleteEndpointSet(k Key) { setOp(&b.sets, k, nil) }

// Len is the number of objects the batch touches.
func (b *Batch) Len() int {
	n := len(b.upstreams) + len(b.localities) + len(b.sets) + len(b.domains) + len(b.partitions)
	for _, vs := range b.checks {
		n += len(vs)
	}
	for _, vs := range b.outliers {
		n += len(vs)
	}
	n += len(b.demand)
	if b.classes != nil {
		n++
	}
	return n + len(b.replaceChecks) + len(b.replaceOutliers)
}

// reserve makes an empty map room for n entries: a first load fills it
// without growing it step by step.
func reserve[V any](m *map[Key]V, n int) {
	if len(*m) == 0 && n > 8 {
		*m = make(map[Key]V, n)
	}
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
	// checks: active health check verdicts by upstream, merged into the
	// endpoints' probe signal when the upstream is resolved
	checks overlay[CheckVerdict]
	// outliers: fleet outlier detection's ejections by upstream, merged
	// into the endpoints' outlier signal likewise
	outliers overlay[OutlierVerdict]
	// demand: the demand applied to each Balanced upstream, carried by its
	// state; classes: the client classes with clients (demand.go)
	demand  map[Key]AppliedDemand
	classes *ClientClasses
	// scratch is reused by every Apply (they are serialized), so a small
	// change allocates only what the new snapshot keeps.
	scratch applyScratch
	// complete: every batch must leave the topology complete
	// (RequireComplete).
	complete bool

	current atomic.Pointer[Snapshot]
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
		checks:       overlay[CheckVerdict]{},
		outliers:     overlay[OutlierVerdict]{},
		demand:       map[Key]AppliedDemand{},
		classes:      noClasses,
	}
	d.current.Store(&Snapshot{classes: noClasses, superseded: make(chan struct{})})
	return d
}

// Current returns the latest published snapshot.
func (d *Directory) Current() *Snapshot { return d.current.Load() }

// Changed returns a channel that is closed when a snapshot newer than the
// current one is published. Readers then call Current, so a slow reader
// skips straight to the newest revision.
func (d *Directory) Changed() <-chan struct{} { return d.current.Load().superseded }

// Apply applies a batch atomically: every affected upstream is resolved,
// validated and computed; if any fails the batch is rejected whole with a
// *BatchError and the current snapshot is unchanged. A batch that changes
// nothing returns the current snapshot without a new revision.
func (d *Directory) Apply(b Batch) (*Snapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()

	st := d.stage(b)
	defer st.release()
	prev := d.current.Load()
	if len(st.affected) == 0 && !st.objectsChanged && !st.spatialChanged() && st.classes == nil {
		// verdicts and demand on upstreams that do not exist (or, for
		// demand, are not Balanced) change no snapshot, but are kept for
		// when they do
		d.commitChecks(st)
		d.commitDemand(st)
		return prev, nil
	}
	rev := prev.Revision + 1

	var problems []Problem
	keys := make([]Key, 0, len(st.affected)) // kept by the snapshot's change set
	for k := range st.affected {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, Key.Compare)
	states := d.resolveAll(st, prev, keys, rev)
	defer func() { d.scratch.states, d.scratch.problems = clearSlice(states), clearSlice(d.scratch.problems) }()
	for _, p := range d.scratch.problems {
		if p != nil {
			problems = append(problems, *p)
		}
	}
	if d.complete {
		problems = append(problems, st.referenceProblems(keys, states)...)
	}
	if len(problems) > 0 {
		return prev, &BatchError{Problems: problems}
	}
	if st.spatialChanged() {
		st.orphansChanged = true
	}
	d.commit(st)
	next := &Snapshot{Revision: rev, list: prev.list.merge(keys, states), changes: newChangeSet(rev, keys, prev.changes),
		classes: d.classes, superseded: make(chan struct{})}
	next.spatial = d.applySpatial(prev, st, keys, next)
	next.orphans = d.orphans(prev, st)
	d.current.Store(next)
	close(prev.superseded)
	return next, nil
}

// staged is a batch laid over the directory's state: reads see the batch
// first, and nothing is written until commit. The Directory reuses one.
type staged struct {
	d        *Directory
	b        Batch
	affected map[Key]struct{}
	// the batch's puts indexed by the upstream they name, sorted
	batchLocalities []namedBy
	batchSets       []namedBy
	// checks: the batch's verdicts that change something, by upstream
	checks   overlay[CheckVerdict]
	outliers overlay[OutlierVerdict]
	// orphansChanged: the orphan list may differ from the previous snapshot's
	orphansChanged bool
	// objectsChanged: some locality or set changed even if no upstream is affected (orphans)
	objectsChanged bool
	// demand: the batch's demands that change something; classes: the
	// batch's client classes when they differ from the Directory's
	demand  map[Key]AppliedDemand
	classes *ClientClasses
}

// namedBy is an object of a batch and the upstream it names.
type namedBy struct{ upstream, object Key }

func compareNamedBy(a, b namedBy) int {
	if c := a.upstream.Compare(b.upstream); c != 0 {
		return c
	}
	return a.object.Compare(b.object)
}

// of returns the objects naming upstream k in a sorted list.
func of(list []namedBy, k Key) []namedBy {
	i, _ := slices.BinarySearchFunc(list, k, func(n namedBy, k Key) int {
		return n.upstream.Compare(k)
	})
	j := i
	for j < len(list) && list[j].upstream == k {
		j++
	}
	return list[i:j]
}

func (d *Directory) stage(b Batch) *staged {
	st := &d.scratch.st
	st.d = d
	if st.affected == nil {
		st.affected = map[Key]struct{}{}
	}
	st.stageSpatial(b)
	reserve(&st.b.upstreams, len(b.upstreams))
	reserve(&st.b.localities, len(b.localities))
	reserve(&st.b.sets, len(b.sets))
	for k, u := range b.upstreams {
		old, had := d.upstreams[k]
		if (u == nil && !had) || (u != nil && had && old.equal(u)) {
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
		if (l == nil && !had) || (l != nil && had && old == *l) {
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
			st.batchLocalities = append(st.batchLocalities, namedBy{up, k})
		}
	}
	for k, s := range b.sets {
		old, had := d.sets[k]
		if (s == nil && !had) || (s != nil && had && old.equal(s)) {
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
			st.batchSets = append(st.batchSets, namedBy{up, k})
		}
	}
	slices.SortFunc(st.batchLocalities, compareNamedBy)
	slices.SortFunc(st.batchSets, compareNamedBy)
	st.stageChecks(b)
	st.stageDemand(b)
	return st
}

// release empties the staged batch for the next Apply. Maps that grew large
// (a first load) are dropped rather than cleared, so their buckets do not
// stay allocated for the life of the Directory.
func (st *staged) release() {
	st.b.upstreams = clearOrDrop(st.b.upstreams)
	st.b.localities = clearOrDrop(st.b.localities)
	st.b.sets = clearOrDrop(st.b.sets)
	st.b.domains = clearOrDrop(st.b.domains)
	st.b.partitions = clearOrDrop(st.b.partitions)
	st.affected = clearOrDrop(st.affected)
	st.batchLocalities = clearSlice(st.batchLocalities)
	st.batchSets = clearSlice(st.batchSets)
	st.checks, st.outliers = nil, nil
	st.demand, st.classes = nil, nil
	st.orphansChanged, st.objectsChanged = false, false
}

// scratchLimit is the size above which scratch space is given back rather than kept.
const scratchLimit = 1024

func clearOrDrop[V any](m map[Key]V) map[Key]V {
	if len(m) > scratchLimit {
		return nil
	}
	clear(m)
	return m
}

func clearSlice[S ~[]E, E any](s S) S {
	if cap(s) > scratchLimit {
		return nil
	}
	clear(s[:cap(s)])
	return s[:0]
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

func (st *staged) upstream(k Key) (Upstream, bool) { return after(st.b.upstreams, st.d.upstreams, k) }

// after is object k once the batch's puts and deletes of its kind (batch)
// are laid over the directory's (cur).
func after[V any](batch map[Key]*V, cur map[Key]V, k Key) (V, bool) {
	if v, ok := batch[k]; ok {
		if v == nil {
			var none V
			return none, false
		}
		return *v, true
	}
	v, ok := cur[k]
	return v, ok
}

// localitiesOf appends the Locality objects naming upstream k after the batch, sorted by key.
func (st *staged) localitiesOf(out []Locality, k Key) []Locality {
	for lk := range st.d.localitiesOf[k] {
		if _, overridden := st.b.localities[lk]; !overridden {
			out = append(out, st.d.localities[lk])
		}
	}
	for _, n := range of(st.batchLocalities, k) {
		out = append(out, *st.b.localities[n.object])
	}
	slices.SortFunc(out, func(a, b Locality) int { return a.Key.Compare(b.Key) })
	return out
}

// setsOf appends the endpoint sets naming upstream k after the batch, sorted by key.
func (st *staged) setsOf(out []EndpointSet, k Key) []EndpointSet {
	for sk := range st.d.setsOf[k] {
		if _, overridden := st.b.sets[sk]; !overridden {
			out = append(out, st.d.sets[sk])
		}
	}
	for _, n := range of(st.batchSets, k) {
		out = append(out, *st.b.sets[n.object])
	}
	slices.SortFunc(out, func(a, b EndpointSet) int { return a.Key.Compare(b.Key) })
	return out
}

func (d *Directory) commit(st *staged) {
	reserve(&d.upstreams, len(st.b.upstreams))
	reserve(&d.localities, len(st.b.localities))
	reserve(&d.sets, len(st.b.sets))
	reserve(&d.setsOf, len(st.b.upstreams))
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
	d.commitChecks(st)
	d.commitDemand(st)
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

// parallelResolve is how many affected upstreams make Apply resolve them on
// every core: a first load, or a large batch.
const parallelResolve = 256

// resolveAll resolves the upstreams of keys (nil for one that is gone), in
// parallel when there are many; problems land in d.scratch.problems by key.
func (d *Directory) resolveAll(st *staged, prev *Snapshot, keys []Key, rev uint64) []*UpstreamState {
	sc := &d.scratch
	states, problems := sc.states[:0], sc.problems[:0]
	for range keys {
		states, problems = append(states, nil), append(problems, nil)
	}
	sc.problems = problems
	job := resolveJob{st: st, prev: prev, keys: keys, rev: rev, states: states, problems: problems}
	workers := min(runtime.GOMAXPROCS(0), len(keys)/parallelResolve+1)
	for len(sc.resolvers) < workers {
		sc.resolvers = append(sc.resolvers, &resolver{calc: weights.NewCalculator()})
	}
	if workers <= 1 {
		for i := range keys {
			job.one(sc.resolvers[0], i)
		}
		return states
	}
	shared := job // only the parallel path's copy goes to the heap
	var wg sync.WaitGroup
	for w := range workers {
		r := sc.resolvers[w]
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				shared.one(r, i)
			}
		})
	}
	wg.Wait()
	return states
}

// resolveJob is what resolveAll resolves: a method rather than a closure, so
// that resolving one upstream on the caller's goroutine allocates nothing for it.
type resolveJob struct {
	st       *staged
	prev     *Snapshot
	keys     []Key
	rev      uint64
	states   []*UpstreamState
	problems []*Problem
}

func (j *resolveJob) one(r *resolver, i int) {
	k := j.keys[i]
	u, ok := j.st.upstream(k)
	if !ok {
		return
	}
	state, prob := r.resolve(j.st, u)
	if prob != nil {
		j.problems[i] = prob
		return
	}
	state.Revision = j.rev
	state.ClusterRevision = j.rev
	if old := j.prev.Upstream(k); old != nil && !j.st.upstreamChanged(k) {
		state.ClusterRevision = old.ClusterRevision
	}
	j.states[i] = state
}

// applyScratch is the working space of Apply.
type applyScratch struct {
	st        staged
	states    []*UpstreamState
	problems  []*Problem
	resolvers []*resolver // one per core that resolves
}

// resolver is the working space of resolving one upstream at a time.
type resolver struct {
	calc   *weights.Calculator
	locs   []Locality
	sets   []EndpointSet
	groups []groupBuild
	// groupOf: (priority, locality) → index in groups
	groupOf map[groupKey]int
	// byLocality: locality → the first Locality object naming it and, when
	// another names it at a different priority, that one
	byLocality map[weights.Locality]localityMatch
	setGroup   []int // the group of each set
}

type groupKey struct {
	priority uint32
	locality weights.Locality
}

// groupBuild is a group while it is resolved.
type groupBuild struct {
	Group
	firstLocality int // index in locs of the Locality object that set its weight, -1 for none
	localities    int // how many Locality objects
	sets          int // how many endpoint sets
	setWeight     int // index in sets of the set whose LocalityWeight weighs it, -1 for none
}

type localityMatch struct{ first, conflict int }

// stateWithResult allocates an upstream's state and its result together.
type stateWithResult struct {
	state  UpstreamState
	result weights.Result
}

// resolve places every endpoint of one upstream into its (priority,
// locality) group, then validates and computes it with pkg/weights.
func (sc *resolver) resolve(st *staged, u Upstream) (*UpstreamState, *Problem) {
	locs := st.localitiesOf(sc.locs[:0], u.Key)
	sets := st.setsOf(sc.sets[:0], u.Key)
	sc.locs, sc.sets = locs, sets
	if sc.groupOf == nil {
		sc.groupOf, sc.byLocality = map[groupKey]int{}, map[weights.Locality]localityMatch{}
	}
	groups := sc.groups[:0]
	defer func() {
		sc.locs, sc.sets, sc.groups = clearSlice(locs), clearSlice(sets), clearSlice(groups)
		clear(sc.groupOf)
		clear(sc.byLocality)
	}()
	group := func(k groupKey) int {
		gi, ok := sc.groupOf[k]
		if !ok {
			gi = len(groups)
			groups = append(groups, groupBuild{Group: Group{Priority: k.priority, Locality: k.locality, LocalityWeight: 1}, firstLocality: -1, setWeight: -1})
			sc.groupOf[k] = gi
		}
		return gi
	}
	// Locality objects first: their weight, and a conflict between two of them.
	for i, l := range locs {
		if m, ok := sc.byLocality[l.Locality]; !ok {
			sc.byLocality[l.Locality] = localityMatch{first: i, conflict: -1}
		} else if m.conflict < 0 && locs[m.first].Priority != l.Priority {
			m.conflict = i
			sc.byLocality[l.Locality] = m
		}
		g := &groups[group(groupKey{l.Priority, l.Locality})]
		if g.firstLocality >= 0 && g.LocalityWeight != l.Weight {
			first := locs[g.firstLocality].Key
			return nil, &Problem{
				Upstream: u.Key,
				Objects:  []ObjectRef{{KindLocality, first}, {KindLocality, l.Key}},
				Err: fmt.Errorf("%w: Locality %s sets weight %d and Locality %s sets weight %d for priority %d locality %q",
					weights.ErrInconsistentTopology, first, g.LocalityWeight, l.Key, l.Weight, l.Priority, l.Locality.String()),
			}
		}
		if g.firstLocality < 0 {
			g.firstLocality = i
		}
		g.LocalityWeight = l.Weight
		g.localities++
	}

	total := 0
	setGroup := sc.setGroup[:0]
	for i := range sets {
		s := &sets[i]
		if p := addressProblem(u, s); p != nil {
			sc.setGroup = setGroup
			return nil, p
		}
		total += len(s.Endpoints)
		var prio uint32
		switch m, ok := sc.byLocality[s.Locality]; {
		case s.Priority != nil:
			prio = *s.Priority
		case !ok:
			prio = 0
		case m.conflict >= 0:
			ref, first, other := ObjectRef{s.Kind, s.Key}, locs[m.first], locs[m.conflict]
			sc.setGroup = setGroup
			return nil, &Problem{
				Upstream: u.Key,
				Objects:  []ObjectRef{ref, {KindLocality, first.Key}, {KindLocality, other.Key}},
				Err: fmt.Errorf("%w: %s sets no priority and locality %q has Locality %s at priority %d and Locality %s at priority %d; set spec.priority",
					weights.ErrInconsistentTopology, ref, s.Locality.String(), first.Key, first.Priority, other.Key, other.Priority),
			}
		default:
			prio = locs[m.first].Priority
		}
		gi := group(groupKey{prio, s.Locality})
		// a set's own locality weight (an imported cluster's) weighs a
		// group no Locality object weighs; two that differ contradict
		if g := &groups[gi]; s.LocalityWeight != nil && g.firstLocality < 0 {
			if g.setWeight >= 0 && *sets[g.setWeight].LocalityWeight != *s.LocalityWeight {
				first := &sets[g.setWeight]
				sc.setGroup = setGroup
				return nil, &Problem{
					Upstream: u.Key,
					Objects:  []ObjectRef{{first.Kind, first.Key}, {s.Kind, s.Key}},
					Err: fmt.Errorf("%w: %s weighs priority %d locality %q %d and %s weighs it %d; add a Locality object to decide",
						weights.ErrInconsistentTopology, ObjectRef{first.Kind, first.Key}, prio, s.Locality.String(), *first.LocalityWeight, ObjectRef{s.Kind, s.Key}, *s.LocalityWeight),
				}
			}
			if g.setWeight < 0 {
				g.setWeight = i
				g.LocalityWeight = *s.LocalityWeight
			}
		}
		groups[gi].sets++
		setGroup = append(setGroup, gi)
	}
	sc.setGroup = setGroup

	// One allocation each for the state with its result, the endpoints, their
	// origins, the groups, and the objects of all groups.
	alloc := &stateWithResult{}
	state := &alloc.state
	state.Upstream = u
	state.Demand = st.demandFor(u)
	state.Endpoints = make([]weights.Endpoint, 0, total)
	state.Origins = make([]Origin, 0, total)
	var localityKeys []Key
	if len(locs) > 0 {
		localityKeys = make([]Key, 0, len(locs))
	}
	setRefs := make([]ObjectRef, 0, len(sets))
	for i := range groups {
		g := &groups[i]
		g.LocalityObjects = localityKeys[len(localityKeys) : len(localityKeys) : len(localityKeys)+g.localities]
		localityKeys = localityKeys[:len(localityKeys)+g.localities]
		g.Sets = setRefs[len(setRefs) : len(setRefs) : len(setRefs)+g.sets]
		setRefs = setRefs[:len(setRefs)+g.sets]
	}
	for _, l := range locs {
		g := &groups[sc.groupOf[groupKey{l.Priority, l.Locality}]]
		g.LocalityObjects = append(g.LocalityObjects, l.Key)
	}
	// merged holds the health of endpoints with a check or outlier verdict (the sets'
	// own are never modified); one allocation, sized by a first pass, so the
	// pointers into it stay valid. Upstreams without verdicts skip both.
	var merged []Health
	checked := st.hasChecks(u.Key)
	if checked {
		n := 0
		for _, s := range sets {
			for ei := range s.Endpoints {
				a := checkAddr{s.Endpoints[ei].Address, s.Endpoints[ei].Port}
				cv, c := st.checkOf(u.Key, a)
				ov, o := st.outlierOf(u.Key, a)
				if c && cv.Generation == s.Endpoints[ei].Generation || o && ov.Generation == s.Endpoints[ei].Generation {
					n++
				}
			}
		}
		merged = make([]Health, 0, n)
	}
	for si, s := range sets {
		g := &groups[setGroup[si]]
		ref := ObjectRef{s.Kind, s.Key}
		g.Sets = append(g.Sets, ref)
		for ei := range s.Endpoints {
			e := &s.Endpoints[ei]
			h := &e.Health
			if checked {
				a := checkAddr{e.Address, e.Port}
				v, c := st.checkOf(u.Key, a)
				o, out := st.outlierOf(u.Key, a)
				// a verdict holds for the generation it was reached on only
				c = c && v.Generation == e.Generation
				out = out && o.Generation == e.Generation
				if c || out {
					m := e.Health
					if c {
						m = mergeProbe(m, v)
					}
					if out {
						m = mergeOutlier(m, o)
					}
					merged = append(merged, m)
					h = &merged[len(merged)-1]
				}
			}
			state.Endpoints = append(state.Endpoints, weights.Endpoint{
				Address: e.Address, Port: e.Port, Priority: g.Priority, Locality: s.Locality,
				LocalityWeight: g.LocalityWeight, Weight: e.Weight, Admin: e.Admin,
				Probe: h.Probe, Circuit: h.Circuit, Ejected: h.Ejected, Scope: h.Scope,
			})
			state.Origins = append(state.Origins, Origin{Set: ref, Health: h, HashKey: e.HashKey, Generation: e.Generation})
		}
	}
	state.Groups = make([]Group, len(groups))
	for i := range groups {
		state.Groups[i] = groups[i].Group
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

	res, err := sc.calc.Compute(u.Policy, state.Endpoints)
	if err != nil {
		return nil, &Problem{Upstream: u.Key, Objects: state.involved(u, err), Err: err}
	}
	res.CloneInto(&alloc.result)
	state.Result = &alloc.result
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
