package grpctraffic

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
)

// Node is what a client's bootstrap says of its node.
type Node struct {
	ID      string
	Cluster string
	// Region and Zone are node.locality; a client with no region has no
	// locality (and receives the split of clients without one).
	Region, Zone string
	// Metadata is node.metadata, e.g. poise.dev/demand-weight.
	Metadata map[string]any
}

// Bootstrap is the xDS bootstrap of a client of the control plane at
// xdsAddr (host:port, plaintext) that is node n: the JSON object
// GRPC_XDS_BOOTSTRAP_CONFIG would hold.
func Bootstrap(xdsAddr string, n Node) map[string]any {
	type locality struct {
		Region string `json:"region"`
		Zone   string `json:"zone,omitempty"`
	}
	type bootstrapNode struct {
		ID       string         `json:"id"`
		Cluster  string         `json:"cluster"`
		Locality *locality      `json:"locality,omitempty"`
		Metadata map[string]any `json:"metadata,omitempty"`
	}
	bn := bootstrapNode{ID: n.ID, Cluster: n.Cluster, Metadata: n.Metadata}
	if n.Region != "" || n.Zone != "" {
		bn.Locality = &locality{Region: n.Region, Zone: n.Zone}
	}
	return map[string]any{
		"xds_servers": []any{map[string]any{"server_uri": "passthrough:///" + xdsAddr, "channel_creds": []any{map[string]any{"type": "insecure"}}}},
		"node":        bn,
	}
}

// Dial dials xds:///listener through grpc-go's own xDS resolver with a
// bootstrap of its own (the JSON of bootstrap: xds_servers with their
// channel_creds and call_creds, node), so with an xDS client and stream of
// its own however many clients one process holds, and starts resolving at
// once. The caller closes the connection.
func Dial(bootstrap map[string]any, listener string) (*grpc.ClientConn, error) {
	b, err := json.Marshal(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("bootstrap for %s: %w", listener, err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(b)
	if err != nil {
		return nil, fmt.Errorf("xDS resolver for %s: %w", listener, err)
	}
	conn, err := grpc.NewClient("xds:///"+listener, grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("client of xds:///%s: %w", listener, err)
	}
	conn.Connect()
	return conn, nil
}
