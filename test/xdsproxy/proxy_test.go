package xdsproxy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/history"
)

// startPlane serves examples/checkout.yaml on loopback ports of its own.
func startPlane(t *testing.T) controlplane.Addrs {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "checkout.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	cfg := controlplane.Config{Paths: []string{dir}, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
		Started: func(a controlplane.Addrs) { started <- a }}
	go func() { done <- controlplane.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case a := <-started:
		return a
	case err := <-done:
		t.Fatalf("control plane: %v", err)
	}
	return controlplane.Addrs{}
}

// startProxied is a plane and a proxy in front of it, recording.
func startProxied(t *testing.T) (controlplane.Addrs, *Proxy, *Recorder) {
	t.Helper()
	a := startPlane(t)
	rec := NewRecorder()
	p, err := Start("replica-0", a.XDS, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return a, p, rec
}

// TestRecordsWhatTheClientSaw: through the proxy a client is served what
// it would be served directly; the record has each response (its version,
// names and content hashes) and each ACK, under the client's node id; a
// history made of them, with the direct client's view as the publication,
// checks clean.
func TestRecordsWhatTheClientSaw(t *testing.T) {
	t.Parallel()
	a, p, rec := startProxied(t)

	direct := adstest.Dial(t, a.XDS, &core.Node{Id: "observer", Cluster: "test"})
	via := adstest.Dial(t, p.Addr(), &core.Node{Id: "client-1", Cluster: "test"})
	view := history.View{}
	var version string
	for _, ask := range []struct {
		typ   string
		names []string
	}{{resource.ClusterType, nil}, {resource.EndpointType, []string{"shop/checkout"}}} {
		want := direct.Ask(ask.typ, ask.names...)
		direct.ACK(want)
		got := via.Ask(ask.typ, ask.names...)
		via.ACK(got)
		if got.GetVersionInfo() != want.GetVersionInfo() || len(got.GetResources()) != len(want.GetResources()) {
			t.Fatalf("%s through the proxy: version %s, %d resources; directly: %s, %d", ask.typ, got.GetVersionInfo(), len(got.GetResources()),
				want.GetVersionInfo(), len(want.GetResources()))
		}
		view[ask.typ] = history.Contents{}
		for _, r := range want.GetResources() {
			name, err := ResourceName(r)
			if err != nil {
				t.Fatal(err)
			}
			view[ask.typ][name] = history.HashOf(r.GetValue())
		}
		version = want.GetVersionInfo()
	}
	// the ACK of the last response is recorded once the proxy has read it
	waitFor(t, rec, func(events []history.Event) bool { return len(events) >= 6 })

	events := rec.Events()
	kinds := []history.Kind{history.Subscribe, history.Response, history.ACK, history.Subscribe, history.Response, history.ACK}
	for i, e := range events {
		if e.Kind != kinds[i] || e.Client != "client-1" || e.Replica != "replica-0" {
			t.Fatalf("event %d: %+v, want a %s of client-1 through replica-0", i, e, kinds[i])
		}
	}
	if !events[1].Wildcard || events[4].Wildcard || events[4].Resources["shop/checkout"] != view[resource.EndpointType]["shop/checkout"] ||
		events[0].Names != nil || !slices.Equal(events[3].Names, []string{"shop/checkout"}) || !slices.Equal(events[5].Names, []string{"shop/checkout"}) {
		t.Errorf("recorded %+v: want CDS asked whole, EDS by name with the content served", events)
	}
	res := history.Check(history.History{
		Clients:      []history.Client{{ID: "client-1", Class: "all"}},
		Publications: []history.Publication{{Revision: 1, Versions: []string{events[1].Version, version}, Views: map[string]history.View{"all": view}}},
		Events:       events,
	}, history.Options{})
	if len(res.Violations) != 0 {
		t.Errorf("violations: %v", res.Violations)
	}
}

// TestCuts: a cut ends the streams with UNAVAILABLE and refuses new ones
// until restored; a cut after one response lets exactly one through.
func TestCuts(t *testing.T) {
	t.Parallel()
	_, p, rec := startProxied(t)

	st := rawStream(t, p.Addr())
	send(t, st, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-1"}, TypeUrl: resource.ClusterType})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after the cut: %v, want UNAVAILABLE", err)
	}
	refused := rawStream(t, p.Addr())
	send(t, refused, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-2"}, TypeUrl: resource.ClusterType})
	if _, err := refused.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new stream during the cut: %v, want UNAVAILABLE", err)
	}

	p.Restore()
	p.CutAfter(1)
	mid := rawStream(t, p.Addr())
	send(t, mid, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-3"}, TypeUrl: resource.ClusterType})
	if _, err := mid.Recv(); err != nil {
		t.Fatalf("the one response before the planned cut: %v", err)
	}
	send(t, mid, &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"shop/checkout"}})
	if _, err := mid.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the response after the planned cut: %v, want UNAVAILABLE", err)
	}
	n := 0
	for _, e := range rec.Events() {
		if e.Kind == history.Response && e.Client == "client-3" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("client-3 was recorded receiving %d responses, want 1", n)
	}
}

func rawStream(t *testing.T, addr string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, ctx := adstest.Conn(t, addr)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func send(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, req *discovery.DiscoveryRequest) {
	t.Helper()
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the record satisfies ok, for at most 10 s.
func waitFor(t *testing.T, rec *Recorder, ok func([]history.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rec.WaitFor(ctx, ok); err != nil {
		t.Fatalf("the record did not get there (%v): %+v", err, rec.Events())
	}
}
