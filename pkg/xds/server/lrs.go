package server

import (
	"slices"
	"time"

	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/signals/loadreport"
)

// The load_reporting_interval LRS asks for (docs/design/signals.md, "Load reports (LRS)").
const (
	DefaultLoadReportInterval = 10 * time.Second
	MinLoadReportInterval     = time.Second
	MaxLoadReportInterval     = time.Minute
)

// LoadReports are where the load reports of clients go (a
// loadreport.Store): a stream opened per client, and the catalog of the
// clusters whose load is kept.
type LoadReports interface {
	Open(id loadreport.Reporter, now time.Time) *loadreport.Stream
	Catalog() *loadreport.Catalog
}

// maxLoadStatsBytes bounds one LoadStatsRequest, before it is decoded:
// gRPC's own default, said here so it holds whatever gRPC's becomes.
const maxLoadStatsBytes = 4 << 20

func loadReportInterval(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultLoadReportInterval
	}
	return min(max(d, MinLoadReportInterval), MaxLoadReportInterval)
}

// registerLoadStats adds LRS to g, with this server's handler.
func (x *xdsServer) registerLoadStats(g *grpc.Server) {
	desc := lrs.LoadReportingService_ServiceDesc
	desc.HandlerType = (*any)(nil)
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		desc.Streams[i].Handler = func(_ any, ss grpc.ServerStream) error { return x.loadStats(ss) }
	}
	g.RegisterService(&desc, x)
}

// loadStats serves one LRS stream. The first request names the node and
// the clusters it reports on; the answer names those of them Poise
// publishes (the catalog's) and the client may read, asks for endpoint
// granularity and sets the interval. Every request's stats go to the store,
// which keeps what is published and counts the rest. A later request naming
// a published cluster the answer did not is answered again with it added,
// so a client that gains a cluster starts reporting it. The interval asked
// for is the shortest spec.loadReporting.interval of the clusters answered
// (Catalog.Interval), taken when the answer is sent: an interval changed
// later reaches a stream when it is answered again or reconnects. A first
// request that names no published cluster the client may read is asked for
// the shortest interval of any it may read (Catalog.Shortest): grpc-go's
// first request carries its node alone, and grpc-go keeps the first
// answer's interval for the life of the stream. A cluster the client may
// not read is answered as one that does not exist, in the list and in the
// interval, so the answer tells no one which hidden names exist.
func (x *xdsServer) loadStats(ss grpc.ServerStream) error {
	sctx, end, done, err := x.admit(ss.Context())
	if err != nil {
		return err
	}
	defer done()
	id, _ := IdentityFrom(ss.Context())
	var aud Audience
	if !id.Anonymous() {
		if aud, err = x.audienceOf(ss.Context()); err != nil {
			return err
		}
	}
	go func() { end(recvEnded{x.recvLoadStats(ss, id, aud)}) }()
	<-sctx.Done()
	return whyEnded(sctx)
}

// recvLoadStats reads the stream's requests. An authenticated client
// reports as its workload instance, whatever node IDs it names, so several
// streams or node IDs of one instance count once; and only on the clusters
// its audience may read. An anonymous client reports as its node. Every
// client, anonymous too, is answered only with clusters its audience may
// read: the rule of every other response. The reporter's region and zone
// are where its identity places it, else its node's claim (placement.go).
func (x *xdsServer) recvLoadStats(ss grpc.ServerStream, id identity.Identity, aud Audience) error {
	var st *loadreport.Stream
	defer func() {
		if st != nil {
			st.Close(time.Now())
		}
	}()
	var readable func(cluster string) bool // nil: every cluster (no cache to ask)
	var asked []string                     // the clusters answered, sorted
	for sent := false; ; sent = true {
		req := &lrs.LoadStatsRequest{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		now := time.Now()
		if st == nil {
			node := req.GetNode()
			who := loadreport.Reporter{ID: node.GetId()}
			who.Region, who.Zone = placed(id).locality(node)
			if !id.Anonymous() {
				who.ID = id.Instance
			}
			st = x.loads.Open(who, now)
			if x.cache != nil {
				readable = func(cluster string) bool { return x.cache.Readable(aud, node, resource.ClusterType, cluster) }
			}
			if !id.Anonymous() {
				st.Only(readable)
			}
		}
		st.Report(req, now)
		cat := x.loads.Catalog()
		var grew bool
		asked, grew = cat.Published(asked, req, readable)
		if sent && !grew {
			continue
		}
		// the interval of the clusters' upstreams (the shortest, when they
		// differ); the server's own when none sets one
		interval := x.loadInterval
		d := cat.Interval(asked)
		if len(asked) == 0 {
			// a first request naming no published cluster it may read
			// (grpc-go sends its node alone and reads only this answer):
			// the shortest interval of any cluster it may read, so none is
			// reported less often than it asks
			d = cat.Shortest(readable)
		}
		if d > 0 {
			interval = loadReportInterval(d)
		}
		if err := ss.SendMsg(&lrs.LoadStatsResponse{Clusters: asked, LoadReportingInterval: durationpb.New(interval),
			ReportEndpointGranularity: true}); err != nil {
			return err
		}
	}
}
