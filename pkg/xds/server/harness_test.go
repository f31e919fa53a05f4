package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
	"poise.dev/poise/test/testkit"
)

// Shorter names for the four type URLs.
const (
	CDS = resource.ClusterType
	EDS = resource.EndpointType
	LDS = resource.ListenerType
	RDS = resource.RouteType
)

const (
	recvTimeout = 5 * time.Second
	// quiet is how long a stream must stay silent to count as "nothing sent".
	quiet = 300 * time.Millisecond
)

// harness is a real xDS gRPC server on 127.0.0.1:0 over an xdscache.Cache.
type harness struct {
	t       *testing.T
	cache   *xdscache.Cache
	clients *server.Clients
	metrics *metrics.XDS
	conn    *grpc.ClientConn
	addr    string
}

func newHarness(t *testing.T) *harness { return newHarnessWith(t, server.Config{}, nil) }

// newHarnessWith serves with cfg, the registry logging to log (nil: nowhere).
func newHarnessWith(t *testing.T, cfg server.Config, log *slog.Logger) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{
		t:       t,
		cache:   xdscache.New(2, func(n *core.Node) int { return int(translate.RenderingFor(n)) }),
		metrics: metrics.New(metrics.Options{Types: servedTypes()}).XDS,
	}
	h.clients = server.NewClients(h.metrics, log)
	g, err := server.New(h.cache, h.clients, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, g, lis) }()
	h.addr = lis.Addr().String()
	h.conn, err = grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.conn.Close()
		cancel()
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("server did not stop")
		}
	})
	return h
}

func (h *harness) apply(version string, changes ...[]xdscache.Change) {
	h.t.Helper()
	u := xdscache.Update{Version: version}
	for _, c := range changes {
		u.Changes = append(u.Changes, c...)
	}
	h.cache.Apply(u)
}

func (h *harness) counter(v interface{ Write(*dto.Metric) error }) float64 {
	h.t.Helper()
	var m dto.Metric
	if err := v.Write(&m); err != nil {
		h.t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func (h *harness) nacks(short string) float64 {
	return h.counter(h.metrics.NACKs.WithLabelValues(short))
}

func (h *harness) connected(kind string) float64 {
	return h.counter(h.metrics.ConnectedClients.WithLabelValues(kind))
}

// eventually waits, as long as a response may take, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, recvTimeout, what, func() (bool, string) { return cond(), "" })
}

// client returns the registry entry of the one client with node id.
func (h *harness) client(nodeID string) server.Client {
	h.t.Helper()
	for _, c := range h.clients.List() {
		if c.NodeID == nodeID {
			return c
		}
	}
	h.t.Fatalf("no client %q in %+v", nodeID, h.clients.List())
	return server.Client{}
}

// Nodes as Envoy and as proxyless gRPC announce themselves.

func envoyNode(id string) *core.Node {
	return &core.Node{Id: id, Cluster: "test", UserAgentName: "envoy",
		ClientFeatures: []string{"envoy.lrs.supports_send_all_clusters"}}
}

func grpcNode(id string) *core.Node {
	return &core.Node{Id: id, Cluster: "test", UserAgentName: "gRPC Go",
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}}
}

// Resources.

func cluster(name string, timeoutSec int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &core.ConfigSource{
			ResourceApiVersion:    core.ApiVersion_V3,
			ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		}},
		ConnectTimeout: durationpb.New(time.Duration(timeoutSec) * time.Second),
	}
}

func cla(name string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: &core.Locality{Zone: "z1"},
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
			}},
		}},
	}
}

func listener(name string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, Address: &core.Address{Address: &core.Address_SocketAddress{
		SocketAddress: &core.SocketAddress{Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 10000}},
	}}}
}

func routeConfig(name, clusterName string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: name, Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName}}},
		}},
	}}}
}

func entry(t *testing.T, version string, m proto.Message) *xdscache.Entry {
	t.Helper()
	var name string
	switch r := m.(type) {
	case *endpointv3.ClusterLoadAssignment:
		name = r.GetClusterName()
	case interface{ GetName() string }:
		name = r.GetName()
	}
	e, err := xdscache.NewEntry(name, version, m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// put publishes entries of one type in one view.
func put(view int, typeURL string, es ...*xdscache.Entry) []xdscache.Change {
	var out []xdscache.Change
	for _, e := range es {
		out = append(out, xdscache.Change{View: view, TypeURL: typeURL, Name: e.Name, Entry: e})
	}
	return out
}

// both publishes the same entries (one marshalled Any) in both views.
func both(typeURL string, es ...*xdscache.Entry) []xdscache.Change {
	return append(put(0, typeURL, es...), put(1, typeURL, es...)...)
}

func del(view int, typeURL string, names ...string) []xdscache.Change {
	var out []xdscache.Change
	for _, n := range names {
		out = append(out, xdscache.Change{View: view, TypeURL: typeURL, Name: n})
	}
	return out
}

// nameOf decodes a resource and returns its name.
func nameOf(t testing.TB, a *anypb.Any) string {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	switch r := m.(type) {
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	t.Fatalf("unnamed resource %T", m)
	return ""
}

func names(t testing.TB, as []*anypb.Any) []string {
	t.Helper()
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, nameOf(t, a))
	}
	slices.Sort(out)
	return out
}

func portOf(t testing.TB, a *anypb.Any) uint32 {
	t.Helper()
	var c endpointv3.ClusterLoadAssignment
	if err := a.UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	return c.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
}

func short(typeURL string) string { return xdstype.Short(typeURL) }

// sotwClient is a hand-written SotW ADS client.
type sotwClient struct {
	t      *testing.T
	s      discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *core.Node
	sent   bool                // node sent (Envoy sends it on the first request only)
	subs   map[string][]string // the names last requested per type
	in     chan *discovery.DiscoveryResponse
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *harness) sotw(node *core.Node) *sotwClient {
	h.t.Helper()
	return h.sotwIn(context.Background(), node)
}

// sotwIn opens the stream in ctx (which may carry call metadata).
func (h *harness) sotwIn(parent context.Context, node *core.Node) *sotwClient {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(parent, 60*time.Second)
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	c := &sotwClient{t: h.t, s: s, node: node, subs: map[string][]string{}, in: make(chan *discovery.DiscoveryResponse, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.in)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			c.in <- r
		}
	}()
	h.t.Cleanup(c.close)
	return c
}

func (c *sotwClient) close() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(recvTimeout):
		c.t.Error("sotw client reader did not stop")
	}
}

func (c *sotwClient) request(typeURL string, resourceNames []string, version, nonce, errMsg string) error {
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: resourceNames, VersionInfo: version, ResponseNonce: nonce}
	if !c.sent {
		req.Node, c.sent = c.node, true
	}
	if errMsg != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: errMsg}
	}
	c.subs[typeURL] = resourceNames
	return c.s.Send(req)
}

// subscribe sends the first request for a type.
func (c *sotwClient) subscribe(typeURL string, resourceNames ...string) {
	c.t.Helper()
	if err := c.request(typeURL, resourceNames, "", "", ""); err != nil {
		c.t.Fatal(err)
	}
}

func (c *sotwClient) ack(r *discovery.DiscoveryResponse) {
	c.t.Helper()
	if err := c.request(r.GetTypeUrl(), c.subs[r.GetTypeUrl()], r.GetVersionInfo(), r.GetNonce(), ""); err != nil {
		c.t.Fatal(err)
	}
}

// nack rejects r, keeping accepted as the version in use.
func (c *sotwClient) nack(r *discovery.DiscoveryResponse, accepted, msg string) {
	c.t.Helper()
	if err := c.request(r.GetTypeUrl(), c.subs[r.GetTypeUrl()], accepted, r.GetNonce(), msg); err != nil {
		c.t.Fatal(err)
	}
}

func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return r
	case <-time.After(recvTimeout):
		c.t.Fatal("no response in time")
	}
	return nil
}

// expect receives one response and checks its type, version and resource names.
func (c *sotwClient) expect(typeURL, version string, want ...string) *discovery.DiscoveryResponse {
	c.t.Helper()
	r := c.recv()
	if r.GetTypeUrl() != typeURL || r.GetVersionInfo() != version || !slices.Equal(names(c.t, r.GetResources()), want) {
		c.t.Fatalf("got %s %s %v, want %s %s %v", short(r.GetTypeUrl()), r.GetVersionInfo(), names(c.t, r.GetResources()),
			short(typeURL), version, want)
	}
	for _, a := range r.GetResources() {
		if a.GetTypeUrl() != typeURL {
			c.t.Fatalf("resource of type %s in a %s response", a.GetTypeUrl(), short(typeURL))
		}
	}
	return r
}

// none asserts nothing arrives for d.
func (c *sotwClient) none(d time.Duration) {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if ok {
			c.t.Fatalf("unexpected response %s %s %v", short(r.GetTypeUrl()), r.GetVersionInfo(), names(c.t, r.GetResources()))
		}
		c.t.Fatal("stream ended")
	case <-time.After(d):
	}
}

// deltaClient is a hand-written Delta ADS client.
type deltaClient struct {
	t      *testing.T
	s      discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *core.Node
	sent   bool
	in     chan *discovery.DeltaDiscoveryResponse
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *harness) delta(node *core.Node) *deltaClient {
	h.t.Helper()
	return h.deltaIn(context.Background(), node)
}

// deltaIn opens the stream in ctx (which may carry call metadata).
func (h *harness) deltaIn(parent context.Context, node *core.Node) *deltaClient {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(parent, 60*time.Second)
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(h.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	c := &deltaClient{t: h.t, s: s, node: node, in: make(chan *discovery.DeltaDiscoveryResponse, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.in)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			c.in <- r
		}
	}()
	h.t.Cleanup(c.close)
	return c
}

func (c *deltaClient) close() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(recvTimeout):
		c.t.Error("delta client reader did not stop")
	}
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if !c.sent {
		req.Node, c.sent = c.node, true
	}
	if err := c.s.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deltaClient) ack(r *discovery.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

func (c *deltaClient) nack(r *discovery.DeltaDiscoveryResponse, msg string) {
	c.t.Helper()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: msg}})
}

func (c *deltaClient) recv() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return r
	case <-time.After(recvTimeout):
		c.t.Fatal("no response in time")
	}
	return nil
}

// deltaNames renders a response's resources as name@version, sorted.
func deltaNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName()+"@"+res.GetVersion())
	}
	slices.Sort(out)
	return out
}

// expect receives one response and checks its type, updated name@version
// and removed names.
func (c *deltaClient) expect(typeURL string, updated, removed []string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	r := c.recv()
	gotRemoved := slices.Sorted(slices.Values(r.GetRemovedResources()))
	// a wanted version "*" is any: the publisher's resources are versioned
	// by their content
	sameName := func(got, want string) bool {
		if name, ok := strings.CutSuffix(want, "@*"); ok {
			return strings.HasPrefix(got, name+"@")
		}
		return got == want
	}
	if r.GetTypeUrl() != typeURL || !slices.EqualFunc(deltaNames(r), updated, sameName) || !slices.Equal(gotRemoved, removed) {
		c.t.Fatalf("got %s updated %v removed %v, want %s updated %v removed %v",
			short(r.GetTypeUrl()), deltaNames(r), gotRemoved, short(typeURL), updated, removed)
	}
	for _, res := range r.GetResources() {
		if got := nameOf(c.t, res.GetResource()); got != res.GetName() {
			c.t.Fatalf("resource %q holds %q", res.GetName(), got)
		}
	}
	return r
}

func (c *deltaClient) none(d time.Duration) {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if ok {
			c.t.Fatalf("unexpected delta response %s updated %v removed %v", short(r.GetTypeUrl()), deltaNames(r), r.GetRemovedResources())
		}
		c.t.Fatal("stream ended")
	case <-time.After(d):
	}
}

func at(version string, ns ...string) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n + "@" + version
	}
	slices.Sort(out)
	return out
}
