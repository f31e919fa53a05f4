package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdscache"
)

// lrsHarness serves LRS into a store that publishes two synthetic
// upstreams, bench/svc-0000 and bench/svc-0001 (20 endpoints each).
func lrsHarness(t *testing.T, cfg server.Config) (*harness, *loadreport.Store) {
	snap, err := topology.NewDirectory().Apply(topologytest.Batch(2))
	if err != nil {
		t.Fatal(err)
	}
	store := loadreport.NewStore(loadreport.Config{})
	store.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	cfg.LoadReports = store
	return newHarnessWith(t, cfg, nil), store
}

// publishClusters publishes, in both renderings, a cluster of each name
// that every client may read: an LRS answer names only clusters the client
// may read.
func (h *harness) publishClusters(names ...string) {
	h.t.Helper()
	var es []*xdscache.Entry
	for _, n := range names {
		es = append(es, entry(h.t, "v1", cluster(n, 1)))
	}
	h.apply("v1", both(CDS, es...))
}

func endpointStats(cluster, addr string, issued, ok, errs uint64) *endpointv3.ClusterStats {
	return &endpointv3.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
		UpstreamEndpointStats: []*endpointv3.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
			TotalIssuedRequests: issued, TotalSuccessfulRequests: ok, TotalErrorRequests: errs,
		}},
	}}}
}

// A client's LRS stream: the answer names the published clusters it
// reports on, with endpoint granularity and the interval; its reports
// reach the store attributed to its node; naming another published
// cluster later is answered again; what is not published is dropped.
func TestLoadStatsStream(t *testing.T) {
	t.Parallel()
	h, store := lrsHarness(t, server.Config{LoadReportInterval: 2 * time.Hour})
	h.publishClusters("bench/svc-0000", "bench/svc-0001")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := lrs.NewLoadReportingServiceClient(h.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "envoy-1", UserAgentName: "envoy", Locality: &core.Locality{Region: "eu-west", Zone: "a"}}
	if err := stream.Send(&lrs.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{
		{ClusterName: "bench/unknown"}, {ClusterName: "bench/svc-0000"}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.GetClusters(), []string{"bench/svc-0000"}) || resp.GetSendAllClusters() ||
		!resp.GetReportEndpointGranularity() || resp.GetLoadReportingInterval().AsDuration() != server.MaxLoadReportInterval {
		t.Fatalf("first answer = %v", resp)
	}

	if err := stream.Send(&lrs.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{
		endpointStats("bench/svc-0000", "10.0.0.0", 10, 7, 3), endpointStats("bench/svc-0001", "10.0.1.0", 4, 4, 0),
		endpointStats("bench/unknown", "10.0.0.0", 1, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.GetClusters(), []string{"bench/svc-0000", "bench/svc-0001"}) {
		t.Fatalf("second answer = %v", resp)
	}
	eventually(t, "the report stored", func() bool {
		for _, e := range store.Cluster("bench/svc-0000", time.Now()) {
			if e.Address == "10.0.0.0" {
				return e.Issued == 10 && e.Errors == 3 && e.Reporters == 1 && len(e.Classes) == 1 && e.Classes[0].Class == "eu-west/a"
			}
		}
		return false
	})
	if d := store.Drops(); d.UnknownCluster != 2 { // named in both requests
		t.Errorf("drops = %+v, want the unknown cluster's", d)
	}
	cancel()
	eventually(t, "the stream released", func() bool { return store.Usage().Reporters == 1 })
}

// LRS streams count against the server's stream limit like ADS streams.
func TestLoadStatsStreamLimit(t *testing.T) {
	t.Parallel()
	h, _ := lrsHarness(t, server.Config{MaxStreams: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := lrs.NewLoadReportingServiceClient(h.conn)
	first, err := client.StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	second, err := client.StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = second.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "b"}})
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
}

// intervalStream is an LRS stream to a server whose store publishes
// bench/svc-0000 (reported every 3 s) and bench/svc-0001 (every 7 s).
func intervalStream(t *testing.T) lrs.LoadReportingService_StreamLoadStatsClient {
	t.Helper()
	snap, err := topology.NewDirectory().Apply(topologytest.ReportingBatch(2, 3*time.Second, 7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	store := loadreport.NewStore(loadreport.Config{})
	store.SetCatalog(loadreport.NewCatalog(nil, snap, nil))
	h := newHarnessWith(t, server.Config{LoadReports: store}, nil)
	h.publishClusters("bench/svc-0000", "bench/svc-0001")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := lrs.NewLoadReportingServiceClient(h.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// A first request with the node alone, as grpc-go sends it (and grpc-go
// keeps the first answer's interval), is asked for the shortest interval of
// any published cluster.
func TestLoadStatsFirstRequestWithoutClusters(t *testing.T) {
	t.Parallel()
	stream := intervalStream(t)
	if err := stream.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "grpc-1"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetLoadReportingInterval().AsDuration(); got != 3*time.Second || len(resp.GetClusters()) != 0 {
		t.Fatalf("answer %v, want interval 3s and no clusters", resp)
	}
}

// The interval answered is the upstream's spec.loadReporting.interval, the
// shortest of the clusters answered when they differ.
func TestLoadStatsIntervalOfTheUpstreams(t *testing.T) {
	t.Parallel()
	stream := intervalStream(t)
	for _, step := range []struct {
		cluster string
		want    time.Duration
	}{{"bench/svc-0001", 7 * time.Second}, {"bench/svc-0000", 3 * time.Second}} {
		if err := stream.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "grpc-1"},
			ClusterStats: []*endpointv3.ClusterStats{{ClusterName: step.cluster}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetLoadReportingInterval().AsDuration(); got != step.want {
			t.Fatalf("after %s: interval %v, want %v (answer %v)", step.cluster, got, step.want, resp)
		}
	}
}

// An anonymous client is answered, as in every other response, only with
// clusters exported to every namespace: one exported to namespace a only is
// answered as a name that does not exist.
func TestLoadStatsAnonymousAnswerHidesUnreadableClusters(t *testing.T) {
	t.Parallel()
	h, _ := lrsHarness(t, server.Config{})
	shared := entry(t, "v1", cluster("bench/svc-0000", 1))
	own := entry(t, "v1", cluster("bench/svc-0001", 1)).WithVisibility(xdscache.VisibleToNamespaces("a"))
	h.apply("v1", both(CDS, shared, own))
	answer := func(names ...string) *lrs.LoadStatsResponse {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := lrs.NewLoadReportingServiceClient(h.conn).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &lrs.LoadStatsRequest{Node: envoyNode("anonymous-1")}
		for _, n := range names {
			req.ClusterStats = append(req.ClusterStats, &endpointv3.ClusterStats{ClusterName: n})
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	hidden, absent := answer("bench/svc-0001", "bench/svc-0000"), answer("bench/svc-9999", "bench/svc-0000")
	if !proto.Equal(hidden, absent) || !slices.Equal(hidden.GetClusters(), []string{"bench/svc-0000"}) {
		t.Errorf("answer naming a's cluster = %v, naming none that exists = %v: want both to name bench/svc-0000 alone", hidden, absent)
	}
}
