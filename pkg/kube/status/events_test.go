package status

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
)

type recordedEvents []string

func (r *recordedEvents) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	*r = append(*r, eventtype+" "+reason+" "+action+": "+fmt.Sprintf(note, args...))
}

func TestStatusEvents(t *testing.T) {
	t.Parallel()
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "why"}
	}
	accepted := cond(v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	conflicted := cond(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonConflicted)
	programmed := cond(v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonProgrammed)
	pending := cond(v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonPending)
	nacked := cond(v1alpha1.ConditionProgrammed, metav1.ConditionFalse, conditions.ReasonRejectedByClients)
	healthy := cond(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy)
	spilling := cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonSpilling)
	panicking := cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonPanic)
	unknown := cond(v1alpha1.ConditionDegraded, metav1.ConditionUnknown, v1alpha1.ReasonPending)
	for _, tc := range []struct {
		name     string
		old, cur []metav1.Condition
		want     []string
	}{
		{"a new healthy object: none", nil, []metav1.Condition{accepted, pending, healthy}, nil},
		{"published: none", []metav1.Condition{accepted, pending, healthy}, []metav1.Condition{accepted, programmed, healthy}, nil},
		{"a new conflicted object", nil, []metav1.Condition{conflicted}, []string{"Warning Conflicted WriteStatus: Accepted=False: why"}},
		{"accepted again", []metav1.Condition{conflicted}, []metav1.Condition{accepted}, []string{"Normal Recovered WriteStatus: Accepted=True: why"}},
		{"spill", []metav1.Condition{accepted, healthy}, []metav1.Condition{accepted, spilling}, []string{"Warning Spilling WriteStatus: Degraded=True: why"}},
		{"spill to panic", []metav1.Condition{spilling}, []metav1.Condition{panicking}, []string{"Warning Panic WriteStatus: Degraded=True: why"}},
		{"still spilling, other figures: none", []metav1.Condition{spilling}, []metav1.Condition{spilling}, nil},
		{"healthy again", []metav1.Condition{spilling}, []metav1.Condition{healthy}, []string{"Normal Recovered WriteStatus: Degraded=False: why"}},
		{"out of the topology: none", []metav1.Condition{spilling}, []metav1.Condition{unknown}, nil},
		{"a NACK and its end", []metav1.Condition{programmed}, []metav1.Condition{nacked}, []string{"Warning RejectedByClients WriteStatus: Programmed=False: why"}},
		{"NACKed, then pending: none", []metav1.Condition{nacked}, []metav1.Condition{pending}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got recordedEvents
			statusEvents(&got, &v1alpha1.Upstream{}, tc.old, tc.cur)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	var got recordedEvents
	long := cond(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalid)
	long.Message = strings.Repeat("x", 5000)
	statusEvents(&got, &v1alpha1.Upstream{}, nil, []metav1.Condition{long})
	if len(got) != 1 || len(got[0]) > MaxEventNote+100 {
		t.Fatalf("a long message: %d events, %d bytes", len(got), len(got[0]))
	}
}
