package status

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// +kubebuilder:rbac:groups=poise.dev,resources=upstreams/status;localities/status;endpointsets/status;spatialdomains/status;partitions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// The status of each kind is a pure function of the object, its own part of
// the snapshot (its upstream's state, its domain's state), its rejection and,
// for Programmed, whether that part is published. Nothing global (the
// snapshot's revision, another upstream's figures) appears in it, so a change
// elsewhere leaves it byte-identical and unwritten.

func keyOf(o client.Object) topology.Key {
	return topology.Key{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// groupNote says when an EndpointSet's group took the default priority and weight.
func groupNote(u *topology.UpstreamState, set topology.Key) string {
	for _, g := range u.Groups {
		for _, ref := range g.Sets {
			if ref.Kind == topology.KindEndpointSet && ref.Key == set && len(g.LocalityObjects) == 0 {
				return fmt.Sprintf("no Locality object matches locality %q: priority %d, weight 1", g.Locality.String(), g.Priority)
			}
		}
	}
	return ""
}

// setAccepted sets the Accepted condition of a Locality or EndpointSet.
func setAccepted(conds *[]metav1.Condition, gen int64, rej *conditions.Rejection, upstreamExists bool, note string) {
	c := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAccepted, ObservedGeneration: gen, Message: "in the topology"}
	switch {
	case rej != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, rej.Reason, rej.Message
	case !upstreamExists:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonUpstreamNotFound, "the Upstream it names does not exist; it takes effect when it does"
	case note != "":
		c.Reason, c.Message = conditions.ReasonDefaulted, note
	}
	meta.SetStatusCondition(conds, c)
}

// localityStatus is the status a Locality should have: its conditions and
// what the group it places receives in the served topology.
func localityStatus(l *v1alpha1.Locality, snap *topology.Snapshot, rej *conditions.Rejection) v1alpha1.LocalityObjectStatus {
	want := *l.Status.DeepCopy()
	want.ObservedGeneration = l.Generation
	u := snap.Upstream(topology.Key{Namespace: l.Namespace, Name: l.Spec.Upstream})
	setAccepted(&want.Conditions, l.Generation, rej, u != nil, "")
	if rej == nil && u != nil {
		meta.SetStatusCondition(&want.Conditions, localityRefs(l, u))
	} else {
		// not in the topology: Accepted says why
		meta.RemoveStatusCondition(&want.Conditions, v1alpha1.ConditionResolvedRefs)
	}
	want.Traffic, want.Availability, want.EffectiveWeight, want.ShareInPriority = nil, nil, nil, nil
	want.TrafficPercent, want.AvailabilityPercent = "", ""
	if lr, ok := localityShares(u, keyOf(l)); ok {
		want.Traffic, want.Availability = new(int64(lr.Traffic)), new(int64(lr.Availability))
		want.EffectiveWeight, want.ShareInPriority = new(int64(lr.EffectiveWeight)), new(int64(lr.ShareInPriority))
		want.TrafficPercent, want.AvailabilityPercent = percent(lr.Traffic), percent(lr.Availability)
	}
	return want
}

// localityRefs is the ResolvedRefs condition of an accepted Locality whose
// Upstream u is in the topology: whether any endpoints of u are in its
// priority and locality, and when none are, the field most likely at
// fault and what it likely meant (the refusal of the same Locality in
// manifest files, where it is an error).
func localityRefs(l *v1alpha1.Locality, u *topology.UpstreamState) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: conditions.ReasonResolved,
		ObservedGeneration: l.Generation, Message: fmt.Sprintf("endpoints of Upstream %s are in its priority and locality", u.Upstream.Key)}
	placed := slices.ContainsFunc(u.Groups, func(g topology.Group) bool { return slices.Contains(g.LocalityObjects, keyOf(l)) })
	switch p, unmatched := u.UnmatchedLocality(keyOf(l)); {
	case unmatched:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonMatchesNoEndpoints, conditions.Clip(p.Field+": "+p.Err.Error(), maxMessage)
	case !placed:
		// the topology does not hold this generation yet (a write waits
		// for it, up to the publish grace)
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, v1alpha1.ReasonPending, "not yet in the topology"
	}
	return c
}

// localityShares finds the computed group that the Locality object key
// placed in u (nil when the upstream is not in the topology).
func localityShares(u *topology.UpstreamState, key topology.Key) (weights.LocalityResult, bool) {
	if u == nil || u.Result == nil {
		return weights.LocalityResult{}, false
	}
	for _, g := range u.Groups {
		if !slices.Contains(g.LocalityObjects, key) {
			continue
		}
		for _, lr := range u.Result.Localities {
			if lr.Priority == g.Priority && lr.Locality == g.Locality {
				return lr, true
			}
		}
	}
	return weights.LocalityResult{}, false
}

// percent renders millionths as a percent with one decimal, rounded half
// up (428571 is "42.9%"), except that only 0 shows as "0.0%" and only
// 1000000 as "100.0%": a share that is not all or nothing never looks so.
func percent(m uint64) string {
	tenths := (m + 500) / 1000
	switch {
	case m > 0 && tenths == 0:
		tenths = 1
	case m < uint64(v1alpha1.Millionths) && tenths == 1000:
		tenths = 999
	}
	return fmt.Sprintf("%d.%d%%", tenths/10, tenths%10)
}

// localityPending reports whether the topology does not yet hold what a
// Locality's spec says (an accepted, valid one: its upstream exists): no
// group is placed by it, or not at its priority, locality and weight.
func localityPending(l *v1alpha1.Locality, snap *topology.Snapshot) bool {
	u := snap.Upstream(topology.Key{Namespace: l.Namespace, Name: l.Spec.Upstream})
	if u == nil {
		return false
	}
	prio, weight := v1alpha1.DefaultLocalityPriority, v1alpha1.DefaultLocalityWeight
	if l.Spec.Priority != nil {
		prio = *l.Spec.Priority
	}
	if l.Spec.Weight != nil {
		weight = *l.Spec.Weight
	}
	id := weights.Locality{Region: l.Spec.Region, Zone: l.Spec.Zone, SubZone: l.Spec.SubZone}
	for _, g := range u.Groups {
		if slices.Contains(g.LocalityObjects, keyOf(l)) {
			return g.Priority != uint32(prio) || g.Locality != id || g.LocalityWeight != uint64(weight)
		}
	}
	return true
}

// endpointSetPending reports whether the topology does not yet hold what an
// EndpointSet's spec says (an accepted one whose upstream exists): it is
// not in the topology, or with another number of endpoints or of Ready ones.
func endpointSetPending(s *v1alpha1.EndpointSet, snap *topology.Snapshot) bool {
	u := snap.Upstream(topology.Key{Namespace: s.Namespace, Name: s.Spec.Upstream})
	if u == nil {
		return false
	}
	total, ready, _, ok := endpointCounts(u, topology.ObjectRef{Kind: topology.KindEndpointSet, Key: keyOf(s)})
	var want int32
	for _, e := range s.Spec.Endpoints {
		if e.AdminState == "" || e.AdminState == v1alpha1.AdminStateReady {
			want++
		}
	}
	return !ok || total != int32(len(s.Spec.Endpoints)) || ready != want
}

// endpointSetStatus is the status an EndpointSet should have: its
// conditions and the counts of its endpoints in the served topology. Its
// health, written by probers, is kept as it is.
func endpointSetStatus(s *v1alpha1.EndpointSet, snap *topology.Snapshot, rej *conditions.Rejection) v1alpha1.EndpointSetStatus {
	want := *s.Status.DeepCopy()
	want.ObservedGeneration = s.Generation
	u := snap.Upstream(topology.Key{Namespace: s.Namespace, Name: s.Spec.Upstream})
	note := ""
	want.Total, want.Ready, want.Eligible = nil, nil, nil
	if u != nil {
		note = groupNote(u, keyOf(s))
		if total, ready, eligible, ok := endpointCounts(u, topology.ObjectRef{Kind: topology.KindEndpointSet, Key: keyOf(s)}); ok {
			want.Total, want.Ready, want.Eligible = &total, &ready, &eligible
		}
	}
	setAccepted(&want.Conditions, s.Generation, rej, u != nil, note)
	return want
}

// endpointCounts counts the endpoints of one set in u: all of them, those
// whose admin state is Ready, and those eligible for traffic. ok is false
// when the set has no endpoints in u (it is not in the topology).
func endpointCounts(u *topology.UpstreamState, set topology.ObjectRef) (total, ready, eligible int32, ok bool) {
	if u.Result == nil {
		return 0, 0, 0, false
	}
	inTopology := false
	for _, g := range u.Groups {
		if slices.Contains(g.Sets, set) {
			inTopology = true
			break
		}
	}
	if !inTopology {
		return 0, 0, 0, false
	}
	for _, er := range u.Result.Endpoints {
		if u.Origins[er.Index].Set != set {
			continue
		}
		total++
		if u.Endpoints[er.Index].Admin == weights.Ready {
			ready++
		}
		if er.Eligible {
			eligible++
		}
	}
	return total, ready, eligible, true
}

// upstreamStatus is the status an Upstream should have: state is its part of
// the snapshot (nil when it is not in the topology), programmed whether that
// state is published over xDS, rejectedBy how this replica's xDS clients
// reject it ("" when none does), refs its ResolvedRefs condition (nil
// without endpointsFrom).
//
// status.revision moves only when the rest of the status (its figures and
// conditions other than Programmed) changes, and then to the topology
// revision of state, or one past the stored revision when that is not above
// it: a new leader counts revisions from its own start, and a revision never
// goes back.
func upstreamStatus(u *v1alpha1.Upstream, state *topology.UpstreamState, rej *conditions.Rejection, refs *metav1.Condition, programmed bool, rejectedBy string) v1alpha1.UpstreamStatus {
	stored := u.Status
	want := *stored.DeepCopy()
	want.ObservedGeneration = u.Generation

	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAccepted,
		ObservedGeneration: u.Generation, Message: "in the topology"}
	if rej != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, rej.Reason, rej.Message
	}
	meta.SetStatusCondition(&want.Conditions, accepted)
	if refs != nil {
		meta.SetStatusCondition(&want.Conditions, *refs)
	} else {
		meta.RemoveStatusCondition(&want.Conditions, conditions.ConditionResolvedRefs)
	}

	if state != nil {
		r := state.Result
		want.Outcome = v1alpha1.Outcome(r.Outcome.String())
		want.DroppedMillionths = int64(r.DroppedMillionths)
		want.Priorities = nil
		for _, p := range r.Priorities {
			want.Priorities = append(want.Priorities, v1alpha1.PriorityStatus{
				Priority: int32(p.Priority), Health: int64(p.Health), Load: int64(p.Load), InPanic: p.InPanic, DroppedMillionths: int64(p.Dropped),
			})
		}
		want.Localities = nil
		for _, l := range r.Localities {
			want.Localities = append(want.Localities, v1alpha1.LocalityStatus{
				Priority:       int32(l.Priority),
				LocalityID:     v1alpha1.LocalityID{Region: l.Locality.Region, Zone: l.Locality.Zone, SubZone: l.Locality.SubZone},
				LocalityWeight: int64(l.LocalityWeight), Availability: int64(l.Availability),
				EffectiveWeight: int64(l.EffectiveWeight), Traffic: int64(l.Traffic),
			})
		}
		want.ClientZones, want.MoreClientZones = clientZones(state)
		want.ClientZonesDemand = ""
		if state.Upstream.ModeOf() == affinity.Balanced && !state.Demand.None() {
			want.ClientZonesDemand = v1alpha1.DemandFromClients
			if state.Demand.LoadReports {
				want.ClientZonesDemand = v1alpha1.DemandFromLoadReports
			}
		}
	}
	var result *weights.Result
	if state != nil {
		result = state.Result
	}
	meta.SetStatusCondition(&want.Conditions, degradedCondition(u.Generation, result))
	if state != nil {
		if !sameUpstreamFigures(want, stored) {
			want.Revision = nextRevision(stored.Revision, state.Revision)
		}
	}

	c := metav1.Condition{Type: v1alpha1.ConditionProgrammed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending,
		ObservedGeneration: u.Generation, Message: "not yet published"}
	switch {
	case rej != nil:
		// what is published is the last accepted version, not this generation
		c.Reason, c.Message = rej.Reason, "this generation is not accepted (see Accepted); the last accepted version, if any, keeps serving"
	case state != nil && programmed && rejectedBy != "":
		// published, but the clients that asked for it keep their last accepted version
		c.Reason = conditions.ReasonRejectedByClients
		c.Message = conditions.Clip(fmt.Sprintf("published over xDS at revision %d, but rejected (NACK) by %s", want.Revision, rejectedBy), maxMessage)
	case state != nil && programmed && refs != nil && refs.Status != metav1.ConditionTrue:
		// published, but not what the spec asks for: without the endpoints
		// of the Service it names
		c.Reason = v1alpha1.ReasonRefsNotResolved
		c.Message = fmt.Sprintf("published over xDS at revision %d without the endpoints of Service %s/%s (see ResolvedRefs)",
			want.Revision, u.Namespace, u.Spec.EndpointsFrom.Service.Name)
	case state != nil && programmed:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonProgrammed
		c.Message = fmt.Sprintf("published over xDS at revision %d", want.Revision)
	}
	meta.SetStatusCondition(&want.Conditions, c)
	return want
}

// maxMessage bounds a condition's message (a Degraded one names at most
// conditions.MaxListedItems priorities and localities).
const (
	maxMessage = 512
	// spillTolerance: a locality counts as short of its configured share of
	// its priority when it gets more than this many millionths of the
	// priority less (0.1 %), which no rounding of the math reaches.
	spillTolerance = 1000
)

// degradedCondition is an Upstream's Degraded condition from its computed
// result (nil when the upstream is not in the topology). The reason is the
// most severe that holds, in this order:
//
//   - NoCapacity: no endpoint can take traffic (outcome NoCapacity).
//   - Dropping: FailClosed drops part of the traffic (droppedMillionths > 0,
//     outcome PanicRejected included).
//   - Panic: a priority that receives traffic is in panic.
//   - Spilling: traffic reaches a priority above 0, or a locality with
//     configured capacity in a priority that receives traffic gets less
//     than its configured share (locality weight over the priority's
//     total) of that priority's traffic.
//
// Otherwise it is False with reason Healthy.
func degradedCondition(gen int64, r *weights.Result) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDegraded, ObservedGeneration: gen}
	if r == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, v1alpha1.ReasonPending, "not in the topology"
		return c
	}
	c.Status = metav1.ConditionTrue
	switch {
	case r.Outcome == weights.NoCapacity:
		c.Reason, c.Message = v1alpha1.ReasonNoCapacity, "no endpoint can take traffic: every request fails"
		return c
	case r.DroppedMillionths > 0:
		var in []string
		for _, p := range r.Priorities {
			if p.Dropped > 0 {
				in = append(in, fmt.Sprintf("priority %d drops %s", p.Priority, percent(p.Dropped)))
			}
		}
		c.Reason = v1alpha1.ReasonDropping
		c.Message = conditions.Clip(fmt.Sprintf("panicMode FailClosed drops %s of the traffic: %s", percent(r.DroppedMillionths), conditions.List(in)), maxMessage)
		return c
	}
	var panics []string
	for _, p := range r.Priorities {
		if p.InPanic && p.Load > 0 {
			panics = append(panics, fmt.Sprintf("priority %d (health %s, load %s)", p.Priority, percent(p.Health), percent(p.Load)))
		}
	}
	if len(panics) > 0 {
		c.Reason = v1alpha1.ReasonPanic
		c.Message = conditions.Clip("in panic, routing to every Ready endpoint regardless of health: "+conditions.List(panics), maxMessage)
		return c
	}
	if spills := spilling(r); len(spills) > 0 {
		c.Reason, c.Message = v1alpha1.ReasonSpilling, conditions.Clip(conditions.List(spills), maxMessage)
		return c
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonHealthy, "every locality gets its configured share of priority 0"
	return c
}

// spilling lists where traffic leaves where the configuration puts it:
// the priorities above 0 that receive traffic, then the localities short
// of their configured share of their priority, in the result's order.
func spilling(r *weights.Result) []string {
	var out []string
	for _, p := range r.Priorities {
		if p.Priority > 0 && p.Load > 0 {
			out = append(out, fmt.Sprintf("priority %d receives %s", p.Priority, percent(p.Load)))
		}
	}
	for _, p := range r.Priorities {
		if p.Load == 0 {
			continue
		}
		locs := r.Localities[p.FirstLocality : p.FirstLocality+p.LocalityCount]
		var total uint64
		for _, l := range locs {
			if l.ConfiguredWeight > 0 {
				total += l.LocalityWeight
			}
		}
		for _, l := range locs {
			if l.ConfiguredWeight == 0 || total == 0 {
				continue
			}
			configured := l.LocalityWeight * uint64(v1alpha1.Millionths) / total
			if l.ShareInPriority+spillTolerance < configured {
				out = append(out, fmt.Sprintf("locality %q gets %s of priority %d, configured %s (availability %s)",
					l.Locality.String(), percent(l.ShareInPriority), p.Priority, percent(configured), percent(l.Availability)))
			}
		}
	}
	return out
}

// maxClientZones bounds status.clientZones (the CRD's MaxItems).
const maxClientZones = 16

// clientZones is status.clientZones: what clients in each of the
// upstream's zones keep local under its localityAffinity, a Balanced split
// divided by the demand its state carries.
func clientZones(state *topology.UpstreamState) ([]v1alpha1.ClientZoneStatus, int32) {
	shares, more := state.LocalShares(state.Demand.Zones, maxClientZones)
	var out []v1alpha1.ClientZoneStatus
	for _, z := range shares {
		out = append(out, v1alpha1.ClientZoneStatus{Zone: conditions.Clip(z.Zone.String(), 258), LocalMillionths: int64(z.Local),
			Demand: int64(z.Demand), Note: conditions.Clip(z.Note, 256)})
	}
	return out, int32(more)
}

// nextRevision is the revision a status whose figures changed takes: the
// topology revision that changed them, unless the stored one (written by a
// leader whose revisions ran higher) is not below it.
func nextRevision(stored int64, local uint64) int64 {
	return max(stored+1, int64(local))
}

// sameUpstreamFigures compares two Upstream statuses but for their revision
// and Programmed condition.
func sameUpstreamFigures(a, b v1alpha1.UpstreamStatus) bool {
	a.Revision, b.Revision = 0, 0
	a.Conditions, b.Conditions = withoutCondition(a.Conditions, v1alpha1.ConditionProgrammed), withoutCondition(b.Conditions, v1alpha1.ConditionProgrammed)
	return equality.Semantic.DeepEqual(a, b)
}

func withoutCondition(conds []metav1.Condition, typ string) []metav1.Condition {
	out := slices.DeleteFunc(slices.Clone(conds), func(c metav1.Condition) bool { return c.Type == typ })
	if len(out) == 0 {
		return nil
	}
	return out
}

// clusterRefs is the ResolvedRefs condition of an Upstream importing from
// several clusters, from how its reference resolved in the cluster where it
// resolved best at the last import.
func clusterRefs(u *v1alpha1.Upstream, ref string) metav1.Condition {
	sr := u.Spec.EndpointsFrom.Service
	c := metav1.Condition{Type: conditions.ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: conditions.ReasonResolved, ObservedGeneration: u.Generation,
		Message: fmt.Sprintf("endpoints imported from Service %s/%s port %s (RemoteClustersSynced names the clusters)", u.Namespace, sr.Name, sr.Port.String())}
	switch ref {
	case conditions.ReasonPortNotFound:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonPortNotFound, fmt.Sprintf("Service %s/%s has no port %s in any cluster it is imported from", u.Namespace, sr.Name, sr.Port.String())
	case conditions.ReasonResolved:
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonServiceNotFound, fmt.Sprintf("Service %s/%s exists in no cluster it is imported from; no endpoints are imported", u.Namespace, sr.Name)
	}
	return c
}

// resolvedRefs is an importing Upstream's ResolvedRefs condition, from the
// Service in the informer cache.
func resolvedRefs(ctx context.Context, r client.Reader, u *v1alpha1.Upstream) metav1.Condition {
	c := metav1.Condition{Type: conditions.ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: conditions.ReasonResolved, ObservedGeneration: u.Generation}
	ref := u.Spec.EndpointsFrom.Service
	var svc corev1.Service
	err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: ref.Name}, &svc)
	switch {
	case apierrors.IsNotFound(err):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonServiceNotFound, fmt.Sprintf("Service %s/%s does not exist; no endpoints are imported", u.Namespace, ref.Name)
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, conditions.ReasonServiceNotFound, err.Error()
	default:
		if _, ok := source.ServicePort(&svc, ref.Port.String()); !ok {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonPortNotFound, fmt.Sprintf("Service %s/%s has no port %s", u.Namespace, ref.Name, ref.Port.String())
		} else {
			c.Message = fmt.Sprintf("endpoints imported from Service %s/%s port %s", u.Namespace, ref.Name, ref.Port.String())
		}
	}
	return c
}
