package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/testkit"
)

// TestBalancedDemandFromLoadReports: a Balanced upstream with
// spec.loadReporting first follows its connected clients' demand (eu/a 1,
// eu/b 3); once its clients' load reports say eu/a sends three times what
// eu/b sends, /debug/explain?from= divides by 750:250 from load reports, and
// the eu/a client is sent that split, while the census still says 1:3.
func TestBalancedDemandFromLoadReports(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "shop.yaml", upstream("web")+"spec:\n  localityAffinity: {mode: Balanced}\n  loadReporting: {interval: 1s}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.1.0.1, port: 8080}]")+"---\n"+
		endpointSet("web-b", "web", "b", "[{address: 10.1.1.1, port: 8080}]"))
	a := startPlaneOn(t, path)

	// the census: one client in eu/a, one in eu/b declaring demand 3
	node := func(id, zone string, weight float64) *core.Node {
		n := &core.Node{Id: id, UserAgentName: "envoy", Locality: &core.Locality{Region: "eu", Zone: zone}}
		if weight > 0 {
			n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"poise.dev/demand-weight": structpb.NewNumberValue(weight)}}
		}
		return n
	}
	inA, inB := node("client-a", "a", 0), node("client-b", "b", 3)
	edsA := edsStream(t, a.XDS, inA)
	edsStream(t, a.XDS, inB)

	explainFrom := func(zone string) *explain.Balanced {
		t.Helper()
		r, err := http.Get("http://" + a.Admin + "/debug/explain?upstream=shop/web&from=eu/" + zone)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var rep explain.Report
		if err := json.Unmarshal(body, &rep); err != nil || r.StatusCode != http.StatusOK || len(rep.Upstreams) != 1 || rep.Upstreams[0].Class == nil {
			t.Fatalf("/debug/explain: %d %s: %v", r.StatusCode, body, err)
		}
		return rep.Upstreams[0].Class.Balanced
	}
	demandOf := func(b *explain.Balanced) [2]uint64 {
		var out [2]uint64
		for _, z := range b.Zones {
			switch z.Zone {
			case "a":
				out[0] = z.Demand
			case "b":
				out[1] = z.Demand
			}
		}
		return out
	}
	waitFor := func(what string, ok func(*explain.Balanced) bool) *explain.Balanced {
		t.Helper()
		var b *explain.Balanced
		testkit.EventuallyEvery(t, 20*time.Second, 50*time.Millisecond, what, func() (bool, string) {
			b = explainFrom("a")
			return ok(b), fmt.Sprintf("/debug/explain?from=eu/a says %+v", b)
		})
		return b
	}
	waitFor("the census applied", func(b *explain.Balanced) bool {
		return b.DemandSource == explain.DemandClients && demandOf(b) == [2]uint64{1, 3}
	})

	// the load reports: eu/a's reporter sent 300 requests, eu/b's 100
	for _, r := range []struct {
		node    *core.Node
		address string
		issued  uint64
	}{{inA, "10.1.0.1", 300}, {inB, "10.1.1.1", 100}} {
		stream := lrsStream(t, a.XDS)
		if err := stream.Send(&lrs.LoadStatsRequest{Node: r.node}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(endpointReport("shop/web", r.address, r.issued, r.issued, 0)); err != nil {
			t.Fatal(err)
		}
	}

	// within a bucket and demand.Quiet the load reports are the demand
	b := waitFor("the load reports applied", func(b *explain.Balanced) bool { return b.DemandSource == explain.DemandLoadReports })
	if demandOf(b) != [2]uint64{750, 250} || b.Demand != 1000 || b.DemandRequests != 400 || b.DemandWindowSeconds != 30 || b.KeepsAll {
		t.Errorf("from load reports: %+v", b)
	}
	traffic := map[string]uint64{}
	for _, z := range b.Zones {
		traffic[z.Zone] = *z.Traffic
	}
	if traffic["a"] != 666_667 || traffic["b"] != 333_333 {
		t.Errorf("eu/a keeps two thirds: %v", traffic)
	}
	if b := explainFrom("b"); b.DemandSource != explain.DemandLoadReports || !b.KeepsAll {
		t.Errorf("eu/b keeps all: %+v", b)
	}
	// the census has not moved: the clients still declare 1 and 3
	r, err := http.Get("http://" + a.Admin + "/debug/clients")
	if err != nil {
		t.Fatal(err)
	}
	var clients struct {
		Clients []struct {
			NodeID       string `json:"nodeId"`
			DemandWeight uint64 `json:"demandWeight"`
		} `json:"clients"`
	}
	err = json.NewDecoder(r.Body).Decode(&clients)
	r.Body.Close()
	weights := map[string]uint64{}
	for _, c := range clients.Clients {
		weights[c.NodeID] = c.DemandWeight
	}
	if err != nil || weights["client-a"] != 1 || weights["client-b"] != 3 {
		t.Errorf("/debug/clients: %v %v", weights, err)
	}
	// and the eu/a client is sent the split of the load demand
	for {
		cla := nextEndpoints(t, edsA)
		got := map[string]uint32{}
		for _, l := range cla.GetEndpoints() {
			got[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
		}
		if got["a"] == 666_667 && got["b"] == 333_333 {
			break
		}
	}
}

// lrsStream opens an LRS stream to xds, closed with the test.
func lrsStream(t *testing.T, xds string) lrs.LoadReportingService_StreamLoadStatsClient {
	t.Helper()
	conn, ctx := adstest.Conn(t, xds)
	stream, err := lrs.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// endpointReport is a load report of one endpoint (port 8080) of cluster.
func endpointReport(cluster, address string, issued, success, errs uint64) *lrs.LoadStatsRequest {
	return &lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{ClusterName: cluster,
		UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{UpstreamEndpointStats: []*endpoint.UpstreamEndpointStats{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: address, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
			TotalIssuedRequests: issued, TotalSuccessfulRequests: success, TotalErrorRequests: errs}}}}}}}
}

// edsStream opens an ADS stream as n subscribed to shop/web's endpoints.
func edsStream(t *testing.T, xds string, n *core.Node) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	st := adsStream(t, xds)
	if err := st.Send(&discovery.DiscoveryRequest{Node: n, TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/web"}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// nextEndpoints receives the stream's next endpoints of shop/web and ACKs them.
func nextEndpoints(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) *endpoint.ClusterLoadAssignment {
	t.Helper()
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/web"},
		VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 1 {
		t.Fatalf("endpoints: %d resources", len(resp.Resources))
	}
	var cla endpoint.ClusterLoadAssignment
	if err := resp.Resources[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	return &cla
}
