package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// mirror is one wildcard Envoy-like client of the replica: CDS as a
// wildcard, then EDS by name for every cluster, each response ACKed and
// its resources put into the anchor's caches. What it holds survives a
// reconnect; the next CDS response is diffed against it.
type mirror struct {
	addr   string
	nodeID string
	maxMsg int
	a      *anchor
	log    *slog.Logger

	synced     chan struct{} // closed once CDS and every cluster's EDS are in the caches
	syncedOnce sync.Once

	cdsSeen   bool              // a CDS response arrived
	clusters  map[string][]byte // held Clusters by name: the replica's bytes
	endpoints map[string][]byte // held ClusterLoadAssignments by cluster name
	// reencoded counts resources whose bytes the caches' deterministic
	// marshalling does not reproduce (each is served in other bytes).
	reencoded int
}

// Backoff between the mirror's sessions.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// node is what the mirror sends: an Envoy's node without locality, so
// the replica renders every cluster the way it renders it for an Envoy.
func (m *mirror) node() *core.Node {
	return &core.Node{Id: m.nodeID, Cluster: "gcpanchor", UserAgentName: "envoy",
		ClientFeatures: []string{"envoy.lrs.supports_send_all_clusters", "envoy.config.supports-resource-ttl"}}
}

// run mirrors the replica until ctx is done, reconnecting with backoff.
func (m *mirror) run(ctx context.Context) error {
	m.clusters, m.endpoints = map[string][]byte{}, map[string][]byte{}
	wait := minBackoff
	for {
		err := m.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		m.log.Warn("mirror stream ended; reconnecting", "err", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// typeState is the last response of one type: what an ACK repeats.
type typeState struct{ version, nonce string }

func (m *mirror) session(ctx context.Context) error {
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(m.maxMsg), grpc.MaxCallSendMsgSize(m.maxMsg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: m.node(), TypeUrl: typeCDS}); err != nil {
		return err
	}
	var cds, eds typeState
	var edsNames []string // the EDS subscription sent, sorted
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		switch resp.GetTypeUrl() {
		case typeCDS:
			if err := m.onClusters(resp); err != nil {
				return err
			}
			m.cdsSeen = true
			cds = typeState{resp.GetVersionInfo(), resp.GetNonce()}
			if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: typeCDS, VersionInfo: cds.version, ResponseNonce: cds.nonce}); err != nil {
				return err
			}
			if names := slices.Sorted(maps.Keys(m.clusters)); !slices.Equal(names, edsNames) {
				edsNames = names
				if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: typeEDS, VersionInfo: eds.version,
					ResponseNonce: eds.nonce, ResourceNames: edsNames}); err != nil {
					return err
				}
			}
		case typeEDS:
			if err := m.onEndpoints(resp); err != nil {
				return err
			}
			eds = typeState{resp.GetVersionInfo(), resp.GetNonce()}
			if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: typeEDS, VersionInfo: eds.version,
				ResponseNonce: eds.nonce, ResourceNames: edsNames}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("response of unexpected type %q", resp.GetTypeUrl())
		}
		m.checkSynced()
	}
}

// onClusters takes a SotW CDS response, the whole set: what changed is
// updated, what is gone is deleted, with its endpoints.
func (m *mirror) onClusters(resp *discovery.DiscoveryResponse) error {
	seen := make(map[string]bool, len(resp.GetResources()))
	update := map[string]types.Resource{}
	for _, any := range resp.GetResources() {
		c := &clusterv3.Cluster{}
		if err := proto.Unmarshal(any.GetValue(), c); err != nil {
			return fmt.Errorf("CDS response %s: %w", resp.GetVersionInfo(), err)
		}
		name := c.GetName()
		if name == "" || seen[name] {
			return fmt.Errorf("CDS response %s: a cluster named %q (empty or repeated)", resp.GetVersionInfo(), name)
		}
		seen[name] = true
		if old, ok := m.clusters[name]; ok && bytes.Equal(old, any.GetValue()) {
			continue
		}
		m.clusters[name] = bytes.Clone(any.GetValue())
		m.checkEncoding(c, any.GetValue())
		update[name] = c
	}
	var gone, goneEndpoints []string
	for name := range m.clusters {
		if !seen[name] {
			gone = append(gone, name)
			delete(m.clusters, name)
			if _, ok := m.endpoints[name]; ok {
				goneEndpoints = append(goneEndpoints, name)
				delete(m.endpoints, name)
			}
		}
	}
	if len(update)+len(gone) > 0 {
		if err := m.a.clusters.UpdateResources(update, gone); err != nil {
			return err
		}
	}
	if len(goneEndpoints) > 0 {
		if err := m.a.endpoints.UpdateResources(nil, goneEndpoints); err != nil {
			return err
		}
	}
	m.log.Debug("clusters", "version", resp.GetVersionInfo(), "updated", len(update), "deleted", len(gone))
	return nil
}

// onEndpoints takes a SotW EDS response: the assignments it carries (a
// name it leaves out is unchanged, not removed).
func (m *mirror) onEndpoints(resp *discovery.DiscoveryResponse) error {
	update := map[string]types.Resource{}
	for _, any := range resp.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := proto.Unmarshal(any.GetValue(), cla); err != nil {
			return fmt.Errorf("EDS response %s: %w", resp.GetVersionInfo(), err)
		}
		name := cla.GetClusterName()
		if _, ok := m.clusters[name]; !ok {
			continue // not (or no longer) a cluster: not asked for
		}
		if old, ok := m.endpoints[name]; ok && bytes.Equal(old, any.GetValue()) {
			continue
		}
		m.endpoints[name] = bytes.Clone(any.GetValue())
		m.checkEncoding(cla, any.GetValue())
		update[name] = cla
	}
	if len(update) > 0 {
		if err := m.a.endpoints.UpdateResources(update, nil); err != nil {
			return err
		}
	}
	m.log.Debug("endpoints", "version", resp.GetVersionInfo(), "updated", len(update))
	return nil
}

// checkEncoding counts (and logs the first of) the resources the caches
// would serve in bytes other than the replica's.
func (m *mirror) checkEncoding(msg proto.Message, want []byte) {
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err == nil && bytes.Equal(got, want) {
		return
	}
	m.reencoded++
	if m.reencoded == 1 {
		m.log.Warn("a resource is served in other bytes than the replica's", "type", string(msg.ProtoReflect().Descriptor().FullName()), "err", err)
	}
}

func (m *mirror) checkSynced() {
	if !m.cdsSeen {
		return
	}
	for name := range m.clusters {
		if _, ok := m.endpoints[name]; !ok {
			return
		}
	}
	m.syncedOnce.Do(func() {
		m.log.Info("mirror synced", "clusters", len(m.clusters), "endpoints", len(m.endpoints))
		close(m.synced)
	})
}
