package kube

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
)

// ReasonDomainNotServing: the SpatialDomain is not published (a Partition of it, or the
// domain's Programmed condition). The other spatial reasons are those of the problems
// topology reports (pkg/topology, pkg/partitionmap).
const ReasonDomainNotServing = "DomainNotServing"

// writeSpatial brings the status of every SpatialDomain and Partition up to date.
func (w *StatusWriter) writeSpatial(ctx context.Context, snap *topology.Snapshot, rejected map[topology.ObjectRef]Rejection, published uint64, keep func(error)) error {
	var domains v1alpha1.SpatialDomainList
	if err := w.Client.List(ctx, &domains); err != nil {
		return err
	}
	for i := range domains.Items {
		d := &domains.Items[i]
		keep(patchStatus(ctx, w.Client, d, &d.Status, spatialDomainStatus(d, snap.SpatialDomain(keyOf(d)), rejected, published)))
	}
	var parts v1alpha1.PartitionList
	if err := w.Client.List(ctx, &parts); err != nil {
		return err
	}
	for i := range parts.Items {
		p := &parts.Items[i]
		keep(patchStatus(ctx, w.Client, p, &p.Status, partitionStatus(p, snap.SpatialDomain(topology.Key{Namespace: p.Namespace, Name: p.Spec.Domain}), rejected)))
	}
	return nil
}

func spatialDomainStatus(d *v1alpha1.SpatialDomain, st *topology.SpatialState, rejected map[topology.ObjectRef]Rejection, published uint64) v1alpha1.SpatialDomainStatus {
	gen := d.Generation
	want := *d.Status.DeepCopy()
	want.ObservedGeneration = gen
	cond := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if r, bad := rejected[topology.ObjectRef{Kind: topology.KindSpatialDomain, Key: keyOf(d)}]; bad {
		cond(v1alpha1.ConditionAccepted, false, r.Reason, r.Message)
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
		cond(v1alpha1.ConditionProgrammed, false, ReasonDomainNotServing, "the domain is not published")
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
		cond(v1alpha1.ConditionResolvedRefs, true, ReasonResolved, "every replica's Upstream exists")
	}
	if published >= st.Revision {
		cond(v1alpha1.ConditionProgrammed, true, v1alpha1.ReasonProgrammed,
			fmt.Sprintf("routes with data version %s published over xDS at topology revision %d", st.Map.DataVersion(st.Health), published))
	} else {
		cond(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, "not yet published")
	}
	want.MapVersion = st.Map.DataVersion(st.Health)
	want.Revision = int64(st.Revision)
	want.Cells = int32(st.Map.OccupiedCells())
	want.Partitions = int32(len(st.Map.Partitions()))
	held := st.Map.Held()
	want.Replicas = nil
	for i, r := range st.Replicas {
		want.Replicas = append(want.Replicas, v1alpha1.SpatialReplicaStatus{Name: r.Name, Upstream: r.Replica.Upstream, Region: r.Region,
			Healthy: r.Healthy, Partitions: int32(held[i])})
	}
	return want
}

func partitionStatus(p *v1alpha1.Partition, st *topology.SpatialState, rejected map[topology.ObjectRef]Rejection) v1alpha1.PartitionStatus {
	gen := p.Generation
	want := *p.Status.DeepCopy()
	want.ObservedGeneration = gen
	c := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, ObservedGeneration: gen}
	want.Cells = 0
	switch r, bad := rejected[topology.ObjectRef{Kind: topology.KindPartition, Key: keyOf(p)}]; {
	case bad:
		c.Reason, c.Message = r.Reason, r.Message
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
			c.Reason, c.Message = ReasonDomainNotServing, fmt.Sprintf("SpatialDomain %s is not serving", st.Domain.Key)
		default:
			c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAccepted
			c.Message = fmt.Sprintf("in the partition map of SpatialDomain %s (map version %s)", st.Domain.Key, st.Map.Version())
			want.Cells = int32(ps.Cells)
		}
	}
	meta.SetStatusCondition(&want.Conditions, c)
	return want
}
