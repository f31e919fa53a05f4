package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
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
)

type pki struct {
	dir                   string
	caPool                *x509.CertPool
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	serverCert, serverKey string
	clientPair            tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), caPool: x509.NewCertPool()}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "poise test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caPool.AddCert(p.ca)
	writePEM(t, filepath.Join(p.dir, "ca.pem"), "CERTIFICATE", der)
	p.serverCert, p.serverKey = p.issue(t, "server", x509.ExtKeyUsageServerAuth, 2)
	cc, ck := p.issue(t, "client", x509.ExtKeyUsageClientAuth, 3)
	if p.clientPair, err = tls.LoadX509KeyPair(cc, ck); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
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
// address and a function that puts c1 at another version.
func serveMutualTLS(t *testing.T, p *pki) (addr string, put func(version string, timeout int64)) {
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
	return lis.Addr().String(), put
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	addr, _ := serveMutualTLS(t, p)

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
