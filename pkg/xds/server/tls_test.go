package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/test/testkit"
)

// pki is a test CA (test/testkit) with a server and a client certificate,
// its files in dir.
type pki struct {
	*testkit.CA
	dir                   string
	caPool                *x509.CertPool
	serverCert, serverKey string
	serverSerial          int64
	clientPair            tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{CA: testkit.NewCA(t, "poise test CA"), dir: t.TempDir()}
	p.caPool = p.Pool()
	p.WriteCA(t, p.dir)
	p.serverCert, p.serverKey, p.serverSerial = p.issue(t, "server", x509.ExtKeyUsageServerAuth)
	p.clientPair = p.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	return p
}

// issue writes a certificate for 127.0.0.1, valid for an hour, and its key
// as dir/name.pem and dir/name-key.pem; serial is the certificate's.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string, serial int64) {
	t.Helper()
	pair := p.Issue(t, usage, time.Now().Add(time.Hour))
	certFile, keyFile = testkit.WriteFiles(t, p.dir, name, pair)
	return certFile, keyFile, pair.Leaf.SerialNumber.Int64()
}

// fetchCDS opens an ADS stream with the given client TLS config and asks
// for clusters; it returns the first response's resource count or the error.
func fetchCDS(addr string, cfg *tls.Config) (int, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: "tls", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}); err != nil {
		return 0, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	return len(resp.GetResources()), nil
}

// serveMutualTLS serves, over mTLS with p's server certificate and CA file,
// a cache holding cluster c1 at v1 until the test ends. It returns the
// address, a function that puts c1 at another version, and the server.
func serveMutualTLS(t *testing.T, p *pki) (addr string, put func(version string, timeout int64), srv *server.Server) {
	t.Helper()
	cache := xdscache.New(2, func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	put = func(version string, timeout int64) {
		e, err := xdscache.NewEntry("c1", version, cluster("c1", timeout))
		if err != nil {
			t.Fatal(err)
		}
		cache.Apply(xdscache.Update{Version: version, Changes: both(resource.ClusterType, e)})
	}
	put("v1", 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g, err := server.New(cache, server.NewClients(nil, nil), server.Config{TLS: &server.TLS{
		CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: filepath.Join(p.dir, "ca.pem"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go server.Serve(ctx, g, lis)
	return lis.Addr().String(), put, g
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	addr, _, _ := serveMutualTLS(t, p)

	withCert := &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.clientPair}, ServerName: "127.0.0.1"}
	if n, err := fetchCDS(addr, withCert); err != nil || n != 1 {
		t.Fatalf("client with a certificate: %d clusters, %v", n, err)
	}
	withoutCert := &tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1"}
	if _, err := fetchCDS(addr, withoutCert); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := server.New(xdscache.New(1, func(*core.Node) int { return 0 }), nil, server.Config{TLS: &server.TLS{CertFile: p.serverCert}}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}
