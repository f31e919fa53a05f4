package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/xds/xdstype"
)

// Every served type is also served on its own discovery service (SotW,
// Delta and Fetch of that type alone), called by the service's method
// names as its generated client calls them; a request naming another type
// there is refused.
func TestEachTypeOnItsOwnService(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("v1",
		both(CDS, entry(t, "v1", cluster("c1", 1))),
		both(EDS, entry(t, "v1", cla("c1", 8001))),
		both(LDS, entry(t, "v1", listener("l1"))),
		both(RDS, entry(t, "v1", routeConfig("r1", "c1"))))
	published := map[string]string{CDS: "c1", EDS: "c1", LDS: "l1", RDS: "r1"}
	for i, typ := range xdstype.All() {
		t.Run(typ.Short, func(t *testing.T) {
			name, svc := published[typ.URL], typ.Service
			if name == "" {
				t.Fatalf("the test publishes no %s", typ.Short)
			}
			ctx, cancel := context.WithTimeout(t.Context(), recvTimeout)
			defer cancel()
			open := func(stream string) grpc.ClientStream {
				t.Helper()
				s, err := h.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: stream, ServerStreams: true, ClientStreams: true},
					"/"+svc.ServiceName+"/"+stream)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			for _, sd := range svc.Streams {
				s := open(sd.StreamName)
				if strings.HasPrefix(sd.StreamName, "Delta") {
					if err := s.SendMsg(&discovery.DeltaDiscoveryRequest{Node: envoyNode("delta"), ResourceNamesSubscribe: []string{name}}); err != nil {
						t.Fatal(err)
					}
					resp := &discovery.DeltaDiscoveryResponse{}
					if err := s.RecvMsg(resp); err != nil {
						t.Fatalf("%s: %v", sd.StreamName, err)
					}
					if resp.GetTypeUrl() != typ.URL || len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != name {
						t.Fatalf("%s: got %s %v, want %s [%s]", sd.StreamName, resp.GetTypeUrl(), deltaNames(resp), typ.URL, name)
					}
				} else {
					if err := s.SendMsg(&discovery.DiscoveryRequest{Node: envoyNode("sotw"), ResourceNames: []string{name}}); err != nil {
						t.Fatal(err)
					}
					resp := &discovery.DiscoveryResponse{}
					if err := s.RecvMsg(resp); err != nil {
						t.Fatalf("%s: %v", sd.StreamName, err)
					}
					if got := names(t, resp.GetResources()); resp.GetTypeUrl() != typ.URL || resp.GetVersionInfo() != "v1" || !slices.Equal(got, []string{name}) {
						t.Fatalf("%s: got %s %s %v, want %s v1 [%s]", sd.StreamName, resp.GetTypeUrl(), resp.GetVersionInfo(), got, typ.URL, name)
					}
				}
				_ = s.CloseSend()
			}
			for _, md := range svc.Methods {
				resp := &discovery.DiscoveryResponse{}
				if err := h.conn.Invoke(ctx, "/"+svc.ServiceName+"/"+md.MethodName, &discovery.DiscoveryRequest{ResourceNames: []string{name}}, resp); err != nil {
					t.Fatalf("%s: %v", md.MethodName, err)
				}
				if got := names(t, resp.GetResources()); resp.GetTypeUrl() != typ.URL || !slices.Equal(got, []string{name}) {
					t.Fatalf("%s: got %s %v, want %s [%s]", md.MethodName, resp.GetTypeUrl(), got, typ.URL, name)
				}
			}
			other := xdstype.At((i + 1) % xdstype.Count).URL
			for _, sd := range svc.Streams {
				if strings.HasPrefix(sd.StreamName, "Delta") {
					continue
				}
				s := open(sd.StreamName)
				if err := s.SendMsg(&discovery.DiscoveryRequest{Node: envoyNode("other"), TypeUrl: other}); err != nil {
					t.Fatal(err)
				}
				if err := s.RecvMsg(&discovery.DiscoveryResponse{}); status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%s asked for %s: %v, want InvalidArgument", sd.StreamName, xdstype.Short(other), err)
				}
			}
		})
	}
}
