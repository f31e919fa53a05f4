package kube_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// rpcs is how many RPCs a split check sends.
const rpcs = 10_000

// ---- control planes ----

// plane is one in-process control plane (controlplane.Run) on the
// Kubernetes source, with its logs captured.
type plane struct {
	name     string
	addrs    controlplane.Addrs
	adminURL string
	logs     *logSink
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
	err      error
}

// startPlane runs a control plane on namespace ns and waits until it is
// ready (caches synced, first snapshot published). It is not
// cmd/controlplane's startPlane, which runs the files mode on the examples
// for the commands: this one is a Kubernetes-source replica among others,
// with leader election, captured logs and a stop a test can call.
func startPlane(t *testing.T, ns, name string) *plane {
	t.Helper()
	return startPlaneWith(t, ns, name, nil)
}

// startPlaneWith is startPlane with the configuration adjusted by tune. The
// plane's goroutines carry the pprof label plane=name, so a CPU profile
// tells its work from the test's.
func startPlaneWith(t *testing.T, ns, name string, tune func(*controlplane.Config)) *plane {
	t.Helper()
	p := &plane{name: name, logs: &logSink{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	started := make(chan controlplane.Addrs, 1)
	cfg := controlplane.Config{
		Source:                  "kubernetes",
		RestConfig:              restConfig,
		Namespace:               ns,
		LeaderElectionNamespace: ns,
		LeaderElectionID:        "poise-status-writer",
		LeaseDuration:           3 * time.Second,
		RenewDeadline:           2 * time.Second,
		RetryPeriod:             250 * time.Millisecond,
		XDSAddress:              "127.0.0.1:0",
		AdminAddress:            "127.0.0.1:0",
		Debounce:                20 * time.Millisecond,
		Log:                     slog.New(slog.NewTextHandler(p.logs, nil)).With("plane", name),
		Started:                 func(a controlplane.Addrs) { started <- a },
	}
	if tune != nil {
		tune(&cfg)
	}
	go pprof.Do(ctx, pprof.Labels("plane", name), func(ctx context.Context) { p.done <- controlplane.Run(ctx, cfg) })
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("plane %s logs (last 60 lines):\n%s", p.name, p.logs.tail(60))
		}
	})
	select {
	case p.addrs = <-started:
	case err := <-p.done:
		p.done <- err
		t.Fatalf("plane %s exited before it listened: %v\n%s", name, err, p.logs.tail(60))
	case <-time.After(60 * time.Second):
		t.Fatalf("plane %s did not listen within 60s\n%s", name, p.logs.tail(60))
	}
	p.adminURL = "http://" + p.addrs.Admin
	testkit.Eventually(t, 30*time.Second, "plane "+name+" ready", func() (bool, string) {
		resp, err := http.Get(p.adminURL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(b)
	})
	return p
}

// stop cancels the plane and waits for Run to return; an error from Run
// fails the test.
func (p *plane) stop(t *testing.T) {
	t.Helper()
	p.stopOnce.Do(func() {
		p.cancel()
		select {
		case p.err = <-p.done:
			if p.err != nil {
				t.Errorf("plane %s: Run returned %v", p.name, p.err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("plane %s: Run did not return within 20s of cancellation", p.name)
		}
	})
}

// leads reports whether the plane's status writer has started.
func (p *plane) leads() bool { return p.logs.contains("status writer started") }

// logSink collects a plane's structured logs.
type logSink struct{ testkit.Logs }

func (l *logSink) contains(s string) bool { return strings.Contains(l.String(), s) }

func (l *logSink) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// holds checks, every interval for d, that what a test asserts stays so:
// check returns what went wrong, or "" while all is well; the first wrong
// fails the test. A period of nothing happening is seen throughout, not
// slept through and looked at once.
func holds(t *testing.T, d, every time.Duration, what string, check func() string) {
	t.Helper()
	end := time.Now().Add(d)
	testkit.EventuallyEvery(t, d+time.Minute, every, what, func() (bool, string) {
		if why := check(); why != "" {
			t.Fatalf("%s: %s", what, why)
		}
		return !time.Now().Before(end), ""
	})
}

// ---- admin endpoints ----

// explainOf is GET /debug/explain?upstream=ns/name.
func (p *plane) explainOf(ns, name string) (explain.Report, error) {
	var rep explain.Report
	err := testkit.GetJSON(p.adminURL+"/debug/explain?upstream="+ns+"/"+name, &rep)
	if err == nil && len(rep.Upstreams) != 1 {
		err = fmt.Errorf("explain %s/%s: %d upstreams in the report", ns, name, len(rep.Upstreams))
	}
	return rep, err
}

// waitExplain polls explain until cond holds and returns that report.
func (p *plane) waitExplain(t *testing.T, ns, name, what string, cond func(explain.Upstream) (bool, string)) (explain.Report, time.Duration) {
	t.Helper()
	var rep explain.Report
	took := testkit.Eventually(t, 15*time.Second, what, func() (bool, string) {
		var err error
		if rep, err = p.explainOf(ns, name); err != nil {
			return false, err.Error()
		}
		return cond(rep.Upstreams[0])
	})
	return rep, took
}

// clients is GET /debug/clients: every stream connected to the plane.
func (p *plane) clients() ([]server.Client, error) {
	var v struct {
		Clients []server.Client `json:"clients"`
	}
	err := testkit.GetJSON(p.adminURL+"/debug/clients", &v)
	return v.Clients, err
}

// ackedEDS is the revision of the EDS version the node last ACKed.
func (p *plane) ackedEDS(node string) (uint64, string, error) {
	clients, err := p.clients()
	if err != nil {
		return 0, "", err
	}
	for _, c := range clients {
		if c.NodeID != node {
			continue
		}
		for typ, st := range c.Types {
			if st.NACKs > 0 {
				return 0, "", fmt.Errorf("node %s NACKed %s", node, typ)
			}
		}
		var ver string
		if ts := c.Types["EDS"]; ts != nil {
			ver = ts.LastAckedVersion
		}
		i := strings.LastIndex(ver, "-")
		rev, err := strconv.ParseUint(ver[i+1:], 10, 64)
		if err != nil {
			return 0, ver, nil
		}
		return rev, ver, nil
	}
	return 0, "", nil
}

// waitAcked waits until the node ACKed an EDS version of at least revision.
func (p *plane) waitAcked(t *testing.T, node string, revision uint64) time.Duration {
	t.Helper()
	return testkit.Eventually(t, 15*time.Second, fmt.Sprintf("node %s ACKs EDS revision %d from plane %s", node, revision, p.name), func() (bool, string) {
		rev, ver, err := p.ackedEDS(node)
		if err != nil {
			return false, err.Error()
		}
		return rev >= revision, fmt.Sprintf("acked %q", ver)
	})
}

// ---- backends and the xDS client ----

// backend is a real gRPC server that names itself in a response header.
// measure warms the client up to the splitcheck.Expectation and checks the split of rpcs RPCs.
func measure(t *testing.T, phase string, conn *grpc.ClientConn, want splitcheck.Expectation) {
	t.Helper()
	splitcheck.Warm(t, conn, want)
	start := time.Now()
	got := splitcheck.Send(conn, rpcs)
	splitcheck.CheckSplit(t, phase, got, want)
	t.Logf("%s: %d RPCs took %v", phase, rpcs, time.Since(start).Round(time.Millisecond))
}

// endpointOf finds an endpoint in an explained upstream.
func endpointOf(u explain.Upstream, b *splitcheck.Backend) (explain.Endpoint, bool) {
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, ep := range l.Endpoints {
				if net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port)) == b.Addr {
					return ep, true
				}
			}
		}
	}
	return explain.Endpoint{}, false
}

// fetchADS sends one request for a type over a raw ADS stream as node and returns the
// resources of the first response.
func fetchADS(t *testing.T, xdsAddr string, node *core.Node, typeURL string, names ...string) []*anypb.Any {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("%s %v: %v", typeURL, names, err)
	}
	return resp.GetResources()
}

// edsStream is one node's ADS stream subscribed to the ClusterLoadAssignments
// of some clusters, kept open and ACKing every response (with its version and
// nonce) so that the server goes on sending changes. A client-locality
// class's variant is rendered only after the class's first client connects,
// so a zoned client may first be sent the base and its variant later on the
// same stream, which a one-response fetch (fetchADS) cannot see.
type edsStream struct {
	node *core.Node

	mu        sync.Mutex
	clas      map[string]*endpointv3.ClusterLoadAssignment // the last received of each cluster
	version   string                                       // of the last response
	responses int
	err       error // why the stream ended, once it has
}

// watchEDS opens an edsStream as node over a plaintext connection; it is
// closed when the test ends.
func watchEDS(t *testing.T, xdsAddr string, node *core.Node, clusters ...string) *edsStream {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return watchEDSOn(t, conn, node, clusters...)
}

// watchEDSOn opens an edsStream as node over conn (which may carry call
// credentials); the stream is closed when the test ends.
func watchEDSOn(t *testing.T, conn *grpc.ClientConn, node *core.Node, clusters ...string) *edsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatalf("node %s: %v", node.GetId(), err)
	}
	w := &edsStream{node: node, clas: map[string]*endpointv3.ClusterLoadAssignment{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := w.run(stream, clusters)
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

func (w *edsStream) run(stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, clusters []string) error {
	req := &discoverygrpc.DiscoveryRequest{Node: w.node, TypeUrl: resource.EndpointType, ResourceNames: clusters}
	for {
		if err := stream.Send(req); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		got := make(map[string]*endpointv3.ClusterLoadAssignment, len(resp.GetResources()))
		for _, a := range resp.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := a.UnmarshalTo(cla); err != nil {
				return fmt.Errorf("response %s: %w", resp.GetVersionInfo(), err)
			}
			got[cla.GetClusterName()] = cla
		}
		w.mu.Lock()
		maps.Copy(w.clas, got)
		w.version = resp.GetVersionInfo()
		w.responses++
		w.mu.Unlock()
		req = &discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusters,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
	}
}

// last is the cluster's ClusterLoadAssignment as last received (nil before
// any); it is never modified afterwards.
func (w *edsStream) last(cluster string) *endpointv3.ClusterLoadAssignment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clas[cluster]
}

// received is how many responses the stream has had.
func (w *edsStream) received() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.responses
}

// waitFor waits until the cluster's last received ClusterLoadAssignment
// satisfies cond and returns it; past timeout, or when the stream ends, the
// test fails with what was received.
func (w *edsStream) waitFor(t *testing.T, timeout time.Duration, what, cluster string, cond func(*endpointv3.ClusterLoadAssignment) (bool, string)) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	var cla *endpointv3.ClusterLoadAssignment
	testkit.Eventually(t, timeout, "node "+w.node.GetId()+": "+what, func() (bool, string) {
		w.mu.Lock()
		cla = w.clas[cluster]
		n, version, err := w.responses, w.version, w.err
		w.mu.Unlock()
		if err != nil {
			t.Fatalf("node %s: %s: the stream ended after %d responses: %v", w.node.GetId(), what, n, err)
		}
		if cla == nil {
			return false, fmt.Sprintf("no ClusterLoadAssignment %s in %d responses", cluster, n)
		}
		ok, detail := cond(cla)
		return ok, fmt.Sprintf("%s; received %s (the last of %d responses, version %s)", detail, describeCLA(cla), n, version)
	})
	return cla
}

// localityKey is "region/zone", with "/subZone" when it has one.
func localityKey(region, zone, subZone string) string {
	if subZone != "" {
		return region + "/" + zone + "/" + subZone
	}
	return region + "/" + zone
}

// priorityZero is the localities of a ClusterLoadAssignment's priority 0
// with their weights: under the Envoy (weighted) rendering, each locality
// with traffic, weighted by its traffic in millionths.
func priorityZero(cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	out := map[string]uint32{}
	for _, lle := range cla.GetEndpoints() {
		if lle.GetPriority() == 0 {
			l := lle.GetLocality()
			out[localityKey(l.GetRegion(), l.GetZone(), l.GetSubZone())] += lle.GetLoadBalancingWeight().GetValue()
		}
	}
	return out
}

// describeCLA is a ClusterLoadAssignment in one line: each locality with its
// priority, weight and endpoints.
func describeCLA(cla *endpointv3.ClusterLoadAssignment) string {
	var b strings.Builder
	for i, lle := range cla.GetEndpoints() {
		if i > 0 {
			b.WriteString("; ")
		}
		l := lle.GetLocality()
		fmt.Fprintf(&b, "p%d %s=%d [", lle.GetPriority(), localityKey(l.GetRegion(), l.GetZone(), l.GetSubZone()), lle.GetLoadBalancingWeight().GetValue())
		for j, ep := range lle.GetLbEndpoints() {
			if j > 0 {
				b.WriteString(" ")
			}
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			b.WriteString(net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
		}
		b.WriteString("]")
	}
	if b.Len() == 0 {
		return "no endpoints"
	}
	return b.String()
}
