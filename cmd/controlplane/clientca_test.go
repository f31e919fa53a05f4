package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/testkit"
)

// mtlsFiles are one test's CA and the files serve reads: the plane's
// serving certificate, with the given URI SANs, and the client CA.
type mtlsFiles struct {
	ca                        *testkit.CA
	caFile, certFile, keyFile string
}

func newMTLSFiles(t *testing.T, servingURIs ...string) *mtlsFiles {
	t.Helper()
	dir := t.TempDir()
	m := &mtlsFiles{ca: testkit.NewCA(t, "poise test CA")}
	m.caFile = m.ca.WriteCA(t, dir)
	m.certFile, m.keyFile = testkit.WriteFiles(t, dir, "serving", m.ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour), servingURIs...))
	return m
}

// flags are serve's TLS flags for the files.
func (m *mtlsFiles) flags() []string {
	return []string{"--tls-cert", m.certFile, "--tls-key", m.keyFile, "--tls-client-ca", m.caFile}
}

// dial is a connection to addr presenting a client certificate of the CA
// with spiffeID, one workload instance; it ends with the test.
func (m *mtlsFiles) dial(t *testing.T, addr, spiffeID string) *grpc.ClientConn {
	t.Helper()
	cert := m.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), spiffeID)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: m.ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// servedWith runs the control plane that serve's flags make of args, on
// loopback ports of its own, logging JSON; it returns the plane's
// addresses, its logs and its banner.
func servedWith(t *testing.T, args ...string) (a controlplane.Addrs, logs, banner *testkit.Logs) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f := bindServeFlags(fs)
	if err := fs.Parse(append(args, "--log-format", "json")); err != nil {
		t.Fatal(err)
	}
	logs, banner = &testkit.Logs{}, &testkit.Logs{}
	cfg, err := f.config(banner, logs)
	if err != nil {
		t.Fatalf("serve %v: %v", args, err)
	}
	return startPlaneWith(t, cfg), logs, banner
}

// bannerOf is the plane's banner record (serve --log-format json).
func bannerOf(t *testing.T, banner *testkit.Logs) map[string]any {
	t.Helper()
	r := banner.Records(t, "poise control plane")
	if len(r) != 1 {
		t.Fatalf("banner: %s", banner)
	}
	return r[0]
}

// warned is whether the plane logged a warning with the attribute k=v.
func warned(t *testing.T, logs *testkit.Logs, k, v string) bool {
	t.Helper()
	for _, r := range logs.Records(t) {
		if r["level"] == "WARN" && r[k] == v {
			return true
		}
	}
	return false
}

// zoneNode is an Envoy of zone eu/zone declaring a demand weight (0: none).
func zoneNode(id, zone string, weight float64) *core.Node {
	n := &core.Node{Id: id, UserAgentName: "envoy", Locality: &core.Locality{Region: "eu", Zone: zone}}
	if weight > 0 {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"poise.dev/demand-weight": structpb.NewNumberValue(weight)}}
	}
	return n
}

// heldEndpoints is an ADS client that subscribes to one cluster's
// endpoints, ACKs whatever it is sent, and keeps the locality weights of
// the last, by zone, as the proxy would hold them.
type heldEndpoints struct {
	mu       sync.Mutex
	received int
	weights  map[string]uint32
	err      error
}

func holdEndpoints(t *testing.T, conn *grpc.ClientConn, node *core.Node, cluster string) *heldEndpoints {
	t.Helper()
	ctx := t.Context()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{cluster}}); err != nil {
		t.Fatal(err)
	}
	h := &heldEndpoints{}
	go func() {
		for {
			resp, err := st.Recv()
			var cla endpoint.ClusterLoadAssignment
			if err == nil && len(resp.GetResources()) == 1 {
				err = resp.GetResources()[0].UnmarshalTo(&cla)
			}
			if err == nil {
				err = st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{cluster},
					VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
			}
			h.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					h.err = fmt.Errorf("%s: %w", node.GetId(), err)
				}
				h.mu.Unlock()
				return
			}
			h.received++
			h.weights = map[string]uint32{}
			for _, l := range cla.GetEndpoints() {
				h.weights[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
			}
			h.mu.Unlock()
		}
	}()
	return h
}

// held is the last locality weights received and how many responses came.
func (h *heldEndpoints) held(t *testing.T) (map[string]uint32, int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		t.Fatal(h.err)
	}
	return maps.Clone(h.weights), h.received
}

// waitHeld waits until the client holds weights ok accepts, and returns them.
func (h *heldEndpoints) waitHeld(t *testing.T, what string, ok func(map[string]uint32) bool) map[string]uint32 {
	t.Helper()
	var w map[string]uint32
	testkit.Eventually(t, 20*time.Second, what, func() (bool, string) {
		var n int
		w, n = h.held(t)
		return n > 0 && ok(w), fmt.Sprintf("%d responses, the last %v", n, w)
	})
	return w
}

// balancedFrom is /debug/explain's Balanced division of upstream for the
// clients of zone eu/zone.
func balancedFrom(t *testing.T, a controlplane.Addrs, upstream, zone string) *explain.Balanced {
	t.Helper()
	var rep explain.Report
	testkit.MustGetJSON(t, "http://"+a.Admin+"/debug/explain?upstream="+upstream+"&from=eu/"+zone, &rep)
	if len(rep.Upstreams) != 1 || rep.Upstreams[0].Class == nil || rep.Upstreams[0].Class.Balanced == nil {
		t.Fatalf("/debug/explain of %s from eu/%s: %+v", upstream, zone, rep)
	}
	return rep.Upstreams[0].Class.Balanced
}

// demandIn is the applied demand of zone in b.
func demandIn(b *explain.Balanced, zone string) uint64 {
	for _, z := range b.Zones {
		if z.Zone == zone {
			return z.Demand
		}
	}
	return 0
}

// loadsOf is /debug/loads of cluster.
func loadsOf(t *testing.T, a controlplane.Addrs, cluster string) admin.Loads {
	t.Helper()
	var l admin.Loads
	testkit.MustGetJSON(t, "http://"+a.Admin+"/debug/loads?cluster="+cluster, &l)
	return l
}

// attackTopology is a Balanced upstream shop/web of equal capacity in
// zones eu/a and eu/b, whose split the demand weights move; a Balanced
// shop/marker like it, whose demand applied says the demand of every
// client before it has been looked at; and shop/pay, four endpoints whose
// clients report load, with fleet outlier detection that needs three
// failing reporters.
func attackTopology(t *testing.T) string {
	t.Helper()
	y := upstream("web") + "spec:\n  localityAffinity: {mode: Balanced}\n---\n" +
		endpointSet("web-a", "web", "a", "[{address: 10.1.0.1, port: 8080}]") + "---\n" +
		endpointSet("web-b", "web", "b", "[{address: 10.1.1.1, port: 8080}]") + "---\n" +
		upstream("marker") + "spec:\n  localityAffinity: {mode: Balanced}\n---\n" +
		endpointSet("marker-a", "marker", "a", "[{address: 10.2.0.1, port: 8080}]") + "---\n" +
		endpointSet("marker-b", "marker", "b", "[{address: 10.2.1.1, port: 8080}]") + "---\n" +
		upstream("pay") + "spec:\n  loadReporting: {interval: 1s}\n" +
		"  outlierDetection: {errorPercent: 20, minRequestVolume: 100, minReporters: 3}\n---\n" +
		endpointSet("pay-a", "pay", "a", "[{address: 10.3.0.1, port: 8080}, {address: 10.3.0.2, port: 8080}, "+
			"{address: 10.3.0.3, port: 8080}, {address: 10.3.0.4, port: 8080}]")
	return write(t, t.TempDir(), "shop.yaml", y)
}

// reportFailing opens an LRS stream over conn as node id and reports 100
// requests on each endpoint of shop/pay: all failed on 10.3.0.1, none on
// the others (so the reporter is trusted: it is not failing everywhere).
func reportFailing(t *testing.T, conn *grpc.ClientConn, id string) {
	t.Helper()
	st, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&lrs.LoadStatsRequest{Node: zoneNode(id, "a", 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("LRS as %s: %v", id, err)
	}
	for _, r := range []*lrs.LoadStatsRequest{endpointReport("shop/pay", "10.3.0.1", 100, 0, 100),
		endpointReport("shop/pay", "10.3.0.2", 100, 100, 0), endpointReport("shop/pay", "10.3.0.3", 100, 100, 0),
		endpointReport("shop/pay", "10.3.0.4", 100, 100, 0)} {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientCAAuthenticatesWithoutXDSAuth: serve with --tls-client-ca and
// no --xds-auth authenticates clients by their certificates, exactly as
// --xds-auth=mtls does, against the two attacks a certificate holder
// could carry out as an anonymous client, over real gRPC and mutual TLS:
//
//   - an extra stream over an honest client's certificate in zone eu/a,
//     claiming demand weight 1,000,000: the certificate is one instance,
//     counted at most 1, and the honest client's split stays keeping all
//     of eu/a's traffic local;
//   - three LRS streams of one certificate under three node IDs, reporting
//     every request to a healthy endpoint failed, where ejecting takes
//     three failing reporters: they are one, and nothing is ejected.
//
// The last row passes --xds-auth=none with the client CA, allowed and
// warned of: both attacks succeed there (the honest split falls to
// 500,000 local, the endpoint is ejected), which shows the test sees them.
func TestClientCAAuthenticatesWithoutXDSAuth(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		name      string
		args      []string
		auth      string // the banner's authentication and authenticationFrom
		anonymous bool
	}{
		{"explicit mtls", []string{"--xds-auth=mtls"}, "mtls explicit", false},
		{"default from the client CA", nil, "mtls default with --tls-client-ca", false},
		{"explicit none", []string{"--xds-auth=none"}, "none explicit", true},
	} {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			files := newMTLSFiles(t, "spiffe://cluster.local/ns/poise-system/sa/poise")
			args := append(append([]string{"-f", attackTopology(t), "--load-report-bucket", "1s"}, files.flags()...), row.args...)
			a, logs, banner := servedWith(t, args...)
			if b := bannerOf(t, banner); fmt.Sprint(b["authentication"], " ", b["authenticationFrom"]) != row.auth || b["transport"] != "mTLS" {
				t.Errorf("banner: %v; want mTLS, authentication %s", b, row.auth)
			}
			if w := warned(t, logs, "flags", "--xds-auth=none --tls-client-ca"); w != row.anonymous {
				t.Errorf("warned of certificates not used: %v, want %v\n%s", w, row.anonymous, logs)
			}

			// the honest clients: one in each zone, each of its own certificate
			checkout := files.dial(t, a.XDS, "spiffe://cluster.local/ns/shop/sa/checkout")
			honest := holdEndpoints(t, checkout, zoneNode("honest-a", "a", 0), "shop/web")
			holdEndpoints(t, files.dial(t, a.XDS, "spiffe://cluster.local/ns/shop/sa/ledger"), zoneNode("honest-b", "b", 0), "shop/web")
			before := honest.waitHeld(t, "eu/a's honest client keeps all its traffic local", func(w map[string]uint32) bool {
				return w["a"] == 1_000_000
			})

			// the forged demand, over the honest client's certificate
			forged := holdEndpoints(t, checkout, zoneNode("forged", "a", 1_000_000), "shop/web")
			forged.waitHeld(t, "the forged stream is sent its endpoints, and so counted", func(map[string]uint32) bool { return true })
			// a client of shop/marker after it: once its demand is applied,
			// so is any the forged stream moved (one census, one step)
			holdEndpoints(t, files.dial(t, a.XDS, "spiffe://cluster.local/ns/shop/sa/marker"), zoneNode("marker", "b", 0), "shop/marker")
			testkit.Eventually(t, 20*time.Second, "the marker's demand applied", func() (bool, string) {
				b := balancedFrom(t, a, "shop/marker", "b")
				return demandIn(b, "b") == 1, fmt.Sprintf("%+v", b.Zones)
			})
			// anonymous, the forged weight counts in full: eu/a's demand
			// outweighs its half of the capacity, and its clients send
			// half their traffic to eu/b
			wantDemand, wantLocal, want, forgedWeight := uint64(1), uint64(1_000_000), before, uint64(1)
			if row.anonymous {
				wantDemand, wantLocal, want, forgedWeight = 1_000_001, 500_000, map[string]uint32{"a": 500_000, "b": 500_000}, 1_000_000
			}
			web := balancedFrom(t, a, "shop/web", "a")
			if got := demandIn(web, "a"); got != wantDemand {
				t.Errorf("eu/a's applied demand of shop/web: %d, want %d", got, wantDemand)
			}
			for _, z := range web.Zones {
				if z.Zone == "a" && (z.Traffic == nil || *z.Traffic != wantLocal) {
					t.Errorf("/debug/explain: eu/a keeps %+v local, want %d millionths", z, wantLocal)
				}
			}
			var clients struct {
				Clients []struct {
					NodeID       string `json:"nodeId"`
					DemandWeight uint64 `json:"demandWeight"`
				} `json:"clients"`
			}
			testkit.MustGetJSON(t, "http://"+a.Admin+"/debug/clients", &clients)
			listed := false
			for _, c := range clients.Clients {
				if c.NodeID == "forged" {
					listed = true
					if c.DemandWeight != forgedWeight {
						t.Errorf("/debug/clients: the forged stream's demand weight %d, want %d", c.DemandWeight, forgedWeight)
					}
				}
			}
			if !listed {
				t.Errorf("/debug/clients lists no forged stream: %+v", clients.Clients)
			}
			after := honest.waitHeld(t, "eu/a's honest client's split after the forged demand", func(w map[string]uint32) bool {
				return maps.Equal(w, want)
			})
			t.Logf("eu/a's honest client: %v before the forged demand, %v after", before, after)

			// three LRS streams of the honest client's certificate
			for _, id := range []string{"node-1", "node-2", "node-3"} {
				reportFailing(t, checkout, id)
			}
			wantReporters := 1
			if row.anonymous {
				wantReporters = 3
			}
			var seen time.Time
			testkit.Eventually(t, 20*time.Second, "the three streams' reports in the window", func() (bool, string) {
				l := loadsOf(t, a, "shop/pay")
				for _, e := range l.Endpoints {
					if e.Address == "10.3.0.1" {
						if l.Outlier != nil {
							seen = l.Outlier.EvaluatedAt
						}
						return e.Reporters == wantReporters && e.Errors == 300, fmt.Sprintf("%+v", e)
					}
				}
				return false, fmt.Sprintf("%+v", l.Endpoints)
			})
			var l admin.Loads
			testkit.Eventually(t, 20*time.Second, "an outlier evaluation of the reports", func() (bool, string) {
				l = loadsOf(t, a, "shop/pay")
				return l.Outlier != nil && l.Outlier.EvaluatedAt.After(seen), fmt.Sprintf("%+v", l.Outlier)
			})
			var ejected, wantEjected []string
			for _, e := range l.Outlier.Ejections {
				ejected = append(ejected, e.Address)
			}
			if row.anonymous {
				wantEjected = []string{"10.3.0.1"}
			}
			if !slices.Equal(ejected, wantEjected) {
				t.Errorf("ejected %v after three LRS streams of one certificate, want %v", ejected, wantEjected)
			}
		})
	}
}

// TestClientTrustDomainByDefault: with mTLS and no --xds-trust-domain, a
// client certificate must be of the trust domain of the plane's own
// serving certificate's SPIFFE ID: spiffe://evil.example/ns/tenant-b/sa/x,
// though signed by the client CA, is refused UNAUTHENTICATED
// (untrusted-domain), whether mtls is explicit or the client CA's default.
// A serving certificate with no SPIFFE ID leaves any trust domain the CA
// signs accepted, and the plane warns at start; --xds-trust-domain names
// the one accepted, whatever the serving certificate's. With a client CA,
// --xds-auth=token is mtls,token, held to the same trust domain.
func TestClientTrustDomainByDefault(t *testing.T) {
	t.Parallel()
	const (
		ours    = "spiffe://cluster.local/ns/tenant-b/sa/x"
		evil    = "spiffe://evil.example/ns/tenant-b/sa/x"
		serving = "spiffe://cluster.local/ns/poise-system/sa/poise"
	)
	for _, tc := range []struct {
		name              string
		serving           []string // the serving certificate's URI SANs
		args              []string
		accepted, refused []string
		banner            string // the banner's trustDomain and trustDomainFrom
	}{
		{"the client CA's default", []string{serving}, nil, []string{ours}, []string{evil}, "cluster.local the SPIFFE ID of --tls-cert"},
		{"explicit mtls", []string{serving}, []string{"--xds-auth=mtls"}, []string{ours}, []string{evil}, "cluster.local the SPIFFE ID of --tls-cert"},
		{"a serving certificate without a SPIFFE ID", nil, nil, []string{ours, evil}, nil, " any the client CA signs"},
		{"--xds-trust-domain", []string{serving}, []string{"--xds-trust-domain=evil.example"}, []string{evil}, []string{ours},
			"evil.example --xds-trust-domain"},
		// token with a client CA is mtls,token: a certificate alone
		// identifies its client, so it is held to the trust domain too
		// (no token is reviewed: the kubeconfig leads nowhere)
		{"--xds-auth=token", []string{serving}, []string{"--xds-auth=token", "--kubeconfig", deadKubeconfig(t)}, []string{ours}, []string{evil},
			"cluster.local the SPIFFE ID of --tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := newMTLSFiles(t, tc.serving...)
			a, logs, banner := servedWith(t, append(append([]string{"-f", examples}, files.flags()...), tc.args...)...)
			if b := bannerOf(t, banner); fmt.Sprint(b["trustDomain"], " ", b["trustDomainFrom"]) != tc.banner {
				t.Errorf("banner: %v; want the trust domain %q", b, tc.banner)
			}
			wantWarning := tc.refused == nil
			if w := warned(t, logs, "flag", "--xds-trust-domain"); w != wantWarning {
				t.Errorf("warned that any trust domain is accepted: %v, want %v\n%s", w, wantWarning, logs)
			}
			ask := func(id string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				st, err := discovery.NewAggregatedDiscoveryServiceClient(files.dial(t, a.XDS, id)).StreamAggregatedResources(ctx)
				if err == nil {
					err = st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "x"}, TypeUrl: resource.ClusterType})
				}
				// a stream refused while its request is sent fails Send
				// with io.EOF; the refusal's status is then Recv's
				if err == nil || errors.Is(err, io.EOF) {
					_, err = st.Recv()
				}
				return err
			}
			for _, id := range tc.accepted {
				if err := ask(id); err != nil {
					t.Errorf("%s refused: %v", id, err)
				}
			}
			for _, id := range tc.refused {
				err := ask(id)
				if s, _ := status.FromError(err); s.Code() != codes.Unauthenticated || !strings.Contains(s.Message(), "untrusted-domain") {
					t.Errorf("%s: %v; want UNAUTHENTICATED, untrusted-domain", id, err)
				}
			}
		})
	}
}
