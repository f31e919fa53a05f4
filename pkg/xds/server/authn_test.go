package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/test/testkit"
)

// spiffeCA is the test CA of test/testkit, with a directory for the PEM
// files the server reads.
type spiffeCA struct {
	*testkit.CA
	dir string
}

func newSPIFFECA(t *testing.T) *spiffeCA {
	t.Helper()
	c := &spiffeCA{CA: testkit.NewCA(t, "poise test SPIFFE CA"), dir: t.TempDir()}
	c.WriteCA(t, c.dir)
	return c
}

func (c *spiffeCA) issue(t *testing.T, usage x509.ExtKeyUsage, notAfter time.Time, uris ...string) tls.Certificate {
	return c.Issue(t, usage, notAfter, uris...)
}

// serverTLS writes a server certificate and returns the server's TLS files
// (mTLS, with the CA as the client CA).
func (c *spiffeCA) serverTLS(t *testing.T) *server.TLS {
	t.Helper()
	cert, key := testkit.WriteFiles(t, c.dir, "server", c.issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)))
	return &server.TLS{CertFile: cert, KeyFile: key, ClientCAFile: filepath.Join(c.dir, "ca.pem")}
}

// dial is a connection to addr presenting the certificate.
func (c *spiffeCA) dial(t *testing.T, addr string, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	pool := c.Pool()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// authServer is a real xDS server on 127.0.0.1 with the authenticator,
// serving LRS and one cluster of each rendering, logging to log.
type authServer struct {
	addr    string
	srv     *server.Server
	clients *server.Clients
	metrics *metrics.XDS
	loads   *loadreport.Store
	log     *lockedBuffer
}

func serveAuth(t *testing.T, authn *identity.Authenticator, tlsFiles *server.TLS) *authServer {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(topologytest.Batch(2))
	if err != nil {
		t.Fatal(err)
	}
	s := &authServer{log: &lockedBuffer{}, loads: loadreport.NewStore(loadreport.Config{})}
	s.loads.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	reasons := make([]string, 0, len(identity.Reasons()))
	for _, r := range identity.Reasons() {
		reasons = append(reasons, string(r))
	}
	s.metrics = metrics.New(metrics.Options{Types: servedTypes(), RefusalReasons: reasons}).XDS
	s.clients = server.NewClients(s.metrics, slog.New(slog.NewJSONHandler(s.log, nil)))
	cache := xdscache.New(2, func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	e, err := xdscache.NewEntry("bench/svc-0000", "v1", cluster("bench/svc-0000", 1))
	if err != nil {
		t.Fatal(err)
	}
	cache.Apply(xdscache.Update{Version: "v1", Changes: both(CDS, e)})
	s.srv, err = server.New(cache, s.clients, server.Config{TLS: tlsFiles, Authenticator: authn, LoadReports: s.loads,
		Log: slog.New(slog.NewJSONHandler(s.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, s.srv, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	s.addr = lis.Addr().String()
	return s
}

func (s *authServer) refused(reason identity.Reason) float64 {
	return testutil.ToFloat64(s.metrics.Refused.WithLabelValues(string(reason)))
}

// call calls one method of the server as a client would, with the node,
// and returns the status the call ends with (nil: it was answered).
func call(conn *grpc.ClientConn, method string, stream bool, node *core.Node) error {
	return callIn(context.Background(), conn, method, stream, node)
}

// callIn is call in ctx, which may carry call metadata.
func callIn(parent context.Context, conn *grpc.ClientConn, method string, stream bool, node *core.Node) error {
	ctx, cancel := context.WithTimeout(parent, 5*time.Second)
	defer cancel()
	var req, resp any
	switch {
	case strings.Contains(method, "LoadReporting"):
		req, resp = &lrs.LoadStatsRequest{Node: node}, &lrs.LoadStatsResponse{}
	case strings.Contains(method, "/Delta"):
		req, resp = &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: CDS, ResourceNamesSubscribe: []string{"*"}}, &discovery.DeltaDiscoveryResponse{}
	default:
		req, resp = &discovery.DiscoveryRequest{Node: node, TypeUrl: CDS}, &discovery.DiscoveryResponse{}
	}
	if !strings.Contains(method, "Aggregated") { // a per-type service: its own type
		switch r := req.(type) {
		case *discovery.DiscoveryRequest:
			r.TypeUrl = ""
		case *discovery.DeltaDiscoveryRequest:
			r.TypeUrl = ""
		}
	}
	if !stream {
		return conn.Invoke(ctx, method, req, resp)
	}
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil && !errors.Is(err, io.EOF) { // io.EOF: the status comes with RecvMsg
		return err
	}
	return cs.RecvMsg(resp)
}

// methods are every method the server registers: "/service/method" and
// whether it streams.
func methods(t *testing.T, s *server.Server) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for svc, info := range server.ServiceInfo(s) {
		for _, m := range info.Methods {
			out["/"+svc+"/"+m.Name] = m.IsClientStream || m.IsServerStream
		}
	}
	return out
}

// Every method the server registers (ADS SotW and Delta, the per-type
// services' SotW, Delta and unary Fetch, LRS), called without credentials
// when authentication is required, ends with Unauthenticated: nothing is
// sent, no client is registered, no load report is kept, and each refusal
// is counted under no-credentials and logged within bounds.
func TestEveryMethodRefusesNoCredentials(t *testing.T) {
	t.Parallel()
	s := serveAuth(t, identity.New(identity.Options{}), nil)
	ms := methods(t, s.srv)
	if len(ms) != 2+4*3+1 { // ADS (SotW, Delta), four types (SotW, Delta, Fetch), LRS
		t.Fatalf("%d methods registered: %v", len(ms), ms)
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := &core.Node{Id: "anon", UserAgentName: "envoy"}
	for m, stream := range ms {
		err := call(conn, m, stream, node)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "no-credentials") {
			t.Errorf("%s without credentials: %v, want Unauthenticated (no-credentials)", m, err)
		}
	}
	if got := s.refused(identity.ReasonNoCredentials); got != float64(len(ms)) {
		t.Errorf("poise_xds_refused_total{reason=no-credentials} = %v, want %d", got, len(ms))
	}
	if n := len(s.clients.List()); n != 0 {
		t.Errorf("%d clients registered", n)
	}
	if lines := strings.Count(s.log.String(), "xDS client refused for its identity"); lines != 1 {
		t.Errorf("%d refusal lines for %d refusals of one reason within 10 s, want 1:\n%s", lines, len(ms), s.log)
	}
	// every reason's series exists from the start, and no other
	if got := testutil.CollectAndCount(s.metrics.Refused); got != len(identity.Reasons()) {
		t.Errorf("%d refusal series, want one per reason (%d)", got, len(identity.Reasons()))
	}
}

func claimingNode(id, ns, sa string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa})
	return &core.Node{Id: id, UserAgentName: "envoy", Metadata: md}
}

// A valid certificate of tenant B whose node claims tenant A's namespace
// (or another service account) is refused with PermissionDenied on every
// kind of call, counted as claim-mismatch; the same certificate with
// claims it backs is served, its identity on /debug/clients and in the
// per-principal stream gauge.
func TestClaimsBoundToCertificate(t *testing.T) {
	t.Parallel()
	ca := newSPIFFECA(t)
	s := serveAuth(t, identity.New(identity.Options{TrustDomain: "cluster.local"}), ca.serverTLS(t))
	tenantB := ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/tenant-b/sa/ledger")
	conn := ca.dial(t, s.addr, tenantB)
	ms := methods(t, s.srv)
	for _, claim := range [][2]string{{"tenant-a", "ledger"}, {"tenant-b", "pay"}} {
		for m, stream := range ms {
			err := call(conn, m, stream, claimingNode("b-as-a", claim[0], claim[1]))
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "claim-mismatch") {
				t.Errorf("%s claiming %s/%s with tenant-b/ledger's certificate: %v, want PermissionDenied", m, claim[0], claim[1], err)
			}
		}
	}
	if got, want := s.refused(identity.ReasonClaimMismatch), float64(2*len(ms)); got != want {
		t.Errorf("claim-mismatch refusals %v, want %v", got, want)
	}
	if n := len(s.clients.List()); n != 0 {
		t.Errorf("%d clients registered after refusals", n)
	}
	if !strings.Contains(s.log.String(), `"level":"WARN","msg":"xDS client refused for its identity","reason":"claim-mismatch"`) {
		t.Errorf("no WARN line for the claim mismatch:\n%s", s.log)
	}

	// the same certificate, claiming what it proves: served
	for m, stream := range ms {
		if !stream {
			if err := call(conn, m, stream, claimingNode("b", "tenant-b", "ledger")); err != nil && status.Code(err) == codes.PermissionDenied {
				t.Errorf("%s with matching claims: %v", m, err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discovery.DiscoveryRequest{Node: claimingNode("b", "tenant-b", "ledger"), TypeUrl: CDS}); err != nil {
		t.Fatal(err)
	}
	r, err := ads.Recv()
	if err != nil || len(r.GetResources()) != 1 {
		t.Fatalf("matching claims: %v, %v", r, err)
	}
	cl := s.clients.List()
	if len(cl) != 1 || cl[0].Identity == nil || cl[0].Identity.Principal != "tenant-b/ledger" || cl[0].Identity.Method != "certificate" ||
		cl[0].Identity.SPIFFEID != "spiffe://cluster.local/ns/tenant-b/sa/ledger" || !strings.HasPrefix(cl[0].Identity.Instance, "cert:") {
		t.Errorf("/debug/clients: %+v", cl)
	}
	if got := testutil.ToFloat64(s.metrics.IdentityStreams.WithLabelValues("tenant-b/ledger")); got != 1 {
		t.Errorf("poise_xds_identity_streams{principal=tenant-b/ledger} = %v, want 1", got)
	}
	// a later request claiming another namespace ends the stream
	if err := ads.Send(&discovery.DiscoveryRequest{Node: claimingNode("b", "tenant-a", "ledger"), TypeUrl: CDS, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
		t.Fatal(err)
	}
	if _, err := ads.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a later request claiming tenant-a: %v, want PermissionDenied", err)
	}
	eventually(t, "the gauge back to 0", func() bool {
		return testutil.CollectAndCount(s.metrics.IdentityStreams) == 2 // ~other and ~anonymous only
	})
}

// A stream ends within the bound (1 s) of its certificate's NotAfter with
// Unauthenticated "credentials expired", counted under expired.
func TestExpiringCertificateEndsStream(t *testing.T) {
	ca := newSPIFFECA(t)
	s := serveAuth(t, identity.New(identity.Options{}), ca.serverTLS(t))
	short := ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(3*time.Second), "spiffe://cluster.local/ns/tenant-a/sa/pay")
	notAfter := short.Leaf.NotAfter
	conn := ca.dial(t, s.addr, short)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []func()
	for _, delta := range []bool{false, true} {
		var recv func() error
		if delta {
			d, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Send(&discovery.DeltaDiscoveryRequest{Node: claimingNode("a", "tenant-a", "pay"), TypeUrl: CDS, ResourceNamesSubscribe: []string{"*"}}); err != nil {
				t.Fatal(err)
			}
			recv = func() error { _, err := d.Recv(); return err }
		} else {
			a, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Send(&discovery.DiscoveryRequest{Node: claimingNode("a", "tenant-a", "pay"), TypeUrl: CDS}); err != nil {
				t.Fatal(err)
			}
			recv = func() error { _, err := a.Recv(); return err }
		}
		if err := recv(); err != nil {
			t.Fatalf("delta=%v: not served before expiry: %v", delta, err)
		}
		ended := make(chan error, 1)
		go func() { ended <- recv() }()
		waits = append(waits, func() {
			err := <-ended
			late := time.Since(notAfter)
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "credentials expired") {
				t.Errorf("delta=%v: stream ended with %v, want Unauthenticated, credentials expired", delta, err)
			}
			if late < 0 || late > time.Second {
				t.Errorf("delta=%v: stream ended %v after NotAfter, want within 1s", delta, late)
			}
			t.Logf("delta=%v: ended %v after NotAfter: %v", delta, late, err)
		})
	}
	for _, wait := range waits {
		wait()
	}
	if got := s.refused(identity.ReasonExpired); got != 2 {
		t.Errorf("expired refusals %v, want 2", got)
	}
}

// The per-principal gauge holds at most metrics.MaxPrincipals series of
// principals; the streams of the others count under ~other.
func TestIdentityStreamsBounded(t *testing.T) {
	t.Parallel()
	ca := newSPIFFECA(t)
	s := serveAuth(t, identity.New(identity.Options{}), ca.serverTLS(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = metrics.MaxPrincipals + 3
	for i := range n {
		cert := ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/ns-"+itoa(i)+"/sa/sa")
		conn := ca.dial(t, s.addr, cert)
		ads, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ads.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: CDS}); err != nil {
			t.Fatal(err)
		}
		if _, err := ads.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.CollectAndCount(s.metrics.IdentityStreams); got != metrics.MaxPrincipals+2 {
		t.Errorf("%d series, want %d principals + ~other + ~anonymous", got, metrics.MaxPrincipals)
	}
	if got := testutil.ToFloat64(s.metrics.IdentityStreams.WithLabelValues(metrics.OtherPrincipal)); got != 3 {
		t.Errorf("~other = %v, want 3", got)
	}
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }
