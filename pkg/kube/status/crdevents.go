package status

import (
	"context"
	"fmt"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/crdschema"
)

// CRDEvents records, while this replica leads, an Event each time one of
// the cluster's CRDs comes to lack fields this binary knows or goes
// missing, and when it no longer does. The CRDs are cluster-scoped, so the
// Events are recorded on the status writer's Lease (in the plane's own
// namespace, where the plane may always write Events and `kubectl events`
// finds them beside LeaderElected), each with the CRD as its related object.
type CRDEvents struct {
	Schemas *crdschema.Watcher
	Events  EventRecorder
	// LeaseNamespace and LeaseName name the status writer's Lease.
	LeaseNamespace, LeaseName string
}

// Run records the Events until ctx is done. A leader records, when it
// starts, a Warning for each CRD that is bad then: the replica that led
// before may have been an older binary, which knew nothing of it.
func (c *CRDEvents) Run(ctx context.Context) error {
	reported := map[string]crdschema.Status{}
	c.record(reported)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.Schemas.Changed():
			c.record(reported)
		}
	}
}

func (c *CRDEvents) record(reported map[string]crdschema.Status) {
	lease := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: c.LeaseNamespace, Name: c.LeaseName}}
	for _, s := range c.Schemas.Statuses() {
		if s.State == crdschema.Unknown {
			continue // not read (yet, or for now): nothing to say of it
		}
		prev, seen := reported[s.Name]
		reported[s.Name] = s
		eventtype, reason, note, ok := crdEvent(prev, seen, s)
		if !ok {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name}}
		c.Events.Eventf(lease, crd, eventtype, reason, "CheckCRDSchema", "%s", conditions.Clip(note, MaxEventNote))
	}
}

// crdEvent is the Event a CRD's new status calls for, if any: a Warning
// when it turns bad or stays bad with other fields pruned, Recovered when
// it turns good.
func crdEvent(prev crdschema.Status, seen bool, cur crdschema.Status) (eventtype, reason, note string, ok bool) {
	switch {
	case cur.State.Bad() && (!seen || prev.State != cur.State || !slices.Equal(prev.PrunedFields, cur.PrunedFields) || prev.PrunedMore != cur.PrunedMore):
		reason = conditions.ReasonCRDSchemaOutdated
		if cur.State == crdschema.NotInstalled {
			reason = conditions.ReasonCRDNotInstalled
		}
		return "Warning", reason, cur.Warning(), true
	case seen && prev.State.Bad() && !cur.State.Bad():
		return "Normal", conditions.ReasonRecovered, fmt.Sprintf("CRD %s no longer prunes fields this binary knows: %s (installed %s, binary %s)",
			cur.Name, cur.State, cur.InstalledVersion, cur.BinaryVersion), true
	}
	return "", "", "", false
}
