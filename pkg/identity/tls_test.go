package identity_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
	"poise.dev/poise/test/testkit"
)

// ca is the test CA of test/testkit.
type ca struct{ *testkit.CA }

func newCA(t *testing.T, name string) *ca { return &ca{testkit.NewCA(t, name)} }

func (c *ca) pool() *x509.CertPool { return c.Pool() }

func (c *ca) issue(t *testing.T, usage x509.ExtKeyUsage, notAfter time.Time, uris ...string) tls.Certificate {
	return c.Issue(t, usage, notAfter, uris...)
}

// authServer is a real gRPC server on 127.0.0.1 whose Health.Check handler
// authenticates its caller with the authenticator of the moment.
type authServer struct {
	healthgrpc.UnimplementedHealthServer
	auth atomic.Pointer[identity.Authenticator]
	last atomic.Pointer[identity.Identity]
	addr string
}

func (s *authServer) Check(ctx context.Context, _ *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	id, err := s.auth.Load().Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	s.last.Store(&id)
	return &healthgrpc.HealthCheckResponse{Status: healthgrpc.HealthCheckResponse_SERVING}, nil
}

func startServer(t *testing.T, creds credentials.TransportCredentials) *authServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	gs := grpc.NewServer(opts...)
	s := &authServer{addr: lis.Addr().String()}
	healthgrpc.RegisterHealthServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return s
}

// call makes one RPC over a fresh connection and returns the identity the
// handler resolved, or the status the client got.
func (s *authServer) call(t *testing.T, creds credentials.TransportCredentials, md ...string) (identity.Identity, error) {
	t.Helper()
	s.last.Store(nil)
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	if _, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{}); err != nil {
		return identity.Identity{}, err
	}
	return *s.last.Load(), nil
}

func TestCertificateOverGRPC(t *testing.T) {
	t.Parallel()
	authority, other := newCA(t, "poise test CA"), newCA(t, "another CA")
	serverCert := authority.issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(24*time.Hour))
	srv := startServer(t, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    authority.pool(),
		MinVersion:   tls.VersionTLS12,
	}))
	// the client sends its certificate whatever CAs the server names
	clientTLS := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			},
			RootCAs: authority.pool(), ServerName: "127.0.0.1",
		})
	}
	// pay2 ends well before the CA (24 h), so the chain's earliest expiry is
	// the leaf's: issued a day on, the two fall in one second or the next.
	inAnHour, inTwentyHours := time.Now().Add(time.Hour), time.Now().Add(20*time.Hour)
	const payID = "spiffe://cluster.local/ns/tenant-a/sa/pay"
	pay := authority.issue(t, x509.ExtKeyUsageClientAuth, inAnHour, payID)
	pay2 := authority.issue(t, x509.ExtKeyUsageClientAuth, inTwentyHours, payID)
	strict := identity.New(identity.Options{TrustDomain: "cluster.local"})
	later := identity.New(identity.Options{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	anonymous := identity.New(identity.Options{AllowAnonymous: true})

	for _, tc := range []struct {
		name   string
		auth   *identity.Authenticator
		creds  credentials.TransportCredentials
		reason identity.Reason
		code   codes.Code // for a handshake that fails
		want   identity.Identity
	}{
		{name: "one SPIFFE ID", auth: strict, creds: clientTLS(pay), want: identity.Identity{
			Method: identity.MethodCertificate, SPIFFEID: payID, TrustDomain: "cluster.local",
			Namespace: "tenant-a", ServiceAccount: "pay", Expires: pay.Leaf.NotAfter}},
		{name: "same SPIFFE ID, another certificate", auth: strict, creds: clientTLS(pay2), want: identity.Identity{
			Method: identity.MethodCertificate, SPIFFEID: payID, TrustDomain: "cluster.local",
			Namespace: "tenant-a", ServiceAccount: "pay", Expires: pay2.Leaf.NotAfter}},
		{name: "two SPIFFE IDs", auth: strict, reason: identity.ReasonSeveralSPIFFEIDs, creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, payID, "spiffe://cluster.local/ns/tenant-b/sa/ledger"))},
		{name: "no URI SAN", auth: strict, reason: identity.ReasonNoSPIFFEID, creds: clientTLS(authority.issue(t, x509.ExtKeyUsageClientAuth, inAnHour))},
		{name: "only a non-SPIFFE URI", auth: strict, reason: identity.ReasonNoSPIFFEID, creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, "https://tenant-a.example/pay"))},
		{name: "malformed SPIFFE ID", auth: strict, reason: identity.ReasonBadSPIFFEID, creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, "spiffe://cluster.local/workload/pay"))},
		{name: "other trust domain", auth: strict, reason: identity.ReasonUntrustedDomain, creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, "spiffe://evil.example/ns/tenant-a/sa/pay"))},
		{name: "other trust domain, none required", auth: identity.New(identity.Options{}), creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, "spiffe://other.example/ns/tenant-a/sa/pay")), want: identity.Identity{
			Method: identity.MethodCertificate, SPIFFEID: "spiffe://other.example/ns/tenant-a/sa/pay", TrustDomain: "other.example",
			Namespace: "tenant-a", ServiceAccount: "pay"}},
		{name: "leaf expired on a long stream", auth: later, reason: identity.ReasonExpired, creds: clientTLS(pay)},
		{name: "leaf valid twenty hours, two hours on", auth: later, creds: clientTLS(pay2), want: identity.Identity{
			Method: identity.MethodCertificate, SPIFFEID: payID, TrustDomain: "cluster.local",
			Namespace: "tenant-a", ServiceAccount: "pay", Expires: pay2.Leaf.NotAfter}},
		{name: "expired at the handshake", auth: strict, code: codes.Unavailable, creds: clientTLS(authority.issue(t,
			x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Minute), payID))},
		{name: "another CA", auth: strict, code: codes.Unavailable, creds: clientTLS(other.issue(t,
			x509.ExtKeyUsageClientAuth, inAnHour, payID))},
		{name: "no certificate", auth: strict, reason: identity.ReasonNoCredentials, creds: clientTLS()},
		{name: "no certificate, anonymous allowed", auth: anonymous, creds: clientTLS(), want: identity.Identity{Method: identity.MethodNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.auth.Store(tc.auth)
			got, err := srv.call(t, tc.creds)
			switch {
			case tc.code != codes.OK:
				if status.Code(err) != tc.code {
					t.Fatalf("got %v (%v), want the handshake to fail with %v", got, err, tc.code)
				}
				return
			case tc.reason != "":
				st := status.Convert(err)
				wantCode := codes.Unauthenticated
				if st.Code() != wantCode || !strings.Contains(st.Message(), string(tc.reason)) {
					t.Fatalf("got %v, %v; want %v with reason %s", got, err, wantCode, tc.reason)
				}
				t.Logf("refused: %s", st.Message())
				return
			case err != nil:
				t.Fatal(err)
			}
			if got.Method == identity.MethodCertificate && !strings.HasPrefix(got.Instance, "cert:") {
				t.Errorf("instance %q is not a certificate's", got.Instance)
			}
			tc.want.Instance = got.Instance
			if tc.want.Expires.IsZero() {
				tc.want.Expires = got.Expires
			}
			if !got.Expires.Equal(tc.want.Expires) {
				t.Errorf("expires %v, want %v", got.Expires, tc.want.Expires)
			}
			got.Expires, tc.want.Expires = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("identity\n got %+v\nwant %+v", got, tc.want)
			}
			t.Logf("identity: %s", got)
		})
	}

	// a Deployment's pods share a SPIFFE ID, not a certificate
	srv.auth.Store(strict)
	a, errA := srv.call(t, clientTLS(pay))
	b, errB := srv.call(t, clientTLS(pay2))
	again, errC := srv.call(t, clientTLS(pay))
	if errA != nil || errB != nil || errC != nil {
		t.Fatal(errA, errB, errC)
	}
	if a.Instance == b.Instance || a.Instance != again.Instance {
		t.Errorf("instances %q, %q, %q: want one per certificate", a.Instance, b.Instance, again.Instance)
	}
}

// A certificate and a token on one call must prove the same service account.
func TestCertificateAndTokenOverGRPC(t *testing.T) {
	t.Parallel()
	authority := newCA(t, "poise test CA")
	srv := startServer(t, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{authority.issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour))},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    authority.pool(),
	}))
	kube := identitytest.New()
	exp := time.Now().Add(30 * time.Minute).Truncate(time.Second)
	kube.Accept(identitytest.Token("pay-pod", exp), "tenant-a", "pay", "pay-0", "uid-0", "node-a")
	kube.SetZone("node-a", "r1", "z1")
	srv.auth.Store(identity.New(identity.Options{Tokens: identity.NewTokenVerifier(kube, identity.TokenOptions{})}))
	clientTLS := func(cert tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: authority.pool(), ServerName: "127.0.0.1"})
	}
	bearer := "Bearer " + identitytest.Token("pay-pod", exp)

	same := authority.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/tenant-a/sa/pay")
	id, err := srv.call(t, clientTLS(same), "authorization", bearer)
	if err != nil {
		t.Fatal(err)
	}
	if id.Method != identity.MethodToken || id.Instance != "pod:uid-0" || id.SPIFFEID != "spiffe://cluster.local/ns/tenant-a/sa/pay" ||
		id.Locality != (identity.Locality{Region: "r1", Zone: "z1"}) || !id.Expires.Equal(exp) {
		t.Errorf("got %+v", id)
	}

	otherSA := authority.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/tenant-b/sa/ledger")
	_, err = srv.call(t, clientTLS(otherSA), "authorization", bearer)
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), string(identity.ReasonConflictingCredentials)) {
		t.Errorf("certificate of another service account with the token: %v", err)
	}

	// a plaintext connection proves nothing but the token
	plain := startServer(t, nil)
	plain.auth.Store(srv.auth.Load())
	if id, err := plain.call(t, insecure.NewCredentials(), "authorization", bearer); err != nil || id.Method != identity.MethodToken {
		t.Errorf("token over plaintext: %+v, %v", id, err)
	}
	if _, err := plain.call(t, insecure.NewCredentials()); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), string(identity.ReasonNoCredentials)) {
		t.Errorf("nothing over plaintext: %v", err)
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
