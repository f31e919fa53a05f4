package e2e

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// testCA issues one test's certificates into its directory: the control
// plane's for 127.0.0.1 and the clients' with SPIFFE URI SANs.
type testCA struct {
	*testkit.CA
	dir  string
	File string // the CA certificate, PEM
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	c := &testCA{CA: testkit.NewCA(t, "poise e2e CA"), dir: t.TempDir()}
	c.File = c.WriteCA(t, c.dir)
	return c
}

// issue writes a certificate and its key as name.pem and name-key.pem and
// returns their paths; spiffeID, when set, is its one URI SAN.
func (c *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage, spiffeID string) (certFile, keyFile string) {
	t.Helper()
	var uris []string
	if spiffeID != "" {
		uris = []string{spiffeID}
	}
	return testkit.WriteFiles(t, c.dir, name, c.Issue(t, usage, time.Now().Add(time.Hour), uris...))
}

// newMTLSXDSClient dials xds:///listener through grpc-go's xDS resolver
// with a bootstrap of its own whose server entry authenticates with the
// client certificate (channel_creds of type tls, read by grpc-go's
// file_watcher certificate provider) and whose node carries metadata.
func newMTLSXDSClient(t *testing.T, xdsAddr, node, listener, caFile, certFile, keyFile string, metadata map[string]any) *grpc.ClientConn {
	t.Helper()
	return splitcheck.DialXDS(t, map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri": "passthrough:///" + xdsAddr,
			"channel_creds": []any{map[string]any{"type": "tls", "config": map[string]any{
				"ca_certificate_file": caFile, "certificate_file": certFile, "private_key_file": keyFile,
			}}},
		}},
		"node": map[string]any{"id": node, "cluster": "poise-tests", "metadata": metadata},
	}, listener)
}

// TestMTLSClientsThroughTheSplit: `serve -f --xds-auth=mtls` with real
// certificates. A grpc-go xDS client whose bootstrap authenticates with a
// certificate of spiffe://cluster.local/ns/shop/sa/checkout and whose node
// claims the same namespace and service account receives the topology and
// carries out the computed split; /debug/clients shows its identity. A
// second client, whose certificate is of namespace other but whose node
// claims shop, is refused PermissionDenied on every attempt: its RPCs never
// reach a backend, and the refusal is counted as claim-mismatch.
func TestMTLSClientsThroughTheSplit(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 3)
	manifests := t.TempDir()
	var y strings.Builder
	y.WriteString("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: echo, namespace: shop}\nspec:\n  protocol: GRPC\n  addressPolicy: {allowLoopback: true}\n")
	y.WriteString("---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: eu-west-a, namespace: shop}\nspec:\n  upstream: echo\n  locality: {region: eu-west, zone: eu-west-a}\n  endpoints:\n")
	for i, b := range backends {
		fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d, weight: %d}\n", b.Port, i+1)
	}
	writeAtomically(t, filepath.Join(manifests, "echo.yaml"), y.String())

	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth, "")
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr,
		"--xds-auth=mtls", "--xds-trust-domain=cluster.local",
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.File)

	const mismatch = `poise_xds_refused_total{reason="claim-mismatch"}`
	before := cp.metric(t, mismatch)

	// the honest client: its certificate and its claims agree
	certFile, keyFile := ca.issue(t, "checkout", x509.ExtKeyUsageClientAuth, "spiffe://cluster.local/ns/shop/sa/checkout")
	conn := newMTLSXDSClient(t, xdsAddr, "shop-checkout", "echo.shop", ca.File, certFile, keyFile,
		map[string]any{"NAMESPACE": "shop", "SERVICE_ACCOUNT": "checkout"})
	want := explainOffline(t, manifests, "shop/echo")
	start := time.Now()
	splitcheck.Warm(t, conn, want)
	t.Logf("the mTLS client's first RPCs succeeded %v after it dialled", time.Since(start).Round(time.Millisecond))
	got := splitcheck.Send(conn, rpcs)
	splitcheck.CheckSplit(t, "mTLS client", got, want)

	var v struct {
		Clients []struct {
			NodeID   string `json:"nodeId"`
			Identity *struct {
				Principal, Method, Instance string
				SPIFFEID                    string `json:"spiffeId"`
			} `json:"identity"`
		} `json:"clients"`
	}
	testkit.MustGetJSON(t, cp.adminURL+"/debug/clients", &v)
	found := false
	for _, c := range v.Clients {
		if c.NodeID != "shop-checkout" {
			continue
		}
		found = true
		if id := c.Identity; id == nil || id.Principal != "shop/checkout" || id.SPIFFEID != "spiffe://cluster.local/ns/shop/sa/checkout" || !strings.HasPrefix(id.Instance, "cert:") {
			t.Errorf("/debug/clients: the mTLS client's identity %+v, want shop/checkout from its certificate", id)
		}
	}
	if !found {
		t.Errorf("/debug/clients lists no shop-checkout: %+v", v.Clients)
	}
	if n := cp.metric(t, `poise_xds_identity_streams{principal="shop/checkout"}`); n < 1 {
		t.Errorf(`poise_xds_identity_streams{principal="shop/checkout"} = %v, want at least 1`, n)
	}
	if n := cp.metric(t, mismatch) - before; n != 0 {
		t.Errorf("the honest client was refused %v times for a claim mismatch", n)
	}

	// the liar: a certificate of namespace other, a node claiming shop
	liarCert, liarKey := ca.issue(t, "liar", x509.ExtKeyUsageClientAuth, "spiffe://cluster.local/ns/other/sa/checkout")
	start = time.Now()
	liar := newMTLSXDSClient(t, xdsAddr, "other-liar", "echo.shop", ca.File, liarCert, liarKey,
		map[string]any{"NAMESPACE": "shop"})
	took := testkit.Eventually(t, 10*time.Second, "the liar's refusal counted as claim-mismatch", func() (bool, string) {
		n := cp.metric(t, mismatch) - before
		return n >= 1, fmt.Sprintf("%v refusals", n)
	})
	t.Logf("the liar's first refusal counted %v after it dialled", took.Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(liar).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		t.Fatalf("the liar's RPC reached a backend")
	}
	t.Logf("the liar's RPC failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if s := liar.GetState().String(); s == "READY" {
		t.Errorf("the liar's channel is %s", s)
	}
	cp.waitLogged(t, "the liar's refusal logged", "claim-mismatch")
	testkit.MustGetJSON(t, cp.adminURL+"/debug/clients", &v)
	for _, c := range v.Clients {
		if c.NodeID == "other-liar" {
			t.Errorf("/debug/clients lists the refused liar: %+v", c)
		}
	}
}

// TestAnonymousNonLoopbackRefusedAtStart: `serve -f` with no
// authentication on a wildcard address exits 2 naming both ways out (the
// authentication flag and the explicit opt-in); with
// --xds-allow-anonymous-non-loopback it starts and warns. The second
// process is stopped as soon as it has logged its warning.
func TestAnonymousNonLoopbackRefusedAtStart(t *testing.T) {
	t.Parallel()
	examples := filepath.Join("..", "..", "examples")
	cmd := exec.Command(binary, "serve", "-f", examples, "--xds-address", "0.0.0.0:0", "--admin-address", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("serve on 0.0.0.0 without authentication: %v, want exit 2\n%s", err, out)
	}
	for _, flag := range []string{"--xds-auth", "--xds-allow-anonymous-non-loopback", "0.0.0.0:0"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("the refusal does not name %s:\n%s", flag, out)
		}
	}
	t.Logf("refused at start: %s", strings.TrimSpace(string(out)))

	start := time.Now()
	cp := cpbinary.Start(t, binary, "serve", "-f", examples, "--xds-address", "0.0.0.0:0", "--admin-address", "127.0.0.1:0",
		"--xds-allow-anonymous-non-loopback")
	warn := regexp.MustCompile(`(?m)WARN.*serving xDS without authentication on an address that is not loopback`)
	testkit.Eventually(t, 15*time.Second, "the start-up warning", func() (bool, string) {
		if cp.Exited() {
			t.Fatalf("serve with --xds-allow-anonymous-non-loopback exited:\n%s", cp.Logs())
		}
		return warn.MatchString(cp.Logs()), cp.Logs()
	})
	cp.Stop(t)
	t.Logf("started with the opt-in and warned within %v", time.Since(start).Round(time.Millisecond))
	if code := cp.ExitCode(); code != 0 {
		t.Errorf("serve with the opt-in exited %d after SIGINT\n%s", code, cp.Logs())
	}
}
