package status

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
)

// spatialDomainStatus is the status a SpatialDomain should have: st is its
// part of the snapshot, programmed whether st is published over xDS. Its
// revision moves as an Upstream's does (upstreamStatus).
func spatialDomainStatus(d *v1alpha1.SpatialDomain, st *topology.SpatialState, rej *conditions.Rejection, programmed bool) v1alpha1.SpatialDomainStatus {
	gen := d.Generation
	stored := d.Status
	want := *stored.DeepCopy()
	want.ObservedGeneration = gen
	cond := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if rej != nil {
		cond(v1alpha1.ConditionAccepted, false, rej.Reason, rej.Message)
		cond(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, "not in the topology")
		return want
	}
	if st == nil {
		cond(v1alpha1.ConditionAccepted, false, v1alpha1.ReasonPending, "not yet in the topology")
		cond(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, "not yet published")
		return want
	}
	var missing, products []string
	for _, p := range st.Problems {
		switch p.Reason {
		case topology.SpatialUpstreamNotFound:
			missing = append(missing, p.Message)
		case partitionmap.ProblemNoLawfulReplica:
			products = append(products, p.Name+": "+p.Message)
		}
	}
	if !st.Serving() {
		p := st.Problems[0]
		cond(v1alpha1.ConditionAccepted, false, p.Reason, p.Message)
		cond(v1alpha1.ConditionProgrammed, false, conditions.ReasonDomainNotServing, "the domain is not published")
		want.MapVersion, want.Cells, want.Partitions, want.Replicas = "", 0, 0, nil
		return want
	}
	if len(products) > 0 {
		cond(v1alpha1.ConditionAccepted, true, partitionmap.ProblemNoLawfulReplica, "serving; "+strings.Join(products, "; "))
	} else {
		cond(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, "the partition map is built")
	}
	if len(missing) > 0 {
		cond(v1alpha1.ConditionResolvedRefs, false, v1alpha1.ReasonUpstreamNotFound, strings.Join(missing, "; "))
	} else {
		cond(v1alpha1.ConditionResolvedRefs, true, conditions.ReasonResolved, "every replica's Upstream exists")
	}
	want.MapVersion = st.Map.DataVersion(st.Health)
	want.Cells = int32(st.Map.OccupiedCells())
	want.Partitions = int32(len(st.Map.Partitions()))
	held := st.Map.Held()
	want.Replicas = nil
	for i, r := range st.Replicas {
		want.Replicas = append(want.Replicas, v1alpha1.SpatialReplicaStatus{Name: r.Name, Upstream: r.Replica.Upstream, Region: r.Region,
			Healthy: r.Healthy, Partitions: int32(held[i])})
	}
	if !sameDomainFigures(want, stored) {
		want.Revision = nextRevision(stored.Revision, st.Revision)
	}
	if programmed {
		cond(v1alpha1.ConditionProgrammed, true, v1alpha1.ReasonProgrammed,
			fmt.Sprintf("routes with data version %s published over xDS at revision %d", want.MapVersion, want.Revision))
	} else {
		cond(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, "not yet published")
	}
	return want
}

// sameDomainFigures compares two SpatialDomain statuses but for their
// revision and Programmed condition.
func sameDomainFigures(a, b v1alpha1.SpatialDomainStatus) bool {
	a.Revision, b.Revision = 0, 0
	a.Conditions, b.Conditions = withoutCondition(a.Conditions, v1alpha1.ConditionProgrammed), withoutCondition(b.Conditions, v1alpha1.ConditionProgrammed)
	return equality.Semantic.DeepEqual(a, b)
}

// partitionStatus is the status a Partition should have; st is its domain's
// part of the snapshot.
func partitionStatus(p *v1alpha1.Partition, st *topology.SpatialState, rej *conditions.Rejection) v1alpha1.PartitionStatus {
	gen := p.Generation
	want := *p.Status.DeepCopy()
	want.ObservedGeneration = gen
	c := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, ObservedGeneration: gen}
	want.Cells = 0
	switch {
	case rej != nil:
		c.Reason, c.Message = rej.Reason, rej.Message
	case st == nil:
		c.Reason, c.Message = v1alpha1.ReasonUnknownDomain, fmt.Sprintf("SpatialDomain %s/%s does not exist; the partition takes effect when it does", p.Namespace, p.Spec.Domain)
	default:
		var ps *topology.PartitionState
		for i := range st.Partitions {
			if st.Partitions[i].Partition.Key == keyOf(p) {
				ps = &st.Partitions[i]
			}
		}
		switch {
		case ps == nil:
			c.Reason, c.Message = v1alpha1.ReasonPending, "not yet in the topology"
		case ps.Problem != nil && ps.Problem.Kind == "Partition":
			c.Reason, c.Message = ps.Problem.Reason, ps.Problem.Field+": "+ps.Problem.Message+"; the rest of the domain keeps serving"
		case ps.Problem != nil || !st.Serving():
			c.Reason, c.Message = conditions.ReasonDomainNotServing, fmt.Sprintf("SpatialDomain %s is not serving", st.Domain.Key)
		default:
			c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAccepted
			c.Message = fmt.Sprintf("in the partition map of SpatialDomain %s (map version %s)", st.Domain.Key, st.Map.Version())
			want.Cells = int32(ps.Cells)
		}
	}
	meta.SetStatusCondition(&want.Conditions, c)
	return want
}
