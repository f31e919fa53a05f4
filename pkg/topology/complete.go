package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/suggest"
	"poise.dev/poise/pkg/weights"
)

// A complete topology is one whose every reference resolves: each Locality
// and EndpointSet names an Upstream that exists, each SpatialDomain replica
// too, each Partition a SpatialDomain that exists and replicas it has; and
// each Locality object matches some endpoint set of its Upstream (unless the
// Upstream imports a Service, whose endpoints a source may not see). A
// source that holds the whole truth at once (manifest files) requires it:
// there, a name no object defines is a mistake, not an object yet to come.
// A Kubernetes source, whose objects arrive in any order, does not; it
// reports the same conditions in status.

// Reasons of a reference that does not resolve; each matches its Problem's
// Err through errors.Is. The names are the Kubernetes conditions' reasons
// for the same mistakes.
var (
	// ErrUpstreamNotFound: a Locality, an EndpointSet or a SpatialDomain
	// replica names an Upstream that does not exist.
	ErrUpstreamNotFound = errors.New("UpstreamNotFound")
	// ErrUnknownDomain: a Partition names a SpatialDomain that does not exist.
	ErrUnknownDomain = errors.New("UnknownDomain")
	// ErrUnknownReplica: a Partition names a replica its SpatialDomain lacks.
	ErrUnknownReplica = errors.New("UnknownReplica")
	// ErrLocalityMatchesNothing: a Locality object places no endpoint set of
	// its Upstream, so the weight it gives applies to nothing.
	ErrLocalityMatchesNothing = errors.New("MatchesNoEndpoints")
)

// referenceError is a Problem's Err for a reference: its reason and what
// to say.
type referenceError struct {
	reason error
	detail string
}

func (e *referenceError) Error() string { return e.detail }
func (e *referenceError) Unwrap() error { return e.reason }

// RequireComplete makes every later batch leave the topology complete (see
// above), or be refused with a Problem per object it leaves naming what does
// not exist and per Locality object it leaves matching nothing, each with
// the field at fault. The Directory must not hold a topology applied without
// it (it checks what each batch changes, on a topology that was complete).
// Calling it again changes nothing.
func (d *Directory) RequireComplete() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.complete && d.current.Load().Revision > 0 {
		return errors.New("the directory already holds a topology that was not required to be complete")
	}
	d.complete = true
	return nil
}

// Dangling is an object that names an object that does not exist.
type Dangling struct {
	Object ObjectRef
	// Field is where it names it (spec.upstream, spec.replicas[0].upstream,
	// spec.domain).
	Field string
	// Target is what it names.
	Target ObjectRef
}

// Dangling returns the objects that would name an Upstream or a
// SpatialDomain that does not exist once b is applied, were the Directory's
// topology complete now: those b removes the target of, and those b puts
// naming a missing one. It applies nothing. A source that holds back a
// change which takes too much away counts them (a file that loses an
// Upstream leaves its Localities and endpoint sets naming nothing).
func (d *Directory) Dangling(b Batch) []Dangling {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stage(b)
	defer st.release()
	return st.dangling()
}

// dangling lists, sorted, the objects naming an Upstream or a SpatialDomain
// that does not exist after the batch, among those the batch could have
// left so: it puts them, or it removes what they name.
func (st *staged) dangling() []Dangling {
	var out []Dangling
	// the upstreams the batch removes or names that do not exist after it;
	// a first load names every upstream, and keeps none of them here
	var upstreams map[Key]struct{}
	consider := func(up Key) {
		if _, ok := st.upstream(up); !ok {
			if upstreams == nil {
				upstreams = map[Key]struct{}{}
			}
			upstreams[up] = struct{}{}
		}
	}
	for k, u := range st.b.upstreams {
		if u == nil {
			consider(k)
		}
	}
	for _, n := range st.batchLocalities {
		consider(n.upstream)
	}
	for _, n := range st.batchSets {
		consider(n.upstream)
	}
	for k, dom := range st.b.domains {
		if dom != nil {
			for _, r := range dom.Domain.Replicas {
				consider(Key{k.Namespace, r.Upstream})
			}
		}
	}
	for up := range upstreams {
		target := ObjectRef{KindUpstream, up}
		for _, l := range st.localitiesOf(nil, up) {
			out = append(out, Dangling{ObjectRef{KindLocality, l.Key}, "spec.upstream", target})
		}
		for _, s := range st.setsOf(nil, up) {
			out = append(out, Dangling{ObjectRef{s.Kind, s.Key}, "spec.upstream", target})
		}
		for _, dk := range st.domainsNaming(up) {
			dom, _ := st.domain(dk)
			for i, r := range dom.Domain.Replicas {
				if r.Upstream == up.Name {
					out = append(out, Dangling{ObjectRef{KindSpatialDomain, dk}, fmt.Sprintf("spec.replicas[%d].upstream", i), target})
				}
			}
		}
	}
	var domains map[Key]struct{}
	considerDomain := func(dk Key) {
		if _, ok := st.domain(dk); !ok {
			if domains == nil {
				domains = map[Key]struct{}{}
			}
			domains[dk] = struct{}{}
		}
	}
	for k, dom := range st.b.domains {
		if dom == nil {
			considerDomain(k)
		}
	}
	for k, p := range st.b.partitions {
		if p != nil {
			considerDomain(Key{k.Namespace, p.Domain})
		}
	}
	for dk := range domains {
		for _, pk := range st.partitionsOf(dk) {
			out = append(out, Dangling{ObjectRef{KindPartition, pk}, "spec.domain", ObjectRef{KindSpatialDomain, dk}})
		}
	}
	slices.SortFunc(out, func(a, b Dangling) int {
		if c := a.Object.compare(b.Object); c != 0 {
			return c
		}
		return strings.Compare(a.Field, b.Field)
	})
	return out
}

// domain is a SpatialDomain after the batch.
func (st *staged) domain(k Key) (SpatialDomain, bool) { return after(st.b.domains, st.d.domains, k) }

// set is an endpoint set after the batch.
func (st *staged) set(k Key) (EndpointSet, bool) { return after(st.b.sets, st.d.sets, k) }

// partition is a Partition after the batch.
func (st *staged) partition(k Key) (Partition, bool) {
	return after(st.b.partitions, st.d.partitions, k)
}

// domainsNaming lists, sorted, the SpatialDomains with a replica on
// upstream up after the batch.
func (st *staged) domainsNaming(up Key) []Key {
	var out []Key
	for dk := range st.d.domainsOf[up] {
		if _, changed := st.b.domains[dk]; !changed {
			out = append(out, dk)
		}
	}
	for dk, dom := range st.b.domains {
		if dom != nil && dk.Namespace == up.Namespace && slices.ContainsFunc(dom.Domain.Replicas, func(r partitionmap.Replica) bool { return r.Upstream == up.Name }) {
			out = append(out, dk)
		}
	}
	slices.SortFunc(out, Key.Compare)
	return out
}

// partitionsOf lists, sorted, the Partitions naming domain dk after the batch.
func (st *staged) partitionsOf(dk Key) []Key {
	var out []Key
	for pk := range st.d.partitionsOf[dk] {
		if _, changed := st.b.partitions[pk]; !changed {
			out = append(out, pk)
		}
	}
	for pk, p := range st.b.partitions {
		if p != nil && pk.Namespace == dk.Namespace && p.Domain == dk.Name {
			out = append(out, pk)
		}
	}
	slices.SortFunc(out, Key.Compare)
	return out
}

// maxReferenceProblems bounds the problems of references one batch is
// refused with; one more counts the rest.
const maxReferenceProblems = 50

// referenceProblems is why a batch would leave a complete topology
// incomplete: the objects it leaves naming what does not exist, the
// Partitions naming replicas their domain lacks, and the Locality objects
// of the upstreams it resolved (keys, states) that match nothing.
func (st *staged) referenceProblems(keys []Key, states []*UpstreamState) []Problem {
	var out []Problem
	hints := &nameHints{}
	// the endpoint sets naming a missing upstream, by where they are: a
	// Locality matching nothing there is most likely theirs
	var astray []EndpointSet
	for _, dg := range st.dangling() {
		// past the problems kept, only the count is said: no hint
		p := Problem{}
		if len(out) < maxReferenceProblems {
			p = hints.dangling(st, dg)
		}
		out = append(out, p)
		if s, ok := st.set(dg.Object.Key); ok && dg.Field == "spec.upstream" && dg.Object.Kind == s.Kind {
			astray = append(astray, s)
		}
	}
	out = append(out, st.unknownReplicas()...)
	for i, state := range states {
		if state == nil || state.Upstream.Service != nil {
			continue // gone, refused, or its endpoints are imported
		}
		out = append(out, unmatchedLocalities(keys[i], state, astray)...)
	}
	if len(out) > maxReferenceProblems {
		more := len(out) - maxReferenceProblems
		out = append(out[:maxReferenceProblems:maxReferenceProblems], Problem{
			Err: fmt.Errorf("and %d more objects naming what does not exist or matching nothing", more),
		})
	}
	return out
}

// nameHints answers "did you mean" for a name no object has: the names of
// the Upstreams and SpatialDomains after the batch, by namespace and by
// name. It is built only when a batch has a dangling reference.
type nameHints struct {
	built bool
	// names[kind][namespace] are the names in a namespace; namespaces[kind][name]
	// the namespaces a name is in.
	names      map[string]map[string][]string
	namespaces map[string]map[string][]string
}

func (h *nameHints) build(st *staged) {
	if h.built {
		return
	}
	h.built = true
	h.names = map[string]map[string][]string{KindUpstream: {}, KindSpatialDomain: {}}
	h.namespaces = map[string]map[string][]string{KindUpstream: {}, KindSpatialDomain: {}}
	add := func(kind string, k Key) {
		h.names[kind][k.Namespace] = append(h.names[kind][k.Namespace], k.Name)
		h.namespaces[kind][k.Name] = append(h.namespaces[kind][k.Name], k.Namespace)
	}
	for k := range st.d.upstreams {
		if _, ok := st.upstream(k); ok {
			add(KindUpstream, k)
		}
	}
	for k, u := range st.b.upstreams {
		if _, had := st.d.upstreams[k]; u != nil && !had {
			add(KindUpstream, k)
		}
	}
	for k := range st.d.domains {
		if _, ok := st.domain(k); ok {
			add(KindSpatialDomain, k)
		}
	}
	for k, dom := range st.b.domains {
		if _, had := st.d.domains[k]; dom != nil && !had {
			add(KindSpatialDomain, k)
		}
	}
	for _, m := range []map[string]map[string][]string{h.names, h.namespaces} {
		for _, byKey := range m {
			for _, list := range byKey {
				slices.Sort(list)
			}
		}
	}
}

// maxNamespacesShown bounds the other namespaces a hint names.
const maxNamespacesShown = 3

// dangling is the problem of one object naming what does not exist, with
// what it likely meant: a name of its namespace one slip away, or the same
// name in another namespace (an object that lost its metadata.namespace is
// read in namespace default).
func (h *nameHints) dangling(st *staged, dg Dangling) Problem {
	h.build(st)
	reason := ErrUpstreamNotFound
	if dg.Target.Kind == KindSpatialDomain {
		reason = ErrUnknownDomain
	}
	detail := fmt.Sprintf("no %s %s", dg.Target.Kind, dg.Target.Key)
	p := Problem{Upstream: dg.Target.Key, Objects: []ObjectRef{dg.Object}, Field: dg.Field}
	if dg.Target.Kind != KindUpstream {
		p.Upstream = Key{}
	}
	var others []string
	for _, ns := range h.namespaces[dg.Target.Kind][dg.Target.Key.Name] {
		if ns != dg.Target.Key.Namespace {
			others = append(others, ns)
		}
	}
	switch {
	case len(others) > 0:
		other := ObjectRef{dg.Target.Kind, Key{others[0], dg.Target.Key.Name}}
		p.Objects = append(p.Objects, other)
		a := article(other.Kind)
		switch {
		case other.Key.Namespace == "default":
			detail += fmt.Sprintf(" (%s %s %s exists: did it lose its metadata.namespace?)", a, other.Kind, other.Key)
		case dg.Object.Key.Namespace == "default":
			detail += fmt.Sprintf(" (%s %s %s exists: did this %s lose its metadata.namespace?)", a, other.Kind, other.Key, dg.Object.Kind)
		default:
			shown := others[:min(len(others), maxNamespacesShown)]
			detail += fmt.Sprintf(" (%s %s exists in namespace %s; an object names %s %s of its own namespace)",
				other.Kind, dg.Target.Key.Name, strings.Join(shown, ", "), a, other.Kind)
		}
	default:
		if near, ok := suggest.Closest(dg.Target.Key.Name, h.names[dg.Target.Kind][dg.Target.Key.Namespace]); ok {
			detail += fmt.Sprintf(" (did you mean %s?)", near)
			p.Objects = append(p.Objects, ObjectRef{dg.Target.Kind, Key{dg.Target.Key.Namespace, near}})
		}
	}
	p.Err = &referenceError{reason: reason, detail: detail}
	return p
}

// article is "a" or "an" before a kind.
func article(kind string) string {
	if strings.ContainsRune("AEIOU", rune(kind[0])) {
		return "an"
	}
	return "a"
}

// unknownReplicas is the problems of the Partitions that, after the batch,
// name a replica their SpatialDomain lacks, among those the batch puts and
// those of the domains it changes.
func (st *staged) unknownReplicas() []Problem {
	check := map[Key]struct{}{}
	for pk, p := range st.b.partitions {
		if p != nil {
			check[pk] = struct{}{}
		}
	}
	for dk, dom := range st.b.domains {
		if dom != nil {
			// the batch's own partitions are in check already
			for pk := range st.d.partitionsOf[dk] {
				check[pk] = struct{}{}
			}
		}
	}
	var out []Problem
	for pk := range check {
		p, ok := st.partition(pk)
		if !ok {
			continue
		}
		dk := Key{pk.Namespace, p.Domain}
		dom, ok := st.domain(dk)
		if !ok {
			continue // a dangling spec.domain, reported as such
		}
		names := make([]string, len(dom.Domain.Replicas))
		for i, r := range dom.Domain.Replicas {
			names[i] = r.Name
		}
		for i, r := range p.Replicas {
			if slices.Contains(names, r) {
				continue
			}
			detail := fmt.Sprintf("SpatialDomain %s has no replica %q", dk, r)
			if near, ok := suggest.Closest(r, names); ok {
				detail += fmt.Sprintf(" (did you mean %s?)", near)
			}
			out = append(out, Problem{Objects: []ObjectRef{{KindPartition, pk}, {KindSpatialDomain, dk}}, Field: fmt.Sprintf("spec.replicas[%d]", i),
				Err: &referenceError{reason: ErrUnknownReplica, detail: detail}})
		}
	}
	slices.SortFunc(out, func(a, b Problem) int {
		if c := a.Objects[0].compare(b.Objects[0]); c != 0 {
			return c
		}
		return strings.Compare(a.Field, b.Field)
	})
	return out
}

// unmatchedLocalities is the problems of upstream k's Locality objects that
// place no endpoint set: the field most likely at fault, and where the
// upstream's sets are that no Locality object places, or the set of astray
// (sets naming a missing upstream) that is where the Locality is.
func unmatchedLocalities(k Key, s *UpstreamState, astray []EndpointSet) []Problem {
	var out []Problem
	for _, g := range s.Groups {
		if len(g.LocalityObjects) == 0 || len(g.Sets) > 0 {
			continue
		}
		field, hint, near := unmatchedHint(s, g)
		if i := slices.IndexFunc(astray, func(a EndpointSet) bool {
			return a.Key.Namespace == k.Namespace && a.Locality == g.Locality && (a.Priority == nil || *a.Priority == g.Priority)
		}); i >= 0 {
			a := astray[i]
			ref := ObjectRef{a.Kind, a.Key}
			field, hint, near = "spec.upstream", fmt.Sprintf(" (%s is in that locality, and names Upstream %s)", ref, a.Upstream), &ref
		}
		for _, lk := range g.LocalityObjects {
			out = append(out, unmatchedProblem(k, g, lk, field, hint, near))
		}
	}
	return out
}

// UnmatchedLocality is the problem of Locality object lk of this upstream
// when it places no endpoint set, with the same "did you mean" a manifest
// set is refused with (but for endpoint sets naming a missing upstream,
// which the state does not hold); ok is false when lk places a group with
// endpoints, or places none in this state (it is not in the topology).
// A Kubernetes source, whose endpoints may be yet to come, reports it as
// a condition.
func (s *UpstreamState) UnmatchedLocality(lk Key) (p Problem, ok bool) {
	for _, g := range s.Groups {
		if !slices.Contains(g.LocalityObjects, lk) {
			continue
		}
		if len(g.Sets) > 0 {
			return Problem{}, false
		}
		field, hint, near := unmatchedHint(s, g)
		return unmatchedProblem(s.Upstream.Key, g, lk, field, hint, near), true
	}
	return Problem{}, false
}

// unmatchedProblem is the problem of Locality object lk of upstream k,
// which places group g and no endpoint set.
func unmatchedProblem(k Key, g Group, lk Key, field, hint string, near *ObjectRef) Problem {
	p := Problem{Upstream: k, Objects: []ObjectRef{{KindLocality, lk}}, Field: field}
	if near != nil {
		p.Objects = append(p.Objects, *near)
	}
	p.Err = &referenceError{reason: ErrLocalityMatchesNothing, detail: fmt.Sprintf(
		"matches no endpoints of Upstream %s: no endpoint set is in priority %d, locality %s%s",
		k, g.Priority, localityText(g.Locality), hint)}
	return p
}

// localityText names a locality as a person wrote it.
func localityText(l weights.Locality) string {
	parts := []string{fmt.Sprintf("region %q", l.Region)}
	if l.Zone != "" {
		parts = append(parts, fmt.Sprintf("zone %q", l.Zone))
	}
	if l.SubZone != "" {
		parts = append(parts, fmt.Sprintf("subZone %q", l.SubZone))
	}
	return strings.Join(parts, " ")
}

// unmatchedHint says which field of a Locality object that matches nothing
// is most likely at fault, why, and the endpoint set it likely meant: a set
// in its locality at another priority (spec.priority); else one whose
// locality is one slip away in one field, that no Locality object places;
// else the first of region, zone and subZone that no set of the upstream
// shares.
func unmatchedHint(s *UpstreamState, g Group) (field, hint string, near *ObjectRef) {
	for _, o := range s.Groups {
		if len(o.Sets) > 0 && o.Locality == g.Locality {
			return "spec.priority", fmt.Sprintf(" (%s is in that locality at priority %d)", o.Sets[0], o.Priority), &o.Sets[0]
		}
	}
	type part struct {
		field string
		of    func(weights.Locality) string
		same  func(a, b weights.Locality) bool // the other two fields agree
	}
	parts := []part{
		{"spec.region", func(l weights.Locality) string { return l.Region }, func(a, b weights.Locality) bool { return a.Zone == b.Zone && a.SubZone == b.SubZone }},
		{"spec.zone", func(l weights.Locality) string { return l.Zone }, func(a, b weights.Locality) bool { return a.Region == b.Region && a.SubZone == b.SubZone }},
		{"spec.subZone", func(l weights.Locality) string { return l.SubZone }, func(a, b weights.Locality) bool { return a.Region == b.Region && a.Zone == b.Zone }},
	}
	for _, pt := range parts {
		var values []string
		var sets []ObjectRef
		for _, o := range s.Groups {
			if len(o.Sets) > 0 && len(o.LocalityObjects) == 0 && pt.same(o.Locality, g.Locality) {
				values = append(values, pt.of(o.Locality))
				sets = append(sets, o.Sets[0])
			}
		}
		if v, ok := suggest.Closest(pt.of(g.Locality), values); ok {
			ref := sets[slices.Index(values, v)]
			name := strings.TrimPrefix(pt.field, "spec.")
			return pt.field, fmt.Sprintf(" (did you mean %s %q? %s is there, and no Locality object places it)", name, v, ref), &ref
		}
	}
	field = "spec.subZone"
	switch {
	case !slices.ContainsFunc(s.Groups, func(o Group) bool { return len(o.Sets) > 0 && o.Locality.Region == g.Locality.Region }):
		field = "spec.region"
	case !slices.ContainsFunc(s.Groups, func(o Group) bool {
		return len(o.Sets) > 0 && o.Locality.Region == g.Locality.Region && o.Locality.Zone == g.Locality.Zone
	}):
		field = "spec.zone"
	}
	return field, "", nil
}
