// Package adstest is a SotW ADS client for tests that drive a control plane
// step by step, as a proxy would and as a broken one might: ask for a type,
// then ACK what arrives, NACK it with an error, or leave it unanswered.
package adstest

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Client is one ADS stream of one node over a plaintext connection, both
// ended with the test.
type Client struct {
	t     testing.TB
	node  *core.Node
	st    discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	names map[string][]string // the names last asked for, per type
	sent  bool                // the node went with the first request
}

// Conn connects to addr in plaintext, and a context of 30 s for the calls
// on it; both end with the test.
func Conn(t testing.TB, addr string) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return conn, ctx
}

// Dial opens an ADS stream to addr as node; every call on it waits at
// most 30 s.
func Dial(t testing.TB, addr string, node *core.Node) *Client {
	t.Helper()
	conn, ctx := Conn(t, addr)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{t: t, node: node, st: st, names: map[string][]string{}}
}

func (c *Client) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	if !c.sent {
		req.Node, c.sent = c.node, true
	}
	c.names[req.GetTypeUrl()] = req.GetResourceNames()
	if err := c.st.Send(req); err != nil {
		c.t.Fatalf("node %s: %v", c.node.GetId(), err)
	}
}

// Ask subscribes to typeURL (names, or every resource of the type) and
// returns the first response.
func (c *Client) Ask(typeURL string, names ...string) *discovery.DiscoveryResponse {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
	return c.Recv()
}

// Recv returns the next response.
func (c *Client) Recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.st.Recv()
	if err != nil {
		c.t.Fatalf("node %s: %v", c.node.GetId(), err)
	}
	return resp
}

// ACK accepts resp.
func (c *Client) ACK(resp *discovery.DiscoveryResponse) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: c.names[resp.GetTypeUrl()],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
}

// NACK rejects resp with msg, keeping accepted, the version it held before.
func (c *Client) NACK(resp *discovery.DiscoveryResponse, accepted, msg string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: c.names[resp.GetTypeUrl()],
		VersionInfo: accepted, ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: msg}})
}
