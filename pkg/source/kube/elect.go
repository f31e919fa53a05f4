package kube

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// elector runs the status writer while this replica holds the Lease and
// competes again after losing it. Losing the Lease (an apiserver too slow to
// renew it, say) only pauses status writing: xDS serving, which every
// replica does, never depends on it.
type elector struct {
	cfg                       *rest.Config
	namespace, name, identity string
	lease, renew, retry       time.Duration
	run                       func(context.Context) error
	log                       *slog.Logger
	// leading, when set, is told when this replica gains (true) and loses
	// (false) the Lease: the leader gauge follows it.
	leading func(bool)
	// events, when set, receives a LeaderElected Event on the Lease each
	// time this replica takes it.
	events EventRecorder
}

// NeedLeaderElection: the elector does its own election.
func (e *elector) NeedLeaderElection() bool { return false }

func (e *elector) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.namespace, Name: e.name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: e.name, ReleaseOnCancel: true,
			LeaseDuration: e.lease, RenewDeadline: e.renew, RetryPeriod: e.retry,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					e.lead(true)
					if e.events != nil {
						e.events.Eventf(&coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
							ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: e.name}}, nil, "Normal", ReasonLeaderElected, "Lead",
							"replica %s leads: it writes the status of every object", e.identity)
					}
					if err := e.run(lctx); err != nil {
						e.log.Error("status writer stopped", "error", err)
					}
				},
				OnStoppedLeading: func() {
					e.lead(false)
					if ctx.Err() == nil {
						e.log.Warn("lost the status-writer lease; xDS keeps serving, competing again", "lease", e.namespace+"/"+e.name)
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

func (e *elector) lead(leading bool) {
	if e.leading != nil {
		e.leading(leading)
	}
}

// podNamespaceFile holds a pod's own namespace.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// electionNamespace is where the Lease lives, and why: the flag, else the
// watched namespace, else the pod's own (read from podFile), else the
// namespace of the kubeconfig context the replica runs with.
func electionNamespace(flag, watched, podFile, context string) (ns, why string, err error) {
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

func newIdentity() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}
