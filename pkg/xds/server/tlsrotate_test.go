package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"poise.dev/poise/pkg/xds/server"
)

// replaceFile puts data at path the way a Secret volume does: written
// aside, then renamed over, so a reader sees the old or the new file whole.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A rotated certificate and client CA are used from the next connection
// on, without a restart; a stream opened before keeps working; files that
// cannot be used leave the last good ones serving.
func TestTLSRotation(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	other := newPKI(t) // a second CA, trusted only after the CA file is rotated
	addr, put, srv := serveMutualTLS(t, p)
	caFile := filepath.Join(p.dir, "ca.pem")

	// the serial of the certificate the server presents to a new connection
	var seen atomic.Int64
	client := func(pair tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1",
			VerifyConnection: func(cs tls.ConnectionState) error {
				seen.Store(cs.PeerCertificates[0].SerialNumber.Int64())
				return nil
			}}
	}
	if n, err := fetchCDS(addr, client(p.clientPair)); err != nil || n != 1 || seen.Load() != p.serverSerial {
		t.Fatalf("before rotation: %d clusters, serial %d, %v", n, seen.Load(), err)
	}

	// a stream opened before the rotation
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(client(p.clientPair))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: "old", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}

	// rotate the server certificate (serial 10) and add the other CA
	cert, key, rotated := p.issue(t, "server-rotated", x509.ExtKeyUsageServerAuth)
	replaceFile(t, p.serverCert, readFile(t, cert))
	replaceFile(t, p.serverKey, readFile(t, key))
	replaceFile(t, caFile, append(readFile(t, caFile), readFile(t, filepath.Join(other.dir, "ca.pem"))...))
	server.PassTLSRecheck(srv) // the files are looked at once a second at most: that second passes on the server's clock
	if n, err := fetchCDS(addr, client(p.clientPair)); err != nil || n != 1 || seen.Load() != rotated {
		t.Fatalf("after rotation: %d clusters, serial %d, %v; want the rotated certificate", n, seen.Load(), err)
	}
	if n, err := fetchCDS(addr, client(other.clientPair)); err != nil || n != 1 {
		t.Fatalf("a client of the added CA after rotation: %d clusters, %v", n, err)
	}

	// the old stream still receives
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	put("v2", 2)
	if r, err := stream.Recv(); err != nil || r.GetVersionInfo() != "v2" {
		t.Fatalf("the stream opened before rotation: %v %v", r.GetVersionInfo(), err)
	}

	// a certificate file caught mid-write: the last good one keeps serving
	replaceFile(t, p.serverCert, []byte("-----BEGIN CERTIFICATE-----\ntruncat"))
	server.PassTLSRecheck(srv)
	if n, err := fetchCDS(addr, client(p.clientPair)); err != nil || n != 1 || seen.Load() != rotated {
		t.Fatalf("with a broken certificate file: %d clusters, serial %d, %v; want the last good certificate", n, seen.Load(), err)
	}
}
