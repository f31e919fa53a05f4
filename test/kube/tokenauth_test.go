package kube_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/testkit"
)

// tokenCA is the certificate authority of one test: the plane's serving
// certificate for 127.0.0.1, the pool its clients trust (caFile, the same
// as PEM, for clients that read a file, and for planes that verify client
// certificates).
type tokenCA struct {
	ca     *testkit.CA
	pool   *x509.CertPool
	caFile string
	files  *server.TLS
}

func newTokenCA(t *testing.T) *tokenCA {
	t.Helper()
	ca := testkit.NewCA(t, "poise test CA")
	dir := t.TempDir()
	certFile, keyFile := testkit.WriteFiles(t, dir, "server", ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)))
	return &tokenCA{ca: ca, pool: ca.Pool(), files: &server.TLS{CertFile: certFile, KeyFile: keyFile}, caFile: ca.WriteCA(t, dir)}
}

// mtls is the plane's TLS when it verifies client certificates from this CA.
func (c *tokenCA) mtls() *server.TLS {
	f := *c.files
	f.ClientCAFile = c.caFile
	return &f
}

// workloadCert is a client certificate with the SPIFFE ID of service
// account sa in namespace ns: one workload instance.
func (c *tokenCA) workloadCert(t *testing.T, ns, sa string) tls.Certificate {
	t.Helper()
	return c.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/"+ns+"/sa/"+sa)
}

// dialCert is a mutual-TLS connection to addr with the client certificate.
func (c *tokenCA) dialCert(t *testing.T, addr string, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// bearer sends a token as gRPC call credentials, which grpc-go refuses to
// send over a connection without transport security.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// dialToken is a TLS connection to addr whose every RPC carries the token.
func (c *tokenCA) dialToken(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1"})),
		grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// workload is a service account with a pod on a zoned node.
type workload struct {
	cs        kubernetes.Interface
	ns, sa    string
	node, pod string
	podUID    string
}

func newWorkload(t *testing.T, ns string) *workload {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	w := &workload{cs: cs, ns: ns, sa: "checkout", node: ns + "-node", pod: "checkout-0"}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: w.sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node, Labels: map[string]string{source.LabelRegion: "eu-west", source.LabelZone: "eu-west-c"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), w.node, metav1.DeleteOptions{}) })
	// envtest has no scheduler: the pod is placed on the node from the start
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.pod},
		Spec: corev1.PodSpec{ServiceAccountName: w.sa, NodeName: w.node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.podUID = string(pod.UID)
	return w
}

// token is a TokenRequest token for the audience, bound to the pod.
func (w *workload) token(t *testing.T, audience string) string {
	t.Helper()
	tr, err := w.cs.CoreV1().ServiceAccounts(w.ns).CreateToken(t.Context(), w.sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{audience},
			ExpirationSeconds: new(int64(600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod, UID: types.UID(w.podUID)},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// claims is a node whose metadata claims the namespace and service account,
// as Istio's proxies send them.
func claims(id, ns, sa string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa})
	return &core.Node{Id: id, UserAgentName: "envoy", Metadata: md}
}

// tokenReviews counts the TokenReviews a client configuration creates.
type tokenReviews struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c tokenReviews) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// apiserverTokenReviews is the apiserver's own count of TokenReview
// creations (apiserver_request_total), over every client.
func apiserverTokenReviews(t *testing.T, cs kubernetes.Interface) float64 {
	t.Helper()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) || !strings.Contains(line, `verb="POST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("apiserver metric %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// sotwCDS opens an ADS stream, asks for every cluster as node and returns
// the stream after its first response, or the error the stream ended with.
func sotwCDS(ctx context.Context, conn *grpc.ClientConn, node *core.Node) (discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *discoverygrpc.DiscoveryResponse, error) {
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		_, err = stream.Recv()
		return nil, nil, err
	}
	resp, err := stream.Recv()
	return stream, resp, err
}

// deltaCDS is sotwCDS over a Delta ADS stream, subscribing to one cluster.
func deltaCDS(ctx context.Context, conn *grpc.ClientConn, node *core.Node, name string) (*discoverygrpc.DeltaDiscoveryResponse, error) {
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{name}}); err != nil {
		_, err = stream.Recv()
		return nil, err
	}
	return stream.Recv()
}

// TestTokenAuthenticationEndToEnd: a plane in Kubernetes mode with
// --xds-auth=token over TLS, against a real apiserver. A pod-bound
// TokenRequest token for the audience poise is served over SotW and Delta,
// and /debug/clients shows the service account and the pod; a token for
// another audience is refused Unauthenticated (bad-token), a valid token
// whose node claims another namespace PermissionDenied (claim-mismatch),
// each counted; 50 concurrent streams with one token cost one TokenReview,
// as both the plane's client and the apiserver count them.
func TestTokenAuthenticationEndToEnd(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	createEchoImport(t, ns)
	w := newWorkload(t, ns)
	ca := newTokenCA(t)
	var reviews atomic.Int64
	rc := rest.CopyConfig(restConfig)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return tokenReviews{rt: rt, n: &reviews} })
	p := startPlaneWith(t, ns, "token", func(c *controlplane.Config) {
		c.RestConfig = rc
		c.TLS = ca.files
		c.XDSAuth = []string{controlplane.AuthToken}
		c.XDSTokenAudience = "poise"
	})
	cluster := ns + "/echo"
	node := claims("checkout-0.envoy", ns, w.sa)

	// a pod-bound token for poise: served over SotW, then Delta
	good := w.token(t, "poise")
	conn := ca.dialToken(t, p.addrs.XDS, good)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, resp, err := sotwCDS(ctx, conn, node)
	if err != nil {
		t.Fatalf("SotW CDS with the pod's token: %v", err)
	}
	t.Logf("SotW with a valid token: %d clusters in %v", len(resp.GetResources()), time.Since(start).Round(time.Millisecond))
	if len(resp.GetResources()) == 0 {
		t.Errorf("SotW CDS with the pod's token: no clusters, want %s", cluster)
	}
	dresp, err := deltaCDS(ctx, conn, claims("checkout-0.grpc", ns, w.sa), cluster)
	if err != nil {
		t.Fatalf("Delta CDS with the pod's token: %v", err)
	}
	if len(dresp.GetResources()) != 1 || dresp.GetResources()[0].GetName() != cluster {
		t.Errorf("Delta CDS %s with the pod's token: %d resources", cluster, len(dresp.GetResources()))
	}
	testkit.Eventually(t, 10*time.Second, "/debug/clients shows the token's identity on both streams", func() (bool, string) {
		clients, err := p.clients()
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		var detail []string
		for _, c := range clients {
			id := c.Identity
			if id == nil {
				detail = append(detail, c.NodeID+": no identity")
				continue
			}
			detail = append(detail, fmt.Sprintf("%s %s: %+v", c.NodeID, c.Protocol, *id))
			if id.Principal == ns+"/"+w.sa && id.Method == "token" && id.Pod == ns+"/"+w.pod && id.Instance == "pod:"+w.podUID && !id.Expires.IsZero() {
				seen[c.Protocol] = true
			}
		}
		return seen["sotw"] && seen["delta"], strings.Join(detail, "; ")
	})
	if reviews.Load() != 1 {
		t.Errorf("one token over two streams: %d TokenReviews, want 1", reviews.Load())
	}

	// a token of the same pod for another audience
	badBefore := metricValue(t, p, `poise_xds_refused_total{reason="bad-token"}`)
	other := ca.dialToken(t, p.addrs.XDS, w.token(t, "some-other-service"))
	start = time.Now()
	_, _, err = sotwCDS(ctx, other, node)
	took := time.Since(start)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("SotW with a token for another audience: %v, want Unauthenticated", err)
	}
	t.Logf("a token for another audience refused in %v: %v", took.Round(time.Millisecond), err)
	if _, err := deltaCDS(ctx, other, node, cluster); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Delta with a token for another audience: %v, want Unauthenticated", err)
	}
	if got := metricValue(t, p, `poise_xds_refused_total{reason="bad-token"}`) - badBefore; got != 2 {
		t.Errorf("poise_xds_refused_total{reason=\"bad-token\"} rose by %v, want 2", got)
	}

	// the good token, with a node that claims another namespace
	mismatchBefore := metricValue(t, p, `poise_xds_refused_total{reason="claim-mismatch"}`)
	start = time.Now()
	_, _, err = sotwCDS(ctx, conn, claims("checkout-0.liar", "payments", w.sa))
	took = time.Since(start)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("SotW claiming namespace payments: %v, want PermissionDenied", err)
	}
	t.Logf("a claim of another namespace refused in %v: %v", took.Round(time.Millisecond), err)
	if _, err := deltaCDS(ctx, conn, claims("checkout-0.liar", ns, "admin"), cluster); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Delta claiming service account admin: %v, want PermissionDenied", err)
	}
	if got := metricValue(t, p, `poise_xds_refused_total{reason="claim-mismatch"}`) - mismatchBefore; got != 2 {
		t.Errorf("poise_xds_refused_total{reason=\"claim-mismatch\"} rose by %v, want 2", got)
	}
	if !p.logs.contains("xDS client refused for its identity") || !p.logs.contains("reason=claim-mismatch") {
		t.Errorf("no WARN line for the claim mismatch in the plane's log")
	}

	// 50 concurrent streams, over 5 connections, with one fresh token
	fresh := w.token(t, "poise")
	pluginBefore, apiBefore := reviews.Load(), apiserverTokenReviews(t, w.cs)
	const streams = 50
	conns := make([]*grpc.ClientConn, 5)
	for i := range conns {
		conns[i] = ca.dialToken(t, p.addrs.XDS, fresh)
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	start = time.Now()
	for i := range streams {
		wg.Go(func() {
			_, _, err := sotwCDS(ctx, conns[i%len(conns)], claims(fmt.Sprintf("checkout-0.s%d", i), ns, w.sa))
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d streams with one token served in %v", streams, time.Since(start).Round(time.Millisecond))
	plugin, api := reviews.Load()-pluginBefore, apiserverTokenReviews(t, w.cs)-apiBefore
	t.Logf("%d streams with one token: %d TokenReviews sent by the plane, %v counted by the apiserver", streams, plugin, api)
	if plugin != 1 || api != 1 {
		t.Errorf("%d streams with one token: %d TokenReviews sent, %v counted by the apiserver; want 1", streams, plugin, api)
	}
	if got := metricValue(t, p, `poise_xds_identity_streams{principal="`+ns+`/`+w.sa+`"}`); got < streams {
		t.Errorf("poise_xds_identity_streams for %s/%s: %v, want at least %d", ns, w.sa, got, streams)
	}
}
