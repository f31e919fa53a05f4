package server_test

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
)

// spatialHosts are the domains whose virtual hosts a spatial
// RouteConfiguration holds, as "ns/name", sorted.
func spatialHosts(t *testing.T, a *anypb.Any) []string {
	t.Helper()
	var rc routev3.RouteConfiguration
	if err := a.UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		if name, ok := strings.CutPrefix(vh.GetName(), "spatial:"); ok && name != "unknown-domain" {
			out = append(out, strings.Replace(name, ":", "/", 1))
		}
	}
	slices.Sort(out)
	return out
}

// TestSpatialRoutesFollowTheProvenIdentity: Envoy-like ADS clients over
// mTLS, whose certificates prove namespaces a and b, each receive a spatial
// route (SotW and Delta) holding the virtual host of their own namespace's
// SpatialDomain and of the one exported to every namespace, never the
// other's; their wildcard CDS lacks the other's domain clusters, and both
// are sent the spatial listener. When b exports its domain to a too, a's
// clients are sent the new route and b's nothing.
func TestSpatialRoutesFollowTheProvenIdentity(t *testing.T) {
	t.Parallel()
	ca := newSPIFFECA(t)
	h := newHarnessWith(t, server.Config{TLS: ca.serverTLS(t), Authenticator: identity.New(identity.Options{TrustDomain: "cluster.local"})}, nil)
	w := newVisibilityWorldOn(h)
	maps, charts, atlas := topology.Key{Namespace: "a", Name: "maps"}, topology.Key{Namespace: "b", Name: "charts"}, topology.Key{Namespace: "shared", Name: "atlas"}
	var b topology.Batch
	topologytest.SpatialDomain(&b, maps, []string{"."})
	topologytest.SpatialDomain(&b, charts, []string{"."})
	topologytest.SpatialDomain(&b, atlas, []string{"*"})
	v := w.publish(b)

	conns := map[string]func(){}
	for _, ns := range []string{"a", "b"} {
		conn := ca.dial(t, h.addr, ca.issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://cluster.local/ns/"+ns+"/sa/envoy"))
		conns[ns] = func() { h.conn = conn }
	}
	type clients struct {
		sotw  *sotwClient
		delta *deltaClient
	}
	own := map[string]string{"a": "a/maps", "b": "b/charts"}
	byNS := map[string]clients{}
	var deltaVersions []string
	for _, ns := range []string{"a", "b"} {
		conns[ns]()
		want := []string{own[ns], "shared/atlas"}
		slices.Sort(want)

		s := h.sotw(envoyNode("sotw-" + ns))
		s.subscribe(LDS)
		s.ack(s.expect(LDS, v, translate.SpatialListenerName))
		s.subscribe(CDS)
		r := s.recv()
		var domainClusters []string
		for _, name := range names(t, r.GetResources()) {
			if _, cl, ok := strings.Cut(name, ":"); ok && strings.HasPrefix(name, "spatial") {
				domainClusters = append(domainClusters, cl)
			}
		}
		slices.Sort(domainClusters)
		ownCl := strings.Replace(own[ns], "/", ":", 1)
		if want := []string{ownCl + ":p", ownCl + ":r", "shared:atlas:p", "shared:atlas:r"}; !slices.Equal(domainClusters, want) {
			t.Errorf("%s's wildcard CDS holds the domain clusters %v, want %v: its own domain's and atlas's", ns, domainClusters, want)
		}
		s.ack(r)
		s.subscribe(RDS, translate.SpatialRouteName)
		r = s.expect(RDS, v, translate.SpatialRouteName)
		if got := spatialHosts(t, r.GetResources()[0]); !slices.Equal(got, want) {
			t.Errorf("%s's SotW spatial route holds %v, want %v", ns, got, want)
		}
		s.ack(r)

		d := h.delta(envoyNode("delta-" + ns))
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: RDS, ResourceNamesSubscribe: []string{translate.SpatialRouteName}})
		dr := d.recv()
		if len(dr.GetResources()) != 1 {
			t.Fatalf("%s's Delta RDS: %v", ns, deltaNames(dr))
		}
		if got := spatialHosts(t, dr.GetResources()[0].GetResource()); !slices.Equal(got, want) {
			t.Errorf("%s's Delta spatial route holds %v, want %v", ns, got, want)
		}
		deltaVersions = append(deltaVersions, dr.GetResources()[0].GetVersion())
		d.ack(dr)
		byNS[ns] = clients{s, d}
	}
	if deltaVersions[0] == deltaVersions[1] {
		t.Errorf("a's and b's spatial routes differ under one Delta version %s", deltaVersions[0])
	}

	// b exports its domain to a too: a's clients are sent it, b's nothing
	d := w.dir.Current().SpatialDomain(charts).Domain
	d.ExportTo = topology.NewExport([]string{".", "a"}, "b")
	b = topology.Batch{}
	b.PutSpatialDomain(d)
	v2 := w.publish(b)
	a := byNS["a"]
	cds := a.sotw.recv() // charts's clusters now in a's full state
	if cds.GetTypeUrl() != CDS || !slices.Contains(names(t, cds.GetResources()), "spatial:b:charts:r") {
		t.Errorf("a's CDS after b's export: %s %v", short(cds.GetTypeUrl()), names(t, cds.GetResources()))
	}
	a.sotw.ack(cds)
	r := a.sotw.expect(RDS, v2, translate.SpatialRouteName)
	if got := spatialHosts(t, r.GetResources()[0]); !slices.Equal(got, []string{"a/maps", "b/charts", "shared/atlas"}) {
		t.Errorf("a's SotW spatial route after b's export: %v", got)
	}
	dr := a.delta.recv()
	if len(dr.GetResources()) != 1 || !slices.Equal(spatialHosts(t, dr.GetResources()[0].GetResource()), []string{"a/maps", "b/charts", "shared/atlas"}) {
		t.Errorf("a's Delta spatial route after b's export: %v", deltaNames(dr))
	}
	byNS["b"].sotw.none(quiet)
	byNS["b"].delta.none(quiet)
}
