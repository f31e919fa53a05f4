package server_test

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"

	clustersvc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/xds/server"
)

// TestVisibilityFollowsTheProvenIdentity: with authentication on and no
// Audience hook of its own, the server reads a client's audience from the
// identity its certificate proves. A valid identity of namespace b, whose
// node claims nothing, asking for a's upstream by name over SotW, Delta and
// Fetch is sent nothing of it, and its wildcard CDS holds b's and the shared
// upstream only; a's identity is sent a's.
func TestVisibilityFollowsTheProvenIdentity(t *testing.T) {
	t.Parallel()
	ca := newSPIFFECA(t)
	h := newHarnessWith(t, server.Config{TLS: ca.serverTLS(t), Authenticator: identity.New(identity.Options{TrustDomain: "cluster.local"})}, nil)
	w := newVisibilityWorldOn(h)
	v := w.pub.Version(w.pub.LastRevision())
	asB := ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/b/sa/ledger"))
	asA := ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/a/sa/pay"))

	h.conn = asB
	sotw := w.sotw(envoyNode("sotw-b"))
	sotw.subscribe(CDS)
	sotw.expect(CDS, v, sorted(cl(ledgerKey), cl(webKey))...)
	sotw.subscribe(EDS, cl(payKey)) // a's, by name: nothing
	sotw.none(quiet)

	delta := w.delta(envoyNode("delta-b"))
	delta.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesSubscribe: []string{cl(payKey)}})
	delta.expect(CDS, nil, nil) // the first answer, empty: nothing it may read

	r, err := clustersvc.NewClusterDiscoveryServiceClient(asB).FetchClusters(t.Context(),
		&discovery.DiscoveryRequest{Node: envoyNode("fetch-b"), TypeUrl: CDS, ResourceNames: []string{cl(payKey), cl(ledgerKey)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names2(t, r); !slices.Equal(got, []string{cl(ledgerKey)}) {
		t.Errorf("b's Fetch of a's and b's clusters: %v, want b's only", got)
	}
	if got := w.client("sotw-b").Audience; got != "b" {
		t.Errorf("/debug/clients audience of b's certificate: %q, want b", got)
	}

	h.conn = asA
	a := w.sotw(envoyNode("sotw-a"))
	a.subscribe(CDS)
	a.expect(CDS, v, sorted(cl(payKey), cl(webKey))...)
}
