package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// trustedLRS is a real LRS server over mutual TLS whose store publishes
// bench/svc-0000, readable by every client, and bench/svc-0001, readable by
// namespace a only.
type trustedLRS struct {
	ca    *spiffeCA
	addr  string
	loads *loadreport.Store
}

func serveTrustedLRS(t *testing.T) *trustedLRS { return serveTrustedLRSWith(t, loadreport.Config{}) }

// serveTrustedLRSWith is serveTrustedLRS with a store of cfg.
func serveTrustedLRSWith(t *testing.T, cfg loadreport.Config) *trustedLRS {
	t.Helper()
	return serveTrustedLRSOf(t, cfg, topologytest.Batch(2))
}

// serveTrustedLRSOf is serveTrustedLRSWith over the upstreams of b, of which
// bench/svc-0000 and bench/svc-0001 are published as above.
func serveTrustedLRSOf(t *testing.T, cfg loadreport.Config, b topology.Batch) *trustedLRS {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	s := &trustedLRS{ca: newSPIFFECA(t), loads: loadreport.NewStore(cfg)}
	s.loads.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	cache := xdscache.New(2, func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	shared, err := xdscache.NewEntry("bench/svc-0000", "v1", cluster("bench/svc-0000", 1))
	if err != nil {
		t.Fatal(err)
	}
	own, err := xdscache.NewEntry("bench/svc-0001", "v1", cluster("bench/svc-0001", 1))
	if err != nil {
		t.Fatal(err)
	}
	cache.Apply(xdscache.Update{Version: "v1", Changes: both(CDS, shared, own.WithVisibility(xdscache.VisibleToNamespaces("a")))})
	log := slog.New(slog.NewJSONHandler(&lockedBuffer{}, nil))
	srv, err := server.New(cache, server.NewClients(nil, log), server.Config{TLS: s.ca.serverTLS(t),
		Authenticator: identity.New(identity.Options{TrustDomain: "cluster.local"}), LoadReports: s.loads, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, srv, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	s.addr = lis.Addr().String()
	return s
}

func (s *trustedLRS) cert(t *testing.T, ns, sa string) tls.Certificate {
	return s.ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/"+ns+"/sa/"+sa)
}

// report opens an LRS stream over conn as node id and sends stats; it
// returns once the server has answered the first request, so the stats
// are in the store.
func report(t *testing.T, conn *grpc.ClientConn, id string, stats ...*endpointv3.ClusterStats) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&lrs.LoadStatsRequest{Node: envoyNode(id), ClusterStats: stats}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
}

func reportersOf(s *loadreport.Store, cluster, addr string) int {
	for _, e := range s.Cluster(cluster, time.Now()) {
		if e.Address == addr {
			return e.Reporters
		}
	}
	return 0
}

// Three LRS streams with three node IDs over one client certificate are one
// reporter: the store counts workload instances, not the node IDs they
// claim.
func TestLoadReportsCountOneCertificateOnce(t *testing.T) {
	t.Parallel()
	s := serveTrustedLRS(t)
	conn := s.ca.dial(t, s.addr, s.cert(t, "b", "ledger"))
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		report(t, conn, id, endpointStats("bench/svc-0000", "10.0.0.0", 10, 0, 10))
	}
	if got := reportersOf(s.loads, "bench/svc-0000", "10.0.0.0"); got != 1 {
		t.Errorf("reporters of one certificate's three node IDs = %d, want 1", got)
	}
	if got := s.loads.Usage().Reporters; got != 1 {
		t.Errorf("store reporters = %d, want 1", got)
	}
	r, _ := s.loads.Reports("bench/svc-0000", time.Now())
	i := slices.IndexFunc(r.Endpoints, func(e loadreport.Endpoint) bool { return e.Address == "10.0.0.0" })
	if len(r.Reporters) != 1 || i < 0 || r.Reporters[0].Loads[i].Issued != 30 {
		t.Errorf("reports = %+v, want one reporter with the three streams' 30 requests", r.Reporters)
	}
}

// Two client certificates, even of one service account, are two reporters.
func TestLoadReportsCountEachCertificate(t *testing.T) {
	t.Parallel()
	s := serveTrustedLRS(t)
	for i, id := range []string{"node-1", "node-2"} {
		conn := s.ca.dial(t, s.addr, s.cert(t, "b", "ledger"))
		report(t, conn, id, endpointStats("bench/svc-0000", "10.0.0.0", 10, 0, 10))
		if got := reportersOf(s.loads, "bench/svc-0000", "10.0.0.0"); got != i+1 {
			t.Errorf("reporters after %d certificates = %d, want %d", i+1, got, i+1)
		}
	}
}

// A report on a cluster the client's audience may not read is dropped and
// counted as an unknown cluster's; the same report from the audience that
// may read it is kept.
func TestLoadReportsOnlyOnReadableClusters(t *testing.T) {
	t.Parallel()
	s := serveTrustedLRS(t)
	asB := s.ca.dial(t, s.addr, s.cert(t, "b", "ledger"))
	report(t, asB, "b-1", endpointStats("bench/svc-0001", "10.0.1.0", 10, 0, 10), endpointStats("bench/svc-0000", "10.0.0.0", 1, 1, 0))
	if got := reportersOf(s.loads, "bench/svc-0001", "10.0.1.0"); got != 0 {
		t.Errorf("b's report on a's cluster kept: %d reporters", got)
	}
	if got := reportersOf(s.loads, "bench/svc-0000", "10.0.0.0"); got != 1 {
		t.Errorf("b's report on the shared cluster: %d reporters, want 1", got)
	}
	if d := s.loads.Drops(); d.UnknownCluster != 1 {
		t.Errorf("drops = %+v, want b's report on a's cluster as an unknown cluster's", d)
	}

	asA := s.ca.dial(t, s.addr, s.cert(t, "a", "pay"))
	report(t, asA, "a-1", endpointStats("bench/svc-0001", "10.0.1.0", 10, 0, 10))
	if got := reportersOf(s.loads, "bench/svc-0001", "10.0.1.0"); got != 1 {
		t.Errorf("a's report on its own cluster: %d reporters, want 1", got)
	}
	if d := s.loads.Drops(); d.UnknownCluster != 1 {
		t.Errorf("drops = %+v, want a's report kept", d)
	}
}

// lrsExchange opens an LRS stream over conn as node id, sends each request
// in turn and returns every answer the server sent, marshalled
// deterministically. The last request must be answered: its answer is the
// last one returned, so an answer the server sent to an earlier request
// would come first, and none is waited for by the clock.
func lrsExchange(t *testing.T, conn *grpc.ClientConn, id string, reqs ...[]string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	recv := func() {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	for i, names := range reqs {
		req := &lrs.LoadStatsRequest{}
		if i == 0 {
			req.Node = envoyNode(id)
		}
		for _, n := range names {
			req.ClusterStats = append(req.ClusterStats, &endpointv3.ClusterStats{ClusterName: n})
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			recv() // the first request is always answered
		}
	}
	if len(reqs) > 1 {
		recv()
	}
	return got
}

// decodeLRS is the answer of an lrsExchange.
func decodeLRS(t *testing.T, b []byte) *lrs.LoadStatsResponse {
	t.Helper()
	resp := &lrs.LoadStatsResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestLRSAnswerHidesUnreadableClusters: the LRS answer is no oracle for
// which hidden names exist. A client of namespace b, authenticated by its
// certificate, that names bench/svc-0001 (exported to namespace a only,
// and reported every 2 s, the shortest interval of all) is answered byte
// for byte as when it names bench/svc-9999, which does not exist: in the
// cluster list, in the interval (the shortest of the clusters b may read,
// 7 s, not the hidden cluster's 2 s), and in not being answered again when
// a later request names it. A client of namespace a is answered with it.
func TestLRSAnswerHidesUnreadableClusters(t *testing.T) {
	t.Parallel()
	s := serveTrustedLRSOf(t, loadreport.Config{}, topologytest.ReportingBatch(2, 7*time.Second, 2*time.Second))
	asB := s.ca.dial(t, s.addr, s.cert(t, "b", "ledger"))
	const hidden, absent, shared = "bench/svc-0001", "bench/svc-9999", "bench/svc-0000"
	for _, tc := range []struct {
		name string
		reqs func(n string) [][]string
		// want: each answer's clusters and interval, the same for both names
		want []*lrs.LoadStatsResponse
	}{
		{"first request names it", func(n string) [][]string { return [][]string{{n}} },
			[]*lrs.LoadStatsResponse{{LoadReportingInterval: durationpb.New(7 * time.Second)}}},
		{"first request names it and a shared cluster", func(n string) [][]string { return [][]string{{n, shared}} },
			[]*lrs.LoadStatsResponse{{Clusters: []string{shared}, LoadReportingInterval: durationpb.New(7 * time.Second)}}},
		{"node alone, then it, then a shared cluster", func(n string) [][]string { return [][]string{nil, {n}, {shared}} },
			[]*lrs.LoadStatsResponse{{LoadReportingInterval: durationpb.New(7 * time.Second)},
				{Clusters: []string{shared}, LoadReportingInterval: durationpb.New(7 * time.Second)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotHidden := lrsExchange(t, asB, "b-1", tc.reqs(hidden)...)
			gotAbsent := lrsExchange(t, asB, "b-2", tc.reqs(absent)...)
			if len(gotHidden) != len(gotAbsent) {
				t.Fatalf("%d answers naming %s, %d naming %s", len(gotHidden), hidden, len(gotAbsent), absent)
			}
			for i := range gotHidden {
				if !bytes.Equal(gotHidden[i], gotAbsent[i]) {
					t.Errorf("answer %d naming the hidden %s = %v, naming the absent %s = %v: they differ",
						i, hidden, decodeLRS(t, gotHidden[i]), absent, decodeLRS(t, gotAbsent[i]))
				}
			}
			for i, want := range tc.want {
				want.ReportEndpointGranularity = true
				if got := decodeLRS(t, gotHidden[i]); !proto.Equal(got, want) {
					t.Errorf("answer %d = %v, want %v", i, got, want)
				}
			}
		})
	}

	asA := s.ca.dial(t, s.addr, s.cert(t, "a", "pay"))
	want := &lrs.LoadStatsResponse{Clusters: []string{hidden}, LoadReportingInterval: durationpb.New(2 * time.Second), ReportEndpointGranularity: true}
	if got := decodeLRS(t, lrsExchange(t, asA, "a-1", []string{hidden})[0]); !proto.Equal(got, want) {
		t.Errorf("a's answer = %v, want %v", got, want)
	}
	want = &lrs.LoadStatsResponse{LoadReportingInterval: durationpb.New(2 * time.Second), ReportEndpointGranularity: true}
	if got := decodeLRS(t, lrsExchange(t, asA, "a-2", nil)[0]); !proto.Equal(got, want) {
		t.Errorf("a's answer to its node alone = %v, want %v (the shortest interval it may read)", got, want)
	}
}

// ejectedBy is the endpoints fleet outlier detection ejects of
// bench/svc-0000 from what the store holds, with minReporters 2.
func ejectedBy(t *testing.T, s *loadreport.Store) []string {
	t.Helper()
	r, ok := s.Reports("bench/svc-0000", time.Now())
	if !ok {
		t.Fatal("bench/svc-0000 not in the catalog")
	}
	return ejectedFrom(r, s.Window())
}

// ejectedFrom is the endpoints fleet outlier detection ejects of
// bench/svc-0000 from reports r over a window, with minReporters 2.
func ejectedFrom(r loadreport.ClusterReports, window time.Duration) []string {
	eps := make([]outlier.Endpoint, len(r.Endpoints))
	for i, e := range r.Endpoints {
		eps[i] = outlier.Endpoint{Address: e.Address, Port: e.Port, Weight: 1}
	}
	cfg := topology.OutlierDetection{ErrorPercent: 20, MinRequestVolume: 100, MinReporters: 2,
		BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 10}
	var out []string
	for _, v := range outlier.NewDecider(window).Decide(topology.Key{Namespace: "bench", Name: "svc-0000"}, cfg,
		outlier.Summarize(r, cfg.ErrorPercent), eps, time.Now()) {
		if v.Ejected {
			out = append(out, v.Address)
		}
	}
	return out
}

// Three node IDs over one certificate reporting errors on one endpoint are
// one failing reporter: under minReporters 2 nothing is ejected. Two
// certificates reporting the same are two, and the endpoint is ejected.
func TestOneCertificateCannotEjectAlone(t *testing.T) {
	t.Parallel()
	s := serveTrustedLRS(t)
	conn := s.ca.dial(t, s.addr, s.cert(t, "b", "ledger"))
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		report(t, conn, id, failingOne())
	}
	if got := ejectedBy(t, s.loads); len(got) != 0 {
		t.Errorf("one certificate's three node IDs ejected %v, want nothing", got)
	}

	s = serveTrustedLRS(t)
	for _, id := range []string{"node-1", "node-2"} {
		report(t, s.ca.dial(t, s.addr, s.cert(t, "b", "ledger")), id, failingOne())
	}
	if got := ejectedBy(t, s.loads); !slices.Equal(got, []string{"10.0.0.0"}) {
		t.Errorf("two certificates ejected %v, want 10.0.0.0", got)
	}
}

// failingOne is a report of bench/svc-0000 where 10.0.0.0 fails and two
// other endpoints do not, so the reporter is trusted (it is not the one
// failing).
func failingOne() *endpointv3.ClusterStats {
	cs := endpointStats("bench/svc-0000", "10.0.0.0", 100, 0, 100)
	for _, addr := range []string{"10.0.0.1", "10.0.0.2"} {
		cs.UpstreamLocalityStats[0].UpstreamEndpointStats = append(cs.UpstreamLocalityStats[0].UpstreamEndpointStats,
			endpointStats("bench/svc-0000", addr, 100, 100, 0).UpstreamLocalityStats[0].UpstreamEndpointStats...)
	}
	return cs
}
