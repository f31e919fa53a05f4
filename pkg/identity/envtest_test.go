package identity_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/test/testkit"
)

// One apiserver and etcd for the package's tests, as test/kube starts them:
// a missing KUBEBUILDER_ASSETS fails the package rather than skipping the
// tests that need it.
var (
	clientset  kubernetes.Interface
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, skip, err := testkit.EnvtestAssets("pkg/identity")
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case skip != "":
		skipReason = skip
		return m.Run()
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pkg/identity: starting kube-apiserver and etcd from %s: %v\n", assets, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pkg/identity: stopping envtest: %v\n", err)
		}
	}()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 30 * time.Second
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// countingKube counts TokenReviews and keeps the last status, and can hide
// the node-name extra to take the Pod lookup path.
type countingKube struct {
	identity.Kube
	reviews  atomic.Int64
	hideNode bool
	mu       sync.Mutex
	last     authenticationv1.TokenReviewStatus
}

func (k *countingKube) ReviewToken(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	k.reviews.Add(1)
	st, err := k.Kube.ReviewToken(ctx, token, audiences)
	k.mu.Lock()
	k.last = *st.DeepCopy()
	k.mu.Unlock()
	if k.hideNode {
		delete(st.User.Extra, "authentication.kubernetes.io/node-name")
	}
	return st, err
}

// cluster holds what one test made: a namespace, a service account, a
// zoned node and a pod on it.
type cluster struct {
	ns, sa, node string
	pod          *corev1.Pod
}

var testCounter atomic.Int64

func newCluster(t *testing.T) *cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := context.Background()
	n := testCounter.Add(1)
	c := &cluster{ns: fmt.Sprintf("tenant-%d", n), sa: "pay", node: fmt.Sprintf("node-%d", n)}
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: c.sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node, Labels: map[string]string{
		"topology.kubernetes.io/region": "eu-west", "topology.kubernetes.io/zone": "eu-west-b",
	}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.pod = c.newPod(t, "pay-0")
	return c
}

// newPod makes a pod already placed on the node: envtest has no scheduler.
func (c *cluster) newPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	pod, err := clientset.CoreV1().Pods(c.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: c.sa, NodeName: c.node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// token mints a token bound to the pod with TokenRequest.
func (c *cluster) token(t *testing.T, pod *corev1.Pod, audience string) string {
	t.Helper()
	tr, err := clientset.CoreV1().ServiceAccounts(c.ns).CreateToken(context.Background(), c.sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{audience},
			ExpirationSeconds: new(int64(600)), // the minimum
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func authenticate(a *identity.Authenticator, token string) (identity.Identity, error) {
	return a.Authenticate(bearerCtx("Bearer " + token))
}

func TestTokenReviewEnvtest(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, hide := range []bool{false, true} {
		name := "node from TokenReview's extra"
		if hide {
			name = "node from the pod"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kube := &countingKube{Kube: identity.NewKube(clientset), hideNode: hide}
			v := identity.NewTokenVerifier(kube, identity.TokenOptions{})
			auth := identity.New(identity.Options{Tokens: v})
			tok := c.token(t, c.pod, "poise")
			id, err := authenticate(auth, tok)
			if err != nil {
				t.Fatal(err)
			}
			kube.mu.Lock()
			t.Logf("TokenReview status: user %q, audiences %v, extra %v", kube.last.User.Username, kube.last.Audiences, kube.last.User.Extra)
			kube.mu.Unlock()
			want := identity.Identity{
				Method: identity.MethodToken, Namespace: c.ns, ServiceAccount: c.sa, Instance: "pod:" + string(c.pod.UID),
				Pod:  identity.PodRef{Namespace: c.ns, Name: c.pod.Name, UID: string(c.pod.UID)},
				Node: c.node, Locality: identity.Locality{Region: "eu-west", Zone: "eu-west-b"},
			}
			if d := time.Until(id.Expires); d < 9*time.Minute || d > 10*time.Minute {
				t.Errorf("expires in %v, want the token's 10 minutes", d)
			}
			id.Expires = time.Time{}
			if id != want {
				t.Errorf("identity\n got %+v\nwant %+v", id, want)
			}
			t.Logf("identity: %s", id)
			for range 99 {
				if _, err := authenticate(auth, tok); err != nil {
					t.Fatal(err)
				}
			}
			st := v.Stats()
			if n := kube.reviews.Load(); n != 1 || st.Reviews != 1 || st.Hits != 99 {
				t.Errorf("100 authentications of one token: %d TokenReviews (stats %+v), want 1", n, st)
			}
			wantPodLookups := uint64(0)
			if hide {
				wantPodLookups = 1
			}
			if st.PodLookups != wantPodLookups || st.NodeLookups != 1 {
				t.Errorf("lookups %+v, want %d pod and 1 node", st, wantPodLookups)
			}
			t.Logf("100 authentications: %d TokenReview, stats %+v", kube.reviews.Load(), st)
		})
	}

	t.Run("another audience", func(t *testing.T) {
		t.Parallel()
		auth := identity.New(identity.Options{Tokens: identity.NewTokenVerifier(identity.NewKube(clientset), identity.TokenOptions{})})
		_, err := authenticate(auth, c.token(t, c.pod, "vault"))
		if identity.ReasonOf(err) != identity.ReasonBadToken {
			t.Fatalf("a token for audience vault: %v, want bad-token", err)
		}
		t.Logf("refused: %v", err)
		custom := identity.New(identity.Options{Tokens: identity.NewTokenVerifier(identity.NewKube(clientset), identity.TokenOptions{Audiences: []string{"vault"}})})
		if _, err := authenticate(custom, c.token(t, c.pod, "vault")); err != nil {
			t.Errorf("a vault token with audience vault configured: %v", err)
		}
	})

	t.Run("not a token", func(t *testing.T) {
		t.Parallel()
		auth := identity.New(identity.Options{Tokens: identity.NewTokenVerifier(identity.NewKube(clientset), identity.TokenOptions{})})
		tok := c.token(t, c.pod, "poise")
		forged := tok[:len(tok)-4] + "AAAA"
		if _, err := authenticate(auth, forged); identity.ReasonOf(err) != identity.ReasonBadToken {
			t.Errorf("a token with a bad signature: %v, want bad-token", err)
		}
	})

	t.Run("expired, by the cache's clock", func(t *testing.T) {
		t.Parallel()
		kube := &countingKube{Kube: identity.NewKube(clientset)}
		clk := &clock{now: time.Now()}
		auth := identity.New(identity.Options{Tokens: identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now})})
		tok := c.token(t, c.pod, "poise")
		if _, err := authenticate(auth, tok); err != nil {
			t.Fatal(err)
		}
		clk.Add(9 * time.Minute)
		if _, err := authenticate(auth, tok); err != nil {
			t.Fatalf("a minute before exp: %v", err)
		}
		clk.Add(61 * time.Second)
		_, err := authenticate(auth, tok)
		if identity.ReasonOf(err) != identity.ReasonExpired {
			t.Fatalf("past exp: %v, want expired", err)
		}
		if n := kube.reviews.Load(); n != 1 {
			t.Errorf("%d TokenReviews, want 1: an expired token is refused unreviewed", n)
		}
	})

	t.Run("pod deleted", func(t *testing.T) {
		t.Parallel()
		kube := &countingKube{Kube: identity.NewKube(clientset)}
		clk := &clock{now: time.Now()}
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now, ReviewInterval: time.Second})
		auth := identity.New(identity.Options{Tokens: v})
		pod := c.newPod(t, "pay-doomed")
		tok := c.token(t, pod, "poise")
		if _, err := authenticate(auth, tok); err != nil {
			t.Fatal(err)
		}
		if err := clientset.CoreV1().Pods(c.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
			t.Fatal(err)
		}
		if _, err := authenticate(auth, tok); err != nil {
			t.Fatalf("still cached: %v", err)
		}
		// past the cache entry (ReviewInterval, not the token's exp), the
		// apiserver is asked again; its own short token cache may answer
		// from before the deletion for a few seconds
		start := time.Now()
		testkit.EventuallyEvery(t, 30*time.Second, 200*time.Millisecond, "the token of a deleted pod refused", func() (bool, string) {
			clk.Add(time.Second)
			_, err := authenticate(auth, tok)
			if identity.ReasonOf(err) != identity.ReasonBadToken {
				return false, fmt.Sprintf("still: %v", err)
			}
			t.Logf("refused %v after the deletion, after %d TokenReviews: %v", time.Since(start).Round(time.Millisecond), kube.reviews.Load(), err)
			return true, ""
		})
	})

	t.Run("cache bounded", func(t *testing.T) {
		t.Parallel()
		kube := &countingKube{Kube: identity.NewKube(clientset)}
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{CacheSize: 3})
		auth := identity.New(identity.Options{Tokens: v})
		var toks []string
		for i := range 5 {
			pod := c.newPod(t, fmt.Sprintf("pay-%d", i+10))
			toks = append(toks, c.token(t, pod, "poise"))
		}
		instances := map[string]bool{}
		for _, tok := range toks {
			id, err := authenticate(auth, tok)
			if err != nil {
				t.Fatal(err)
			}
			instances[id.Instance] = true
		}
		for _, tok := range toks[2:] { // the three most recent: cached
			if _, err := authenticate(auth, tok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := authenticate(auth, toks[0]); err != nil { // evicted: reviewed again
			t.Fatal(err)
		}
		st := v.Stats()
		if len(instances) != 5 || st.Reviews != 6 || st.Hits != 3 || st.Cached != 3 || st.Evictions != 3 || kube.reviews.Load() != 6 {
			t.Errorf("5 pods' tokens through a cache of 3: %d instances, stats %+v", len(instances), st)
		}
		t.Logf("5 tokens, cache of 3, 9 authentications: stats %+v", st)
	})
}

func TestTokenOverGRPCEnvtest(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	srv := startServer(t, nil)
	kube := &countingKube{Kube: identity.NewKube(clientset)}
	srv.auth.Store(identity.New(identity.Options{Tokens: identity.NewTokenVerifier(kube, identity.TokenOptions{})}))
	tok := c.token(t, c.pod, "poise")
	for range 5 {
		id, err := srv.call(t, insecureCreds(), "authorization", "Bearer "+tok)
		if err != nil {
			t.Fatal(err)
		}
		if id.Principal() != c.ns+"/pay" || id.Locality.Zone != "eu-west-b" {
			t.Errorf("identity %s", id)
		}
	}
	if n := kube.reviews.Load(); n != 1 {
		t.Errorf("5 RPCs with one token: %d TokenReviews", n)
	}
	_, err := srv.call(t, insecureCreds(), "authorization", "Bearer "+c.token(t, c.pod, "other"))
	if err == nil || !strings.Contains(err.Error(), "bad-token") {
		t.Errorf("a token of another audience over gRPC: %v", err)
	}
}
