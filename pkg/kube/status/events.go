package status

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
)

// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// EventRecorder emits Kubernetes Events (events.k8s.io/v1); controller-
// runtime's recorder aggregates repeats of one event into a series.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// MaxEventNote bounds an Event's note (the API takes 1 KiB).
const MaxEventNote = 1000

// EventAction is the action of every status Event.
const EventAction = "WriteStatus"

// conditionEvent is the Event one condition's change calls for, if any:
// only transitions into or out of a bad state, never a first good state
// (a new object) nor the Pending of a change on its way to publication.
func conditionEvent(old *metav1.Condition, cur metav1.Condition) (eventtype, reason string, ok bool) {
	bad := func(c *metav1.Condition) bool {
		if c == nil {
			return false
		}
		switch c.Type {
		case v1alpha1.ConditionDegraded:
			return c.Status == metav1.ConditionTrue
		case v1alpha1.ConditionProgrammed:
			return c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonPending
		}
		return c.Status == metav1.ConditionFalse
	}
	good := cur.Status == metav1.ConditionTrue
	if cur.Type == v1alpha1.ConditionDegraded {
		good = cur.Status == metav1.ConditionFalse
	}
	switch wasBad, isBad := bad(old), bad(&cur); {
	case isBad && (!wasBad || old.Reason != cur.Reason):
		return "Warning", cur.Reason, true
	case wasBad && good:
		return "Normal", conditions.ReasonRecovered, true
	}
	return "", "", false
}

// statusEvents emits an Event for each condition whose change calls for
// one, once its status is written.
func statusEvents(rec EventRecorder, obj runtime.Object, old, cur []metav1.Condition) {
	if rec == nil {
		return
	}
	for _, c := range cur {
		if c.Type != v1alpha1.ConditionAccepted && c.Type != v1alpha1.ConditionProgrammed &&
			c.Type != v1alpha1.ConditionDegraded && c.Type != conditions.ConditionResolvedRefs && c.Type != conditions.ConditionRemoteClustersSynced {
			continue
		}
		eventtype, reason, ok := conditionEvent(meta.FindStatusCondition(old, c.Type), c)
		if !ok {
			continue
		}
		rec.Eventf(obj, nil, eventtype, reason, EventAction, "%s", conditions.Clip(c.Type+"="+string(c.Status)+": "+c.Message, MaxEventNote))
	}
}

// conditionsOf returns the conditions of a status the writer writes.
func conditionsOf(status any) []metav1.Condition {
	switch s := status.(type) {
	case v1alpha1.UpstreamStatus:
		return s.Conditions
	case v1alpha1.LocalityObjectStatus:
		return s.Conditions
	case v1alpha1.EndpointSetStatus:
		return s.Conditions
	case v1alpha1.SpatialDomainStatus:
		return s.Conditions
	case v1alpha1.PartitionStatus:
		return s.Conditions
	}
	return nil
}
