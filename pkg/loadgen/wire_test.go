package loadgen

import (
	"bytes"
	"strconv"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestParse reads responses built with the generated messages.
func TestParse(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ClusterName(42)}
	cl := &clusterv3.Cluster{Name: ClusterName(7)}
	claAny, _ := anypb.New(cla)
	clAny, _ := anypb.New(cl)
	sotw, err := proto.Marshal(&discovery.DiscoveryResponse{VersionInfo: "v9", Resources: []*anypb.Any{claAny, clAny},
		TypeUrl: TypeEDS, Nonce: "n3"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	h, err := ParseSotW(sotw, func(typeURL, value []byte) error {
		name, err := ResourceName(value)
		got = append(got, string(typeURL)+" "+string(name)+" "+strconv.Itoa(ClusterIndex(name)))
		return err
	})
	if err != nil || string(h.Version) != "v9" || string(h.Nonce) != "n3" || string(h.TypeURL) != TypeEDS {
		t.Fatalf("header %q %q %q, %v", h.Version, h.Nonce, h.TypeURL, err)
	}
	want := []string{TypeEDS + " bench/svc-0042 42", TypeCDS + " bench/svc-0007 7"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("resources %q, want %q", got, want)
	}

	delta, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: TypeEDS, Nonce: "d1",
		Resources:        []*discovery.Resource{{Name: ClusterName(3), Version: "x", Resource: claAny}},
		RemovedResources: []string{ClusterName(4)}})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	h, err = ParseDelta(delta, func(name, typeURL, value []byte) error {
		got = append(got, string(name)+" "+string(typeURL))
		if !bytes.Equal(value, claAny.Value) {
			t.Errorf("value %x, want %x", value, claAny.Value)
		}
		return nil
	})
	if err != nil || string(h.Nonce) != "d1" || string(h.TypeURL) != TypeEDS || len(got) != 1 || got[0] != "bench/svc-0003 "+TypeEDS ||
		h.Removed != 1 || string(h.RemovedNames[0]) != ClusterName(4) {
		t.Errorf("delta: %q %q %q removed %d %q, %v", h.Nonce, h.TypeURL, got, h.Removed, h.RemovedNames, err)
	}
}

// TestRequestsDecode: the requests a client assembles decode as the
// messages they stand for.
func TestRequestsDecode(t *testing.T) {
	node := NodeShape{Kind: GRPC, ID: "grpc-1", Cluster: "app", Region: "eu-west", Zone: "eu-west-a", Metadata: map[string]string{"k": "v"}}
	nb, err := node.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	names := AppendNames(nil, ClusterName(2), ClusterName(3))
	for _, delta := range []bool{false, true} {
		first := append(AppendFirst(nil, delta, nb, TypeCDS), names...)
		ack := AppendACK(nil, delta, Header{Version: []byte("v9"), TypeURL: []byte(TypeEDS), Nonce: []byte("n3")})
		if delta {
			var f, a discovery.DeltaDiscoveryRequest
			if err := proto.Unmarshal(first, &f); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(ack, &a); err != nil {
				t.Fatal(err)
			}
			checkNode(t, f.GetNode())
			if f.GetTypeUrl() != TypeCDS || len(f.GetResourceNamesSubscribe()) != 2 || a.GetResponseNonce() != "n3" || a.GetTypeUrl() != TypeEDS {
				t.Errorf("delta: first %v, ACK %v", &f, &a)
			}
			continue
		}
		var f, a discovery.DiscoveryRequest
		if err := proto.Unmarshal(first, &f); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(append(ack, names...), &a); err != nil {
			t.Fatal(err)
		}
		checkNode(t, f.GetNode())
		if f.GetTypeUrl() != TypeCDS || len(f.GetResourceNames()) != 2 || a.GetVersionInfo() != "v9" || a.GetResponseNonce() != "n3" ||
			a.GetTypeUrl() != TypeEDS || a.GetResourceNames()[1] != ClusterName(3) {
			t.Errorf("sotw: first %v, ACK %v", &f, &a)
		}
	}
}

// checkNode: the node is grpc-go's shape, which the plane renders per endpoint.
func checkNode(t *testing.T, n *core.Node) {
	t.Helper()
	if n.GetId() != "grpc-1" || n.GetUserAgentName() != GRPCUserAgent || n.GetUserAgentVersion() != GRPCVersion ||
		n.GetLocality().GetZone() != "eu-west-a" || n.GetMetadata().GetFields()["k"].GetStringValue() != "v" ||
		len(n.GetClientFeatures()) != 2 || n.GetClientFeatures()[0] != FeatureNoOverprovisioning {
		t.Errorf("node %v", n)
	}
}
