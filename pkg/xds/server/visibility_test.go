package server_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	clustersvc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
)

// namespaceKey is the call metadata the tests' Audience hook trusts, as a
// real hook trusts a verified certificate or token.
const namespaceKey = "x-test-namespace"

func testAudience(ctx context.Context) (server.Audience, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ns := md.Get(namespaceKey)
	switch {
	case len(ns) == 0:
		return server.Audience{}, nil
	case ns[0] == "refused":
		return server.Audience{}, errors.New("no such identity")
	}
	return server.Audience{Namespace: ns[0]}, nil
}

func as(ns string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), namespaceKey, ns)
}

// visibilityWorld is a harness whose cache a publisher fills from a
// topology of three upstreams: a/pay and b/ledger exported to their own
// namespace, shared/web to every one.
type visibilityWorld struct {
	*harness
	dir *topology.Directory
	pub *publish.Publisher
	rev int
}

var (
	payKey    = topology.Key{Namespace: "a", Name: "pay"}
	ledgerKey = topology.Key{Namespace: "b", Name: "ledger"}
	webKey    = topology.Key{Namespace: "shared", Name: "web"}
)

func newVisibilityWorld(t *testing.T) *visibilityWorld {
	return newVisibilityWorldOn(newHarnessWith(t, server.Config{Audience: testAudience}, nil))
}

// newVisibilityWorldOn fills h's cache with the three upstreams.
func newVisibilityWorldOn(h *harness) *visibilityWorld {
	w := &visibilityWorld{harness: h, dir: topology.NewDirectory(), pub: publish.New(h.cache, "vis", nil)}
	var b topology.Batch
	for i, k := range []topology.Key{payKey, ledgerKey, webKey} {
		u := topologytest.Upstream(i)
		u.Key = k
		u.ExportTo = topology.NewExport([]string{"."}, k.Namespace)
		if k == webKey {
			u.ExportTo = topology.NewExport([]string{"*"}, k.Namespace)
		}
		b.PutUpstream(u)
		s := topologytest.Set(i, 0, nil)
		s.Key, s.Upstream = topology.Key{Namespace: k.Namespace, Name: k.Name + "-0"}, k.Name
		b.PutEndpointSet(s)
	}
	w.publish(b)
	return w
}

func (w *visibilityWorld) publish(b topology.Batch) string {
	w.t.Helper()
	snap, err := w.dir.Apply(b)
	if err != nil {
		w.t.Fatal(err)
	}
	st, err := w.pub.Publish(snap)
	if err != nil {
		w.t.Fatal(err)
	}
	return st.Version
}

// exportTo changes who may read an upstream.
func (w *visibilityWorld) exportTo(k topology.Key, items ...string) string {
	w.t.Helper()
	u := w.dir.Current().Upstream(k).Upstream
	u.ExportTo = topology.NewExport(items, k.Namespace)
	var b topology.Batch
	b.PutUpstream(u)
	return w.publish(b)
}

func cl(k topology.Key) string { return xdsname.Cluster(k) }

func listenerOf(k topology.Key) string { return translate.ListenerName(k) }

func routeOf(k topology.Key) string { return translate.RouteName(k) }

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

// TestVisibilitySotw: a client of namespace a is sent a's and the shared
// upstream over SotW, wildcard or by name, in every type; asking for b's
// by name gets nothing of it; an anonymous client is sent the shared one
// only. /debug/clients says who each client is.
func TestVisibilitySotw(t *testing.T) {
	t.Parallel()
	w := newVisibilityWorld(t)
	v := w.pub.Version(w.pub.LastRevision())
	all := []topology.Key{payKey, ledgerKey, webKey}
	byName := func(f func(topology.Key) string) []string {
		var out []string
		for _, k := range all {
			out = append(out, f(k))
		}
		return out
	}

	envoy := w.sotwIn(as("a"), envoyNode("envoy-a"))
	envoy.subscribe(CDS)
	envoy.expect(CDS, v, sorted(cl(payKey), cl(webKey))...)
	envoy.subscribe(EDS, byName(cl)...)
	envoy.expect(EDS, v, sorted(cl(payKey), cl(webKey))...)

	grpcA := w.sotwIn(as("a"), grpcNode("grpc-a"))
	grpcA.subscribe(LDS, byName(listenerOf)...)
	grpcA.expect(LDS, v, sorted(listenerOf(payKey), listenerOf(webKey))...)
	grpcA.subscribe(RDS, byName(routeOf)...)
	grpcA.expect(RDS, v, sorted(routeOf(payKey), routeOf(webKey))...)
	grpcA.subscribe(CDS, cl(ledgerKey)) // b's by name only: an empty state
	grpcA.expect(CDS, v)
	grpcA.subscribe(EDS, cl(ledgerKey))
	grpcA.none(quiet)

	anon := w.sotw(envoyNode("envoy-anonymous"))
	anon.subscribe(CDS)
	anon.expect(CDS, v, cl(webKey))
	anon.subscribe(EDS, byName(cl)...)
	anon.expect(EDS, v, cl(webKey))

	if got := w.client("envoy-a").Audience; got != "a" {
		t.Errorf("/debug/clients audience of envoy-a: %q, want a", got)
	}
	if got := w.client("envoy-anonymous").Audience; got != "anonymous" {
		t.Errorf("/debug/clients audience of the anonymous client: %q, want anonymous", got)
	}
}

// TestVisibilityDelta: the same over Delta, wildcard and by name; a
// resource of b that changes wakes no client of a.
func TestVisibilityDelta(t *testing.T) {
	t.Parallel()
	w := newVisibilityWorld(t)

	c := w.deltaIn(as("a"), envoyNode("delta-a"))
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	c.ack(c.expect(CDS, at("*", cl(payKey), cl(webKey)), nil))
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{cl(payKey), cl(ledgerKey), cl(webKey)}})
	c.ack(c.expect(EDS, at("*", cl(payKey), cl(webKey)), nil))

	g := w.deltaIn(as("a"), grpcNode("delta-grpc-a"))
	g.send(&discovery.DeltaDiscoveryRequest{TypeUrl: LDS, ResourceNamesSubscribe: []string{listenerOf(ledgerKey), listenerOf(payKey)}})
	g.ack(g.expect(LDS, at("*", listenerOf(payKey)), nil))
	g.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RDS, ResourceNamesSubscribe: []string{routeOf(ledgerKey)}})
	g.expect(RDS, nil, nil) // the first answer, empty: nothing it may read

	// a change of b's upstream reaches none of them
	u := w.dir.Current().Upstream(ledgerKey).Upstream
	u.ConnectTimeout = 7e9
	var b topology.Batch
	b.PutUpstream(u)
	w.publish(b)
	c.none(quiet)
	g.none(quiet)

	anon := w.delta(envoyNode("delta-anonymous"))
	anon.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS, ResourceNamesSubscribe: []string{"*", cl(payKey)}})
	anon.expect(CDS, at("*", cl(webKey)), nil)
}

// TestVisibilityFetch: unary Fetch, all or by name, sends only what the
// caller may read; an identity the hook refuses gets PermissionDenied on
// Fetch and on a stream alike.
func TestVisibilityFetch(t *testing.T) {
	t.Parallel()
	w := newVisibilityWorld(t)
	cds := clustersvc.NewClusterDiscoveryServiceClient(w.conn)
	fetch := func(ctx context.Context, names ...string) ([]string, error) {
		r, err := cds.FetchClusters(ctx, &discovery.DiscoveryRequest{Node: envoyNode("fetch"), TypeUrl: CDS, ResourceNames: names})
		if err != nil {
			return nil, err
		}
		return names2(t, r), nil
	}
	for _, tc := range []struct {
		ctx   context.Context
		names []string
		want  []string
	}{
		{as("a"), nil, sorted(cl(payKey), cl(webKey))},
		{as("b"), nil, sorted(cl(ledgerKey), cl(webKey))},
		{context.Background(), nil, []string{cl(webKey)}},
		{as("a"), []string{cl(ledgerKey)}, []string{}},
		{as("a"), []string{cl(ledgerKey), cl(payKey)}, []string{cl(payKey)}},
	} {
		got, err := fetch(tc.ctx, tc.names...)
		if err != nil || !slices.Equal(got, tc.want) {
			md, _ := metadata.FromOutgoingContext(tc.ctx)
			t.Errorf("fetch %v as %v: %v, %v; want %v", tc.names, md.Get(namespaceKey), got, err, tc.want)
		}
	}
	if _, err := fetch(as("refused")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("fetch of a refused identity: %v, want PermissionDenied", err)
	}
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(w.conn).StreamAggregatedResources(as("refused"))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&discovery.DiscoveryRequest{Node: envoyNode("refused"), TypeUrl: CDS})
	if _, err := s.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("stream of a refused identity: %v, want PermissionDenied", err)
	}
}

func names2(t *testing.T, r *discovery.DiscoveryResponse) []string {
	out := names(t, r.GetResources())
	if out == nil {
		out = []string{}
	}
	return out
}

// TestVisibilityChangesLive: when a/pay is exported to b instead, a's
// Delta client is sent its removal and a's SotW client a full state
// without it, b's clients are sent it, and back.
func TestVisibilityChangesLive(t *testing.T) {
	t.Parallel()
	w := newVisibilityWorld(t)
	v := w.pub.Version(w.pub.LastRevision())

	da := w.deltaIn(as("a"), envoyNode("delta-a"))
	da.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	da.ack(da.expect(CDS, at("*", cl(payKey), cl(webKey)), nil))
	db := w.deltaIn(as("b"), envoyNode("delta-b"))
	db.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
	db.ack(db.expect(CDS, at("*", cl(ledgerKey), cl(webKey)), nil))
	dbe := w.deltaIn(as("b"), envoyNode("delta-b-eds"))
	dbe.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: []string{cl(payKey)}})
	dbe.ack(dbe.expect(EDS, nil, nil))
	sa := w.sotwIn(as("a"), envoyNode("sotw-a"))
	sa.subscribe(CDS)
	sa.ack(sa.expect(CDS, v, sorted(cl(payKey), cl(webKey))...))
	sb := w.sotwIn(as("b"), envoyNode("sotw-b"))
	sb.subscribe(CDS)
	sb.ack(sb.expect(CDS, v, sorted(cl(ledgerKey), cl(webKey))...))

	v2 := w.exportTo(payKey, "b")
	da.ack(da.expect(CDS, nil, []string{cl(payKey)}))
	sa.ack(sa.expect(CDS, v2, cl(webKey)))
	db.ack(db.expect(CDS, at("*", cl(payKey)), nil)) // the same bytes, at the version they were made
	sb.ack(sb.expect(CDS, v2, sorted(cl(ledgerKey), cl(payKey), cl(webKey))...))
	dbe.ack(dbe.expect(EDS, at("*", cl(payKey)), nil)) // a changed Upstream re-sends its endpoints (the same bytes: the same version)

	v3 := w.exportTo(payKey, ".")
	da.expect(CDS, at("*", cl(payKey)), nil)
	sa.expect(CDS, v3, sorted(cl(payKey), cl(webKey))...)
	db.expect(CDS, nil, []string{cl(payKey)})
	sb.expect(CDS, v3, sorted(cl(ledgerKey), cl(webKey))...)
	dbe.expect(EDS, nil, []string{cl(payKey)})
}
