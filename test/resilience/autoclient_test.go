package resilience

import (
	"context"
	"slices"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// reconnectBackoff is how long a client waits before it opens a stream
// again (Envoy's base back-off is 500 ms; shorter keeps scenarios short).
const reconnectBackoff = 50 * time.Millisecond

// autoClient is an Envoy-like ADS client, SotW or Delta: every cluster
// (CDS asked whole), then each cluster's assignment by name, and with
// listeners set every listener and the routes they name; every response
// ACKed at once; a stream that ends is opened again after a back-off,
// asking for what it held, as Envoy does after a disconnect.
type autoClient struct {
	node      *core.Node
	addrs     []string // the replicas, in the order it tries them
	delta     bool
	listeners bool
	// nack: the client rejects every response, as a proxy that cannot
	// load what it is sent does, keeping the version it held (none)
	nack bool

	// also are names asked for, by type asked by name, beyond those the
	// types asked whole name: an observer asks for a resource the
	// scenario will add before it exists, so that the revision that adds
	// it is the one it receives it in (a name asked for only once its
	// cluster arrives can be answered by a later revision)
	also map[string][]string
	// token, when set, is sent as "authorization: Bearer TOKEN" on every
	// stream, as a pod's projected service-account token
	token string

	mu        sync.Mutex
	ends      []streamEnd         // how each stream ended, in order
	names     map[string][]string // by type asked by name: the names asked for
	reconnect int                 // streams opened after the first
}

func startAutoClient(ctx context.Context, addr string, node *core.Node, delta, listeners bool) *autoClient {
	return startFailoverClient(ctx, []string{addr}, node, delta, listeners)
}

// startFailoverClient is an autoClient of several replicas: when a stream
// ends it opens the next on the next replica, as an Envoy whose xDS
// cluster has several hosts does.
func startFailoverClient(ctx context.Context, addrs []string, node *core.Node, delta, listeners bool) *autoClient {
	c := &autoClient{node: node, addrs: addrs, delta: delta, listeners: listeners, names: map[string][]string{}}
	go c.run(ctx)
	return c
}

// streamEnd is how one of a client's streams ended.
type streamEnd struct {
	at  time.Time
	err error
}

func (c *autoClient) ended(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ends = append(c.ends, streamEnd{at: time.Now(), err: err})
}

// Ends is how the client's streams ended so far.
func (c *autoClient) Ends() []streamEnd {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ends)
}

func (c *autoClient) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnect
}

func (c *autoClient) run(ctx context.Context) {
	conns := make([]*grpc.ClientConn, len(c.addrs))
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		if i > 0 {
			c.mu.Lock()
			c.reconnect++
			c.mu.Unlock()
		}
		at := i % len(c.addrs)
		if conns[at] == nil {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if c.token != "" {
				opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.token)))
			}
			conn, err := grpc.NewClient(c.addrs[at], opts...)
			if err != nil {
				return
			}
			conns[at] = conn
		}
		conn := conns[at]
		if c.delta {
			c.deltaStream(ctx, conn)
		} else {
			c.sotwStream(ctx, conn)
		}
		// the client's back-off: a refused stream (the proxy's cut) fails
		// at once, and a client that does not wait spins
		select {
		case <-time.After(reconnectBackoff):
		case <-ctx.Done():
		}
	}
}

// wholeTypes are the types asked for whole; byName maps each to the type
// its resources name, and how.
func (c *autoClient) wholeTypes() []string {
	if c.listeners {
		return []string{resource.ClusterType, resource.ListenerType}
	}
	return []string{resource.ClusterType}
}

// named is, for a response of a type asked whole, the type it names
// resources of and the names (sorted).
func named(typ string, res []*anypb.Any) (string, []string) {
	var out []string
	switch typ {
	case resource.ClusterType:
		for _, a := range res {
			var cl cluster.Cluster
			if proto.Unmarshal(a.GetValue(), &cl) != nil {
				continue
			}
			out = append(out, cmpOr(cl.GetEdsClusterConfig().GetServiceName(), cl.GetName()))
		}
		typ = resource.EndpointType
	case resource.ListenerType:
		for _, a := range res {
			var l listener.Listener
			var m hcm.HttpConnectionManager
			if proto.Unmarshal(a.GetValue(), &l) != nil || l.GetApiListener().GetApiListener().UnmarshalTo(&m) != nil {
				continue
			}
			if n := m.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
		typ = resource.RouteType
	default:
		return "", nil
	}
	slices.Sort(out)
	return typ, slices.Compact(out)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// rename notes the names asked for of typ; false when they did not change.
func (c *autoClient) rename(typ string, names []string) bool {
	if extra := c.also[typ]; len(extra) > 0 {
		names = append(slices.Clone(names), extra...)
		slices.Sort(names)
		names = slices.Compact(names)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(c.names[typ], names) {
		return false
	}
	c.names[typ] = names
	return true
}

func (c *autoClient) asked() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for t, n := range c.names {
		out[t] = slices.Clone(n)
	}
	return out
}

// bearer sends a token on plaintext: between the test's clients and its
// proxy on loopback, and on the lab's own links.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func (c *autoClient) sotwStream(ctx context.Context, conn *grpc.ClientConn) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		c.ended(err)
		return
	}
	send := func(req *discovery.DiscoveryRequest) bool { return st.Send(req) == nil }
	node := c.node
	for _, typ := range c.wholeTypes() {
		if !send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ}) {
			return
		}
		node = nil
	}
	for typ, names := range c.asked() {
		if !send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names}) {
			return
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			c.ended(err)
			return
		}
		typ := resp.GetTypeUrl()
		// make-before-break: what a new cluster or listener names is asked
		// for before it is ACKed, as Envoy does while it warms them
		if sub, names := named(typ, resp.GetResources()); sub != "" && c.rename(sub, names) {
			if !send(&discovery.DiscoveryRequest{TypeUrl: sub, ResourceNames: names}) {
				return
			}
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.asked()[typ], VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if c.nack {
			ack.VersionInfo, ack.ErrorDetail = "", &status.Status{Code: int32(codes.InvalidArgument), Message: "resilience: this client rejects everything"}
		}
		if !send(ack) {
			return
		}
	}
}

func (c *autoClient) deltaStream(ctx context.Context, conn *grpc.ClientConn) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		c.ended(err)
		return
	}
	send := func(req *discovery.DeltaDiscoveryRequest) bool { return st.Send(req) == nil }
	node := c.node
	for _, typ := range c.wholeTypes() {
		if !send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ}) {
			return
		}
		node = nil
	}
	for typ, names := range c.asked() {
		if !send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: names}) {
			return
		}
	}
	// what a Delta client holds of each type asked whole, to name what it names
	held := map[string]map[string]*anypb.Any{}
	for {
		resp, err := st.Recv()
		if err != nil {
			c.ended(err)
			return
		}
		typ := resp.GetTypeUrl()
		if slices.Contains(c.wholeTypes(), typ) {
			if held[typ] == nil {
				held[typ] = map[string]*anypb.Any{}
			}
			for _, r := range resp.GetResources() {
				held[typ][r.GetName()] = r.GetResource()
			}
			for _, n := range resp.GetRemovedResources() {
				delete(held[typ], n)
			}
			var all []*anypb.Any
			for _, a := range held[typ] {
				all = append(all, a)
			}
			sub, names := named(typ, all)
			old := c.asked()[sub]
			if c.rename(sub, names) {
				var add, drop []string
				for _, n := range names {
					if !slices.Contains(old, n) {
						add = append(add, n)
					}
				}
				for _, n := range old {
					if !slices.Contains(names, n) {
						drop = append(drop, n)
					}
				}
				if !send(&discovery.DeltaDiscoveryRequest{TypeUrl: sub, ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: drop}) {
					return
				}
			}
		}
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}
		if c.nack {
			ack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "resilience: this client rejects everything"}
		}
		if !send(ack) {
			return
		}
	}
}
