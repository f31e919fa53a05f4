package identity

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The control plane's ClusterRole, for token authentication.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=pods;nodes,verbs=get

// Kube is what the token verifier asks the apiserver. Errors of the pod and
// node lookups that mean "not found" must satisfy apierrors.IsNotFound.
// The control plane's service account needs create on tokenreviews and get
// on pods and nodes.
type Kube interface {
	// ReviewToken sends a TokenReview for the audiences and returns its
	// status.
	ReviewToken(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error)
	// PodNode returns a pod's UID and the node it is scheduled on.
	PodNode(ctx context.Context, namespace, name string) (uid, node string, err error)
	// NodeLabels returns a node's labels.
	NodeLabels(ctx context.Context, name string) (map[string]string, error)
}

// NewKube is Kube over client-go's typed client.
func NewKube(cs kubernetes.Interface) Kube { return clientKube{cs} }

type clientKube struct{ cs kubernetes.Interface }

func (k clientKube) ReviewToken(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	tr, err := k.cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, fmt.Errorf("create TokenReview: %w", err)
	}
	return tr.Status, nil
}

func (k clientKube) PodNode(ctx context.Context, namespace, name string) (string, string, error) {
	p, err := k.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return string(p.UID), p.Spec.NodeName, nil
}

func (k clientKube) NodeLabels(ctx context.Context, name string) (map[string]string, error) {
	n, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n.Labels, nil
}
