// Package identitytest answers the token verifier's questions (identity.Kube)
// from tables, for unit tests of what Poise does with TokenReview's answers:
// which identity, pod, node and locality a token proves, and what happens
// when a token is revoked or the apiserver cannot be asked. The envtest
// suites ask a real apiserver instead.
package identitytest

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"poise.dev/poise/pkg/identity"
)

// The TokenReview extra keys of a pod-bound token, and the node labels of a
// locality, as the apiserver and the kubelet set them.
const (
	ExtraPodName  = "authentication.kubernetes.io/pod-name"
	ExtraPodUID   = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	LabelRegion   = "topology.kubernetes.io/region"
	LabelZone     = "topology.kubernetes.io/zone"
)

// Token is a JWS-shaped token named name with an exp claim; only a Kube
// accepts it.
func Token(name string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc(fmt.Appendf(nil, `{"sub":%q,"exp":%d}`, name, exp.Unix())) + "." + enc([]byte("sig"))
}

// Kube is an identity.Kube answering from tables: the tokens it accepts
// (with the TokenReview status each gets), the pods and the nodes it knows.
// A token it does not know is refused, as TokenReview refuses an invalid or
// revoked one.
type Kube struct {
	mu     sync.Mutex
	tokens map[string]authenticationv1.TokenReviewStatus
	pods   map[string][2]string // ns/name → uid, node
	nodes  map[string]map[string]string
	fail   error
	block  chan struct{} // when set, reviews wait until it is closed

	reviews atomic.Int64
}

var _ identity.Kube = (*Kube)(nil)

// New is a Kube that knows nothing yet.
func New() *Kube {
	return &Kube{tokens: map[string]authenticationv1.TokenReviewStatus{}, pods: map[string][2]string{}, nodes: map[string]map[string]string{}}
}

// Accept makes TokenReview accept token for audience poise as service
// account sa of namespace ns, bound to pod (with uid) when pod is set, the
// node named when node is set.
func (k *Kube) Accept(token, ns, sa, pod, uid, node string) {
	extra := map[string]authenticationv1.ExtraValue{}
	if pod != "" {
		extra[ExtraPodName] = authenticationv1.ExtraValue{pod}
		extra[ExtraPodUID] = authenticationv1.ExtraValue{uid}
	}
	if node != "" {
		extra[ExtraNodeName] = authenticationv1.ExtraValue{node}
	}
	k.SetStatus(token, authenticationv1.TokenReviewStatus{
		Authenticated: true, Audiences: []string{identity.DefaultAudience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + ns + ":" + sa, Extra: extra},
	})
}

// SetStatus is the status TokenReview answers for token.
func (k *Kube) SetStatus(token string, st authenticationv1.TokenReviewStatus) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tokens[token] = st
}

// Revoke makes TokenReview refuse token from now on, as it does once the
// token's pod is deleted.
func (k *Kube) Revoke(token string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.tokens, token)
}

// SetPod says pod ns/name has uid and runs on node ("" not yet scheduled).
func (k *Kube) SetPod(ns, name, uid, node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods[ns+"/"+name] = [2]string{uid, node}
}

// SetNode gives node name its labels.
func (k *Kube) SetNode(name string, labels map[string]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes[name] = labels
}

// SetZone gives node name the region and zone labels of a locality.
func (k *Kube) SetZone(name, region, zone string) {
	k.SetNode(name, map[string]string{LabelRegion: region, LabelZone: zone})
}

// Fail makes every TokenReview fail to be asked with err (nil: answer again).
func (k *Kube) Fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fail = err
}

// Block makes TokenReviews wait until the returned function is called.
func (k *Kube) Block() (release func()) {
	ch := make(chan struct{})
	k.mu.Lock()
	k.block = ch
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		k.block = nil
		k.mu.Unlock()
		close(ch)
	}
}

// Reviews is how many TokenReviews were asked for.
func (k *Kube) Reviews() int64 { return k.reviews.Load() }

// ReviewToken answers a TokenReview from the table of tokens.
func (k *Kube) ReviewToken(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	k.reviews.Add(1)
	k.mu.Lock()
	block := k.block
	k.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return authenticationv1.TokenReviewStatus{}, ctx.Err()
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return authenticationv1.TokenReviewStatus{}, k.fail
	}
	st, ok := k.tokens[token]
	if !ok {
		return authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return st, nil
}

// PodNode answers from the table of pods; a pod it does not know is not found.
func (k *Kube) PodNode(_ context.Context, ns, name string) (string, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.pods[ns+"/"+name]
	if !ok {
		return "", "", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	return p[0], p[1], nil
}

// NodeLabels answers from the table of nodes; a node it does not know is
// not found.
func (k *Kube) NodeLabels(_ context.Context, name string) (map[string]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return l, nil
}
