package topology

import (
	"fmt"
	"reflect"
	"slices"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/weights"
)

// Reasons of a SpatialProblem that come from the topology rather than the map.
const (
	// SpatialUpstreamNotFound: a replica names an Upstream that does not exist; the
	// replica has no capacity until it appears.
	SpatialUpstreamNotFound = "UpstreamNotFound"
	// SpatialDomainConflict: another namespace has a SpatialDomain of the same name,
	// which is matched on the same x-spatial-domain value; the first namespace wins.
	SpatialDomainConflict = "DomainConflict"
	// SpatialInvalidDomain: the domain cannot make a map (caught by admission and by
	// manifest validation; kept for objects that bypass both).
	SpatialInvalidDomain = "InvalidDomain"
)

// SpatialState is one SpatialDomain resolved against the topology: its partition map,
// the health of each replica's Upstream, and everything wrong with it. Problems never
// reject a batch: a bad Partition is left out of the map and the rest keeps serving.
type SpatialState struct {
	Domain SpatialDomain
	// Map is nil when the domain cannot be built or loses a name conflict (Problems say why).
	Map *partitionmap.Map
	// Replicas are the map's replicas in name order with their Upstream's state.
	Replicas []ReplicaState
	// Health is Replicas[i].Healthy, in the form partitionmap.Decide takes.
	Health []bool
	// Problems with the domain itself (Kind SpatialDomain) and its products.
	Problems []partitionmap.Problem
	// Partitions lists every Partition object of the domain, accepted or not, by key.
	Partitions []PartitionState
	// Revision is the last revision that changed anything here; MapRevision the last
	// that changed the map itself (domain or partitions).
	Revision    uint64
	MapRevision uint64
}

// ReplicaState is one replica and the Upstream behind it.
type ReplicaState struct {
	partitionmap.Replica
	Upstream Key
	Found    bool // the Upstream exists
	// Healthy: the Upstream routes and has eligible (not merely
	// panic-eligible) capacity in this snapshot.
	Healthy bool
}

// PartitionState is one Partition object and whether the map took it.
type PartitionState struct {
	Partition Partition
	Cells     int
	// Problem is nil when the partition is in the map.
	Problem *partitionmap.Problem
}

// Serving reports whether the domain is published.
func (s *SpatialState) Serving() bool { return s.Map != nil }

// Spatial returns every SpatialDomain in key order. Do not modify it.
func (s *Snapshot) Spatial() []*SpatialState { return s.spatial }

// SpatialDomain returns the state of one domain, or nil.
func (s *Snapshot) SpatialDomain(k Key) *SpatialState {
	i, ok := slices.BinarySearchFunc(s.spatial, k, func(st *SpatialState, k Key) int { return st.Domain.Key.Compare(k) })
	if !ok {
		return nil
	}
	return s.spatial[i]
}

// stageSpatial keeps the batch's spatial puts and deletes that change something.
func (st *staged) stageSpatial(b Batch) {
	for k, v := range b.domains {
		old, had := st.d.domains[k]
		if (v == nil && !had) || (v != nil && had && reflect.DeepEqual(old, *v)) {
			continue
		}
		setOp(&st.b.domains, k, v)
	}
	for k, v := range b.partitions {
		old, had := st.d.partitions[k]
		if (v == nil && !had) || (v != nil && had && reflect.DeepEqual(old, *v)) {
			continue
		}
		setOp(&st.b.partitions, k, v)
	}
}

func (st *staged) spatialChanged() bool { return len(st.b.domains) > 0 || len(st.b.partitions) > 0 }

// applySpatial commits the batch's spatial objects and recomputes every domain they or
// the changed upstreams touch. Costs grow with the domains touched, not with all.
func (d *Directory) applySpatial(prev *Snapshot, st *staged, upstreams []Key, next *Snapshot) []*SpatialState {
	if len(d.domains) == 0 && !st.spatialChanged() {
		return prev.spatial
	}
	// touched[k]: domain k needs a new state; true when its map must be rebuilt, false
	// when only its replicas' health may have changed.
	touched := map[Key]bool{}
	names := map[string]bool{}
	for k, v := range st.b.domains {
		touched[k] = true
		names[k.Name] = true
		if old, had := d.domains[k]; had {
			for _, r := range old.Domain.Replicas {
				unindex(d.domainsOf, Key{k.Namespace, r.Upstream}, k)
			}
		}
		if v == nil {
			delete(d.domains, k)
			continue
		}
		d.domains[k] = *v
		for _, r := range v.Domain.Replicas {
			index(d.domainsOf, Key{k.Namespace, r.Upstream}, k)
		}
	}
	for k, v := range st.b.partitions {
		if old, had := d.partitions[k]; had {
			dk := Key{k.Namespace, old.Domain}
			touched[dk] = true
			unindex(d.partitionsOf, dk, k)
		}
		if v == nil {
			delete(d.partitions, k)
			continue
		}
		d.partitions[k] = *v
		dk := Key{k.Namespace, v.Domain}
		touched[dk] = true
		index(d.partitionsOf, dk, k)
	}
	// A domain whose name another namespace shares may win or lose by this change.
	if len(names) > 0 {
		for k := range d.domains {
			if names[k.Name] {
				touched[k] = true
			}
		}
	}
	for _, up := range upstreams {
		for k := range d.domainsOf[up] {
			if _, rebuild := touched[k]; !rebuild {
				touched[k] = false
			}
		}
	}
	if len(touched) == 0 {
		return prev.spatial
	}
	states := map[Key]*SpatialState{}
	for k, rebuild := range touched {
		dom, ok := d.domains[k]
		if !ok {
			states[k] = nil
			continue
		}
		old := prev.SpatialDomain(k)
		var s *SpatialState
		if old != nil && !rebuild {
			s = d.refreshHealth(old, next)
		} else {
			s = d.buildSpatial(dom, next)
			s.MapRevision = next.Revision
			// The same content (e.g. a Partition added but left out) keeps the map and
			// its revision, so nothing is re-sent to the proxies.
			if old != nil && old.Map != nil && s.Map != nil && s.Map.Version() == old.Map.Version() {
				s.Map, s.MapRevision = old.Map, old.MapRevision
			}
		}
		if s == old {
			continue
		}
		s.Revision = next.Revision
		states[k] = s
	}
	if len(states) == 0 {
		return prev.spatial
	}
	out := make([]*SpatialState, 0, len(prev.spatial)+len(states))
	for _, s := range prev.spatial {
		if _, replaced := states[s.Domain.Key]; !replaced {
			out = append(out, s)
		}
	}
	for _, s := range states {
		if s != nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *SpatialState) int { return a.Domain.Key.Compare(b.Domain.Key) })
	return out
}

// conflictWinner is the domain that owns a name: the first namespace in order.
func (d *Directory) conflictWinner(name string) Key {
	var win Key
	for k := range d.domains {
		if k.Name == name && (win.Name == "" || k.Compare(win) < 0) {
			win = k
		}
	}
	return win
}

func (d *Directory) buildSpatial(dom SpatialDomain, snap *Snapshot) *SpatialState {
	k := dom.Key
	s := &SpatialState{Domain: dom}
	var parts []partitionmap.Partition
	var objs []Partition
	for pk := range d.partitionsOf[k] {
		objs = append(objs, d.partitions[pk])
	}
	slices.SortFunc(objs, func(a, b Partition) int { return a.Key.Compare(b.Key) })
	for _, p := range objs {
		parts = append(parts, partitionmap.Partition{Name: p.Key.Name, Extent: p.Extent, Replicas: p.Replicas})
	}
	if win := d.conflictWinner(k.Name); win != k {
		s.Problems = append(s.Problems, partitionmap.Problem{Kind: KindSpatialDomain, Name: k.Name, Field: "metadata.name",
			Reason: SpatialDomainConflict, Message: fmt.Sprintf("SpatialDomain %s has the same name and is matched first on x-spatial-domain: %q", win, k.Name)})
		for _, p := range objs {
			s.Partitions = append(s.Partitions, PartitionState{Partition: p, Problem: &s.Problems[0]})
		}
		return s
	}
	m, problems, err := partitionmap.Build(dom.Domain, parts)
	if err != nil {
		prob := partitionmap.Problem{Kind: KindSpatialDomain, Name: k.Name, Field: "spec", Reason: SpatialInvalidDomain, Message: err.Error()}
		s.Problems = append(s.Problems, prob)
		for _, p := range objs {
			s.Partitions = append(s.Partitions, PartitionState{Partition: p, Problem: &prob})
		}
		return s
	}
	s.Map = m
	byPartition := map[string]*partitionmap.Problem{}
	for i := range problems {
		if problems[i].Kind == "Partition" {
			byPartition[problems[i].Name] = &problems[i]
		} else {
			s.Problems = append(s.Problems, problems[i])
		}
	}
	for _, p := range objs {
		ps := PartitionState{Partition: p, Problem: byPartition[p.Key.Name]}
		if ps.Problem == nil {
			ps.Cells = m.PartitionCells(p.Extent)
		}
		s.Partitions = append(s.Partitions, ps)
	}
	for _, r := range m.Replicas() {
		s.Replicas = append(s.Replicas, ReplicaState{Replica: r, Upstream: Key{k.Namespace, r.Upstream}})
	}
	d.fillHealth(s, snap)
	return s
}

// refreshHealth returns old itself when no replica's upstream changed its health, so an
// endpoint change inside a healthy replica does not touch the domain.
func (d *Directory) refreshHealth(old *SpatialState, snap *Snapshot) *SpatialState {
	if old.Map == nil {
		return old
	}
	s := *old
	s.Replicas = slices.Clone(old.Replicas)
	s.Health = nil
	s.Problems = slices.DeleteFunc(slices.Clone(old.Problems), func(p partitionmap.Problem) bool { return p.Reason == SpatialUpstreamNotFound })
	d.fillHealth(&s, snap)
	if slices.Equal(s.Health, old.Health) && reflect.DeepEqual(s.Replicas, old.Replicas) {
		return old
	}
	return &s
}

// servesEligible says whether an upstream can serve a replica's data: it
// routes, and some of its capacity is eligible. Capacity that is only
// panic-eligible (every probe failing, say, under UseAll) still carries the
// upstream's own traffic, but a replica on it is not one spatial routing
// should prefer over a healthy one: health removes replicas that cannot
// serve.
func servesEligible(r *weights.Result) bool {
	if r == nil || r.Outcome != weights.Routable {
		return false
	}
	for i := range r.Endpoints {
		if r.Endpoints[i].Eligible {
			return true
		}
	}
	return false
}

func (d *Directory) fillHealth(s *SpatialState, snap *Snapshot) {
	for i := range s.Replicas {
		r := &s.Replicas[i]
		u := snap.Upstream(r.Upstream)
		r.Found = u != nil
		r.Healthy = u != nil && servesEligible(u.Result)
		s.Health = append(s.Health, r.Healthy)
		if !r.Found {
			s.Problems = append(s.Problems, partitionmap.Problem{Kind: KindSpatialDomain, Name: s.Domain.Key.Name,
				Field: fmt.Sprintf("spec.replicas[%s].upstream", r.Name), Reason: SpatialUpstreamNotFound,
				Message: fmt.Sprintf("Upstream %s not found: replica %s has no capacity", r.Upstream, r.Name)})
		}
	}
}

// spatialOrphans lists the Partitions whose SpatialDomain does not exist.
func (d *Directory) spatialOrphans() []ObjectRef {
	var out []ObjectRef
	for dk, parts := range d.partitionsOf {
		if _, ok := d.domains[dk]; !ok {
			for k := range parts {
				out = append(out, ObjectRef{KindPartition, k})
			}
		}
	}
	return out
}

// ObjectProblem is something wrong with one spatial object. It never rejects a batch;
// sources without a status to write (manifest files) print or log it.
type ObjectProblem struct {
	Object  ObjectRef
	Field   string
	Reason  string
	Message string
}

func (p ObjectProblem) String() string {
	return fmt.Sprintf("%s: %s: %s (%s)", p.Object, p.Field, p.Message, p.Reason)
}

// SpatialProblems lists every problem of every spatial domain and partition, in object order.
func (s *Snapshot) SpatialProblems() []ObjectProblem {
	var out []ObjectProblem
	for _, st := range s.spatial {
		for _, p := range st.Problems {
			out = append(out, ObjectProblem{Object: ObjectRef{KindSpatialDomain, st.Domain.Key}, Field: p.Field, Reason: p.Reason, Message: p.Message})
		}
		for _, ps := range st.Partitions {
			if ps.Problem != nil && ps.Problem.Kind == KindPartition {
				out = append(out, ObjectProblem{Object: ObjectRef{KindPartition, ps.Partition.Key}, Field: ps.Problem.Field,
					Reason: ps.Problem.Reason, Message: ps.Problem.Message + "; the partition is left out of the map"})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b ObjectProblem) int { return a.Object.compare(b.Object) })
	return out
}
