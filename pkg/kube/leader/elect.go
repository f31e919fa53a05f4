package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// ReasonLeaderElected is the reason of the Event on the Lease each time a
// replica takes it.
const ReasonLeaderElected = "LeaderElected"

// EventRecorder emits Kubernetes Events (events.k8s.io/v1).
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Elector runs Lead (the status writer, and the rest of the leader's work)
// while this replica holds the Lease, and competes again after losing it.
// Losing the Lease (an apiserver too slow to renew it, say) only pauses that
// work: xDS serving, which every replica does, never depends on it. It is a
// controller-runtime Runnable that needs no election of the manager's.
type Elector struct {
	Config *rest.Config
	// Namespace and Name name the Lease; Identity names this replica in it.
	Namespace, Name, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Lead                                      func(context.Context) error
	Log                                       *slog.Logger
	// Leading, when set, is told when this replica gains (true) and loses
	// (false) the Lease: the leader gauge follows it.
	Leading func(bool)
	// Events, when set, receives a LeaderElected Event on the Lease each
	// time this replica takes it.
	Events EventRecorder
	// Until, when set, ends the election before Start's context does: a
	// replica that is stopping releases the Lease at once, so another takes
	// the leader's work over, while it goes on serving its xDS clients.
	Until context.Context
}

// NeedLeaderElection: the elector does its own election.
func (e *Elector) NeedLeaderElection() bool { return false }

// Start competes for the Lease until ctx is done.
func (e *Elector) Start(ctx context.Context) error {
	if e.Until != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(e.Until, cancel)
		defer stop()
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: e.Name, ReleaseOnCancel: true,
			LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					e.tell(true)
					if e.Events != nil {
						e.Events.Eventf(&coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
							ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name}}, nil, "Normal", ReasonLeaderElected, "Lead",
							"replica %s leads: it writes the status of every object", e.Identity)
					}
					if err := e.Lead(lctx); err != nil {
						e.Log.Error("status writer stopped", "error", err)
					}
				},
				OnStoppedLeading: func() {
					e.tell(false)
					if ctx.Err() == nil {
						e.Log.Warn("lost the status-writer lease; xDS keeps serving, competing again", "lease", e.Namespace+"/"+e.Name)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}

func (e *Elector) tell(leading bool) {
	if e.Leading != nil {
		e.Leading(leading)
	}
}

// PodNamespaceFile holds a pod's own namespace.
const PodNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// LeaseNamespace is where the Lease lives, and why: the flag, else the
// watched namespace, else the pod's own (read from podFile), else the
// namespace of the kubeconfig context the replica runs with.
func LeaseNamespace(flag, watched, podFile, context string) (ns, why string, err error) {
	switch {
	case flag != "":
		return flag, "--leader-election-namespace", nil
	case watched != "":
		return watched, "the watched namespace (--namespace)", nil
	}
	if b, err := os.ReadFile(podFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), "the pod's own namespace", nil
	}
	if context != "" {
		return context, "the kubeconfig context's namespace", nil
	}
	return "", "", errors.New("cannot tell where the status-writer Lease lives: set --leader-election-namespace (or --namespace), or a namespace in the kubeconfig context")
}

// NewIdentity names this replica in the Lease: its host name and a random
// suffix, so two processes on one host differ.
func NewIdentity() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}
