package explain_test

import (
	"bytes"
	"encoding/json"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/golden"
)

var mapsKey = topology.Key{Namespace: "a", Name: "maps"}

// tenants is a snapshot of every kind of rule: a's private upstream
// ("."), shared one ("*"), partner one (".", "b"), one that sets none, and
// a SpatialDomain of its own (".") over the one that sets none; b's
// private ledger.
func tenants(t *testing.T) *topology.Snapshot {
	t.Helper()
	var b topology.Batch
	for i, u := range []struct {
		key   topology.Key
		items []string
	}{
		{topology.Key{Namespace: "a", Name: "private"}, []string{"."}},
		{topology.Key{Namespace: "a", Name: "shared"}, []string{"*"}},
		{topology.Key{Namespace: "a", Name: "partner"}, []string{".", "b"}},
		{topology.Key{Namespace: "a", Name: "plain"}, nil},
		{topology.Key{Namespace: "b", Name: "ledger"}, []string{"."}},
	} {
		up := topologytest.Upstream(i)
		up.Key, up.ExportTo = u.key, topology.NewExport(u.items, u.key.Namespace)
		b.PutUpstream(up)
		s := topologytest.Set(i, 0, nil)
		s.Key, s.Upstream, s.Endpoints = topology.Key{Namespace: u.key.Namespace, Name: u.key.Name + "-0"}, u.key.Name, s.Endpoints[:1]
		b.PutEndpointSet(s)
	}
	b.PutSpatialDomain(topology.SpatialDomain{Key: mapsKey, ExportTo: topology.NewExport([]string{"."}, "a"), Domain: partitionmap.Domain{
		Name: "maps", GridDeg: 5, MaxCells: 64, CapPercent: partitionmap.NoCap,
		Replicas: []partitionmap.Replica{{Name: "eu", Upstream: "plain", Region: topologytest.Regions[0]}},
		Products: []partitionmap.Product{{Name: "tiles", PathPrefix: "/tiles", AllowedRegions: []string{topologytest.Regions[0]}}},
	}})
	b.PutPartition(topology.Partition{Key: topology.Key{Namespace: "a", Name: "world"}, Domain: "maps",
		Extent: partitionmap.BBox{West: -180, South: -90, East: 180, North: 90}, Replicas: []string{"eu"}})
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Spatial()) != 1 || snap.Spatial()[0].Map == nil {
		t.Fatalf("the domain is not built: %+v", snap.Spatial())
	}
	return snap
}

// TestVisibilityGolden: with a client, explain says per upstream and per
// SpatialDomain whether it may read it and why, in text and JSON.
func TestVisibilityGolden(t *testing.T) {
	snap := tenants(t)
	for _, tc := range []struct {
		name string
		opts explain.VisibilityOptions
	}{
		{"visibility-client-b", explain.VisibilityOptions{Audience: &explain.Audience{Namespace: "b"}}},
		{"visibility-anonymous-default-own", explain.VisibilityOptions{Default: topology.NewExport([]string{"."}, ""),
			Audience: &explain.Audience{Anonymous: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := explain.Build(snap)
			explain.ResolveVisibility(&rep, snap, tc.opts)
			var buf bytes.Buffer
			if err := explain.WriteText(&buf, rep); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, buf.String())
			js, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name+"-json", string(js)+"\n")
		})
	}
}

// TestAccessAgreesWithPublication: for every default rule and client,
// what explain says a client may read is exactly what the publisher lets
// that client's audience read in the cache: each upstream's cluster, and
// the SpatialDomain's replica cluster.
func TestAccessAgreesWithPublication(t *testing.T) {
	snap := tenants(t)
	envoy := &core.Node{Id: "envoy", UserAgentName: "envoy"}
	for _, def := range [][]string{nil, {"*"}, {"."}, {"b"}, {".", "c"}} {
		cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
		pub := publish.New(cache, "t", nil)
		export := topology.NewExport(def, "")
		pub.SetDefaultExport(export)
		if _, err := pub.Publish(snap); err != nil {
			t.Fatal(err)
		}
		for _, aud := range []explain.Audience{{Namespace: "a"}, {Namespace: "b"}, {Namespace: "c"}, {Anonymous: true}} {
			rep := explain.Build(snap)
			explain.ResolveVisibility(&rep, snap, explain.VisibilityOptions{Default: export, Audience: &aud})
			cacheAud := xdscache.Audience{Namespace: aud.Namespace}
			for _, u := range rep.Upstreams {
				name := xdsname.Cluster(topology.Key{Namespace: u.Namespace, Name: u.Name})
				if got := cache.Readable(cacheAud, envoy, resource.ClusterType, name); got != u.Access.Allowed {
					t.Errorf("default %v, %s: %s published readable %v, explain says %v (%s)", def, aud, name, got, u.Access.Allowed, u.Access.Why)
				}
			}
			d := rep.SpatialDomains[0]
			name := xdsname.ReplicaCluster(mapsKey, "eu")
			if got := cache.Readable(cacheAud, envoy, resource.ClusterType, name); got != d.Access.Allowed {
				t.Errorf("default %v, %s: %s published readable %v, explain says %v (%s)", def, aud, name, got, d.Access.Allowed, d.Access.Why)
			}
		}
	}
	if t.Failed() {
		return
	}
	// and the published entries exist: a check that could not fail otherwise
	cache := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	if _, err := publish.New(cache, "t", nil).Publish(snap); err != nil {
		t.Fatal(err)
	}
	if !cache.Readable(xdscache.Audience{Namespace: "a"}, envoy, resource.ClusterType, xdsname.ReplicaCluster(mapsKey, "eu")) {
		t.Errorf("the domain's replica cluster %s is not published", xdsname.ReplicaCluster(mapsKey, "eu"))
	}
}
