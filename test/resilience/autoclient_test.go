package resilience

import (
	"context"
	"slices"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// reconnectBackoff is how long a client waits before it opens a stream
// again (Envoy's base back-off is 500 ms; shorter keeps scenarios short).
const reconnectBackoff = 50 * time.Millisecond

// autoClient is an Envoy-like SotW ADS client: every cluster (CDS asked
// whole), then each cluster's assignment by name, every response ACKed at
// once; a stream that ends is opened again at once, asking for what it
// held, as Envoy does after a disconnect.
type autoClient struct {
	node *core.Node
	addr string

	mu        sync.Mutex
	edsNames  []string
	reconnect int // streams opened after the first
}

func startAutoClient(ctx context.Context, addr string, node *core.Node) *autoClient {
	c := &autoClient{node: node, addr: addr}
	go c.run(ctx)
	return c
}

func (c *autoClient) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnect
}

func (c *autoClient) run(ctx context.Context) {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			c.mu.Lock()
			c.reconnect++
			c.mu.Unlock()
		}
		c.stream(ctx, conn)
		// the client's back-off: a refused stream (the proxy's cut) fails
		// at once, and a client that does not wait spins
		select {
		case <-time.After(reconnectBackoff):
		case <-ctx.Done():
		}
	}
}

func (c *autoClient) stream(ctx context.Context, conn *grpc.ClientConn) {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return
	}
	send := func(req *discovery.DiscoveryRequest) bool { return st.Send(req) == nil }
	c.mu.Lock()
	names := slices.Clone(c.edsNames)
	c.mu.Unlock()
	if !send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: resource.ClusterType}) {
		return
	}
	if len(names) > 0 && !send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names}) {
		return
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return
		}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			var next []string
			for _, a := range resp.GetResources() {
				var cl cluster.Cluster
				if proto.Unmarshal(a.GetValue(), &cl) != nil {
					continue
				}
				name := cl.GetEdsClusterConfig().GetServiceName()
				if name == "" {
					name = cl.GetName()
				}
				next = append(next, name)
			}
			slices.Sort(next)
			// make-before-break: the new assignments are asked for before
			// the clusters are ACKed, as Envoy does while it warms them
			if !slices.Equal(next, names) {
				names = next
				c.mu.Lock()
				c.edsNames = slices.Clone(names)
				c.mu.Unlock()
				if !send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names}) {
					return
				}
			}
			if !send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}) {
				return
			}
		case resource.EndpointType:
			if !send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}) {
				return
			}
		}
	}
}
