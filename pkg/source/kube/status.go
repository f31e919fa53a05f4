package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// +kubebuilder:rbac:groups=poise.dev,resources=upstreams/status;localities/status;endpointsets/status;spatialdomains/status;partitions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Condition types and reasons the status writer adds to those of v1alpha1.
const (
	// ConditionResolvedRefs says whether an Upstream's endpointsFrom.service resolved.
	ConditionResolvedRefs = "ResolvedRefs"
	ReasonResolved        = "Resolved"
	ReasonServiceNotFound = "ServiceNotFound"
	ReasonPortNotFound    = "PortNotFound"
	// ReasonDefaulted: an EndpointSet with no matching Locality object.
	ReasonDefaulted = "DefaultLocality"
)

// StatusWriter writes what was computed into the status of every Upstream,
// Locality, EndpointSet, SpatialDomain and Partition. Only the replica holding the Lease runs it.
type StatusWriter struct {
	Client client.Client
	Dir    *topology.Directory
	Source *Source
	// Published is the topology revision last published over xDS; Changed
	// wakes the writer when it moves.
	Published func() uint64
	Changed   func() <-chan struct{}
	Log       *slog.Logger
	// Interval bounds how often status is rewritten; 0 means 100ms.
	Interval time.Duration
}

// Start writes status on every change until ctx is done.
func (w *StatusWriter) Start(ctx context.Context) error {
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	interval := w.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	w.Log.Info("status writer started: this replica leads")
	for {
		dirChanged, rejChanged := w.Dir.Changed(), w.Source.RejectionsChanged()
		var pubChanged <-chan struct{}
		if w.Changed != nil {
			pubChanged = w.Changed()
		}
		if err := w.WriteAll(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("writing status failed; will retry", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-dirChanged:
		case <-rejChanged:
		case <-pubChanged:
		case <-time.After(10 * time.Second): // catch objects whose status someone else changed
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// WriteAll brings the status of every object up to date.
func (w *StatusWriter) WriteAll(ctx context.Context) error {
	snap := w.Dir.Current()
	rejected := w.Source.Rejections()
	published := uint64(0)
	if w.Published != nil {
		published = w.Published()
	}
	var firstErr error
	keep := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && firstErr == nil {
			firstErr = err
		}
	}
	var ups v1alpha1.UpstreamList
	if err := w.Client.List(ctx, &ups); err != nil {
		return err
	}
	for i := range ups.Items {
		keep(w.upstream(ctx, &ups.Items[i], snap, rejected, published))
	}
	var locs v1alpha1.LocalityList
	if err := w.Client.List(ctx, &locs); err != nil {
		return err
	}
	for i := range locs.Items {
		l := &locs.Items[i]
		want := l.Status.DeepCopy()
		want.ObservedGeneration = l.Generation
		setAccepted(&want.Conditions, l.Generation, topology.ObjectRef{Kind: topology.KindLocality, Key: keyOf(l)}, rejected,
			snap.Upstream(topology.Key{Namespace: l.Namespace, Name: l.Spec.Upstream}) != nil, "")
		keep(patchStatus(ctx, w.Client, l, &l.Status, *want))
	}
	var sets v1alpha1.EndpointSetList
	if err := w.Client.List(ctx, &sets); err != nil {
		return err
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		want := s.Status.DeepCopy()
		want.ObservedGeneration = s.Generation
		note := ""
		if u := snap.Upstream(topology.Key{Namespace: s.Namespace, Name: s.Spec.Upstream}); u != nil {
			note = groupNote(u, keyOf(s))
		}
		setAccepted(&want.Conditions, s.Generation, topology.ObjectRef{Kind: topology.KindEndpointSet, Key: keyOf(s)}, rejected,
			snap.Upstream(topology.Key{Namespace: s.Namespace, Name: s.Spec.Upstream}) != nil, note)
		keep(patchStatus(ctx, w.Client, s, &s.Status, *want))
	}
	if err := w.writeSpatial(ctx, snap, rejected, published, keep); err != nil {
		return err
	}
	return firstErr
}

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
func setAccepted(conds *[]metav1.Condition, gen int64, ref topology.ObjectRef, rejected map[topology.ObjectRef]Rejection, upstreamExists bool, note string) {
	c := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAccepted, ObservedGeneration: gen, Message: "in the topology"}
	switch r, bad := rejected[ref]; {
	case bad:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, r.Reason, r.Message
	case !upstreamExists:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonUpstreamNotFound, "the Upstream it names does not exist; it takes effect when it does"
	case note != "":
		c.Reason, c.Message = ReasonDefaulted, note
	}
	meta.SetStatusCondition(conds, c)
}

func (w *StatusWriter) upstream(ctx context.Context, u *v1alpha1.Upstream, snap *topology.Snapshot, rejected map[topology.ObjectRef]Rejection, published uint64) error {
	ref := topology.ObjectRef{Kind: topology.KindUpstream, Key: keyOf(u)}
	state := snap.Upstream(ref.Key)
	want := u.Status.DeepCopy()
	want.ObservedGeneration = u.Generation

	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAccepted,
		ObservedGeneration: u.Generation, Message: "in the topology"}
	if r, bad := rejected[ref]; bad {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, r.Reason, r.Message
	}
	meta.SetStatusCondition(&want.Conditions, accepted)

	programmed := metav1.Condition{Type: v1alpha1.ConditionProgrammed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending,
		ObservedGeneration: u.Generation, Message: "not yet published"}
	if state != nil && published >= state.Revision {
		programmed.Status, programmed.Reason = metav1.ConditionTrue, v1alpha1.ReasonProgrammed
		programmed.Message = fmt.Sprintf("published over xDS at topology revision %d", published)
	}
	meta.SetStatusCondition(&want.Conditions, programmed)

	if u.Spec.EndpointsFrom != nil {
		meta.SetStatusCondition(&want.Conditions, w.resolvedRefs(ctx, u))
	} else {
		meta.RemoveStatusCondition(&want.Conditions, ConditionResolvedRefs)
	}

	if state != nil {
		r := state.Result
		want.Revision = int64(state.Revision)
		want.Outcome = v1alpha1.Outcome(r.Outcome.String())
		want.DroppedMillionths = int64(r.DroppedMillionths)
		want.Priorities = want.Priorities[:0]
		for _, p := range r.Priorities {
			want.Priorities = append(want.Priorities, v1alpha1.PriorityStatus{
				Priority: int32(p.Priority), Health: int64(p.Health), Load: int64(p.Load), InPanic: p.InPanic, DroppedMillionths: int64(p.Dropped),
			})
		}
		want.Localities = want.Localities[:0]
		for _, l := range r.Localities {
			want.Localities = append(want.Localities, v1alpha1.LocalityStatus{
				Priority:       int32(l.Priority),
				LocalityID:     v1alpha1.LocalityID{Region: l.Locality.Region, Zone: l.Locality.Zone, SubZone: l.Locality.SubZone},
				LocalityWeight: int64(l.LocalityWeight), Availability: int64(l.Availability),
				EffectiveWeight: int64(l.EffectiveWeight), Traffic: int64(l.Traffic),
			})
		}
		if len(want.Priorities) == 0 {
			want.Priorities = nil
		}
		if len(want.Localities) == 0 {
			want.Localities = nil
		}
	}
	return patchStatus(ctx, w.Client, u, &u.Status, *want)
}

// patchStatus sets obj's status (status points into obj) to want and patches it, unless
// it already is want.
func patchStatus[S any](ctx context.Context, c client.Client, obj client.Object, status *S, want S) error {
	if equality.Semantic.DeepEqual(want, *status) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	*status = want
	return c.Status().Patch(ctx, obj, client.MergeFrom(orig))
}

func (w *StatusWriter) resolvedRefs(ctx context.Context, u *v1alpha1.Upstream) metav1.Condition {
	c := metav1.Condition{Type: ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: ReasonResolved, ObservedGeneration: u.Generation}
	ref := u.Spec.EndpointsFrom.Service
	var svc corev1.Service
	err := w.Client.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: ref.Name}, &svc)
	switch {
	case apierrors.IsNotFound(err):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonServiceNotFound, fmt.Sprintf("Service %s/%s does not exist; no endpoints are imported", u.Namespace, ref.Name)
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonServiceNotFound, err.Error()
	default:
		if _, ok := ServicePort(&svc, ref.Port.String()); !ok {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonPortNotFound, fmt.Sprintf("Service %s/%s has no port %s", u.Namespace, ref.Name, ref.Port.String())
		} else {
			c.Message = fmt.Sprintf("endpoints imported from Service %s/%s port %s", u.Namespace, ref.Name, ref.Port.String())
		}
	}
	return c
}
