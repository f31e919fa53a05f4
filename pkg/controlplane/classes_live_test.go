package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/testkit"
)

// liveUpstreams are the upstreams of liveManifests: two Balanced ones of
// unequal capacity (one spilling to a second priority, one with an
// unhealthy endpoint) and one PreferSameZone; marker, without affinity,
// changes to make every client receive one last publication.
var (
	liveAffine = []string{"shop/ledger", "shop/cart", "shop/web"}
	liveMarker = "shop/marker"
)

// liveManifests writes the topology; marker has markers endpoints, a
// number every view is sent anew.
func liveManifests(t *testing.T, dir string, markers int) {
	t.Helper()
	var y strings.Builder
	upstream := func(name, mode string) {
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s, namespace: shop}\nspec:\n", name)
		if mode != "" {
			fmt.Fprintf(&y, "  localityAffinity: {mode: %s}\n", mode)
		}
	}
	locality := func(up, region, zone string, priority, weight int) {
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s-%s-%s, namespace: shop}\n"+
			"spec: {upstream: %s, priority: %d, region: %s, zone: %s, weight: %d}\n", up, region, zone, up, priority, region, zone, weight)
	}
	set := func(up, region, zone, net string, weights []int, unhealthy ...int) {
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s-%s-%s, namespace: shop}\n"+
			"spec:\n  upstream: %s\n  locality: {region: %s, zone: %s}\n  endpoints:\n", up, region, zone, up, region, zone)
		for i, w := range weights {
			fmt.Fprintf(&y, "  - {address: %s.%d, port: 8080, weight: %d}\n", net, i+1, w)
		}
		if len(unhealthy) > 0 {
			y.WriteString("status:\n  health:\n")
			for _, i := range unhealthy {
				fmt.Fprintf(&y, "  - {address: %s.%d, port: 8080, probe: Unhealthy}\n", net, i+1)
			}
		}
	}
	upstream("ledger", "Balanced")
	locality("ledger", "eu", "a", 0, 2)
	locality("ledger", "eu", "b", 0, 1)
	locality("ledger", "us", "c", 0, 1)
	locality("ledger", "ap", "d", 1, 1)
	set("ledger", "eu", "a", "10.1.1", []int{2, 1, 1}, 0, 1)
	set("ledger", "eu", "b", "10.1.2", []int{1, 1})
	set("ledger", "us", "c", "10.1.3", []int{1, 3})
	set("ledger", "ap", "d", "10.1.4", []int{1})
	upstream("cart", "Balanced")
	set("cart", "eu", "a", "10.2.1", []int{1})
	set("cart", "eu", "b", "10.2.2", []int{1, 1, 1, 1})
	set("cart", "us", "c", "10.2.3", []int{2, 2}, 1)
	upstream("web", "PreferSameZone")
	set("web", "eu", "a", "10.3.1", []int{1, 1}, 0)
	set("web", "eu", "b", "10.3.2", []int{1, 1})
	set("web", "us", "c", "10.3.3", []int{1})
	upstream("marker", "")
	set("marker", "eu", "a", "10.9.1", slices.Repeat([]int{1}, markers))
	path := filepath.Join(dir, "live.yaml")
	if err := os.WriteFile(path+".new", []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// liveClient is one ADS client over real gRPC that subscribes to every
// upstream's endpoints, ACKs whatever it is sent, and keeps the last
// content of each.
type liveClient struct {
	zone        string // "region/zone", "" for none
	perEndpoint bool   // the gRPC view (one locality per endpoint)

	mu      sync.Mutex
	held    map[string]*endpoint.ClusterLoadAssignment
	version string // of the last response it ACKed
	err     error
}

// start opens the client's stream and receives until ctx ends.
func (c *liveClient) start(t *testing.T, ctx context.Context, addr string, id string, demand int) {
	t.Helper()
	node := &core.Node{Id: id, UserAgentName: "envoy"}
	if c.zone != "" {
		region, zone, _ := strings.Cut(c.zone, "/")
		node.Locality = &core.Locality{Region: region, Zone: zone}
	}
	if c.perEndpoint {
		node.UserAgentName = "grpc-go"
		node.ClientFeatures = []string{translate.FeatureNoOverprovisioning}
	}
	node.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"poise.dev/demand-weight": structpb.NewNumberValue(float64(demand))}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range append(slices.Clone(liveAffine), liveMarker) {
		key, _ := topology.ParseKey(k)
		names = append(names, xdsname.Cluster(key))
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	c.held = map[string]*endpoint.ClusterLoadAssignment{}
	go func() {
		for {
			resp, err := st.Recv()
			if err == nil {
				err = c.take(resp)
			}
			if err == nil {
				err = st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names,
					VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
			}
			if err != nil {
				c.mu.Lock()
				if ctx.Err() == nil {
					c.err = err
				}
				c.mu.Unlock()
				return
			}
		}
	}()
}

// take keeps what a response carries, as the client holds it once ACKed.
func (c *liveClient) take(resp *discovery.DiscoveryResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range resp.GetResources() {
		var cla endpoint.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			return err
		}
		c.held[cla.GetClusterName()] = &cla
	}
	c.version = resp.GetVersionInfo()
	return nil
}

// revision is the topology revision of the version the client last ACKed.
func (c *liveClient) revision() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	i := strings.LastIndexByte(c.version, '-')
	r, err := strconv.ParseUint(c.version[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("version %q: %w", c.version, err)
	}
	return r, nil
}

// TestClassesReceiveWhatExplainSays is the proof that what a client of a
// locality class is sent is a function of one snapshot: real ADS clients
// over gRPC, in three zones and both views (Envoy's weighted localities,
// gRPC's locality per endpoint), declaring demand weights, against the
// plane serving manifests. Once the clients' demand is applied and every
// client has ACKed the snapshot's revision, the EDS each client holds for
// every affinity upstream is decoded and must be, figure for figure, what
// /debug/explain?from= says for that class on the same revision: the
// applied demand is in the snapshot, not in the publisher.
func TestClassesReceiveWhatExplainSays(t *testing.T) {
	dir := t.TempDir()
	liveManifests(t, dir, 1)
	a, _ := startPlane(t, controlplane.Config{Paths: []string{dir}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := []*liveClient{
		{zone: "eu/a"}, {zone: "eu/a", perEndpoint: true}, {zone: "eu/b"},
		{zone: "us/c"}, {zone: "us/c", perEndpoint: true}, {zone: ""},
	}
	demands := []int{3, 2, 1, 1, 1, 7} // eu/a 5, eu/b 1, us/c 2; no locality counts nothing
	for i, c := range clients {
		c.start(t, ctx, a.XDS, fmt.Sprintf("live-%d", i), demands[i])
	}

	// the clients' demand, applied to both Balanced upstreams
	wantDemand := map[string]uint64{"a": 5, "b": 1, "c": 2}
	testkit.Eventually(t, 20*time.Second, "the clients' demand applied", func() (bool, string) {
		rep, err := liveExplain(a.Admin, "", "eu/a")
		if err != nil {
			return false, err.Error()
		}
		for _, u := range rep.Upstreams {
			if u.Affinity.Mode != "Balanced" {
				continue
			}
			b := u.Class.Balanced
			if b == nil || b.DemandSource != explain.DemandClients {
				return false, fmt.Sprintf("revision %d: %s/%s is not divided by its clients' demand: %+v", rep.Revision, u.Namespace, u.Name, b)
			}
			for _, z := range b.Zones {
				if z.Demand != wantDemand[z.Zone] {
					return false, fmt.Sprintf("revision %d: %s/%s zone %s demand %d, want %d", rep.Revision, u.Namespace, u.Name, z.Zone, z.Demand, wantDemand[z.Zone])
				}
			}
		}
		return true, ""
	})

	// One last publication that every client receives (marker's endpoints),
	// so each client's last ACKed version names the revision its whole
	// state is of; it must be the revision explain reads. Should anything
	// else move meanwhile, the marker is flipped again.
	var rev uint64
	for try := 2; rev == 0 && try < 8; try++ {
		liveManifests(t, dir, try)
		testkit.Eventually(t, 20*time.Second, "the marker's change served", func() (bool, string) {
			rep, err := liveExplain(a.Admin, liveMarker, "")
			if err != nil {
				return false, err.Error()
			}
			if n := len(rep.Upstreams[0].Priorities[0].Localities[0].Endpoints); n != try {
				return false, fmt.Sprintf("revision %d: %d endpoints", rep.Revision, n)
			}
			rev = rep.Revision
			return true, ""
		})
		testkit.Eventually(t, 20*time.Second, "every client ACKs the marker's revision", func() (bool, string) {
			for i, c := range clients {
				r, err := c.revision()
				switch {
				case err != nil:
					return false, fmt.Sprintf("client %d: %v", i, err)
				case r < rev:
					return false, fmt.Sprintf("client %d holds revision %d, the marker is at %d", i, r, rev)
				case r > rev:
					rev = 0 // something else moved since
					return true, ""
				}
			}
			return true, ""
		})
	}
	if rev == 0 {
		t.Fatal("the plane kept moving: no revision every client held")
	}

	compared := 0
	for _, k := range liveAffine {
		key, _ := topology.ParseKey(k)
		cluster := xdsname.Cluster(key)
		for i, c := range clients {
			if c.zone == "" {
				continue
			}
			rep, err := liveExplain(a.Admin, k, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Revision != rev {
				t.Fatalf("explain reads revision %d, the clients hold %d: the plane moved during the comparison", rep.Revision, rev)
			}
			c.mu.Lock()
			cla := c.held[cluster]
			c.mu.Unlock()
			if cla == nil {
				t.Fatalf("client %d (%s) holds no endpoints of %s", i, c.zone, k)
			}
			if msg := sameSplit(rep.Upstreams[0], cla, c.perEndpoint); msg != "" {
				t.Errorf("%s, client %d in %s (per-endpoint view %v), revision %d: %s", k, i, c.zone, c.perEndpoint, rev, msg)
			}
			compared++
		}
	}
	t.Logf("revision %d: %d (upstream, class, view) assignments equal explain's", rev, compared)
}

// liveExplain is /debug/explain for one upstream (all without one) and,
// with from, one client locality.
func liveExplain(admin, upstream, from string) (explain.Report, error) {
	q := []string{}
	if upstream != "" {
		q = append(q, "upstream="+upstream)
	}
	if from != "" {
		q = append(q, "from="+from)
	}
	var rep explain.Report
	err := testkit.GetJSON("http://"+admin+"/debug/explain?"+strings.Join(q, "&"), &rep)
	return rep, err
}

// sameSplit compares a decoded assignment with the split explain gives the
// class (its own, or the upstream's where it receives None), and says how
// they differ ("" when they do not). Envoy's view: every locality with
// traffic at priority 0 weighted by its traffic and holding its selectable
// endpoints at their configured weights; gRPC's view: every selectable
// endpoint with a share a locality of its own weighted by its share. In
// both, the drop is the split's.
func sameSplit(u explain.Upstream, cla *endpoint.ClusterLoadAssignment, perEndpoint bool) string {
	split := u.Split
	if c := u.Class; c != nil && !c.ReceivesNone {
		split = *c.Split
	}
	want, got := map[string]string{}, map[string]string{}
	for _, p := range split.Priorities {
		for _, l := range p.Localities {
			if l.Traffic == 0 {
				continue
			}
			var eps []string
			for _, e := range l.Endpoints {
				addr := net.JoinHostPort(e.Address, strconv.Itoa(int(e.Port)))
				switch {
				case perEndpoint && e.Selectable && e.Share > 0:
					want[addr] = strconv.FormatUint(e.Share, 10)
				case !perEndpoint && e.Selectable:
					eps = append(eps, fmt.Sprintf("%s×%d", addr, e.Weight))
				}
			}
			if !perEndpoint {
				slices.Sort(eps)
				want[l.Region+"/"+l.Zone+"/"+l.SubZone] = fmt.Sprintf("%d %v", l.Traffic, eps)
			}
		}
	}
	for _, l := range cla.GetEndpoints() {
		if l.GetPriority() != 0 {
			continue
		}
		var eps []string
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			addr := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
			if perEndpoint {
				got[addr] = strconv.FormatUint(uint64(l.GetLoadBalancingWeight().GetValue()), 10)
				continue
			}
			eps = append(eps, fmt.Sprintf("%s×%d", addr, e.GetLoadBalancingWeight().GetValue()))
		}
		if !perEndpoint {
			slices.Sort(eps)
			loc := l.GetLocality()
			got[loc.GetRegion()+"/"+loc.GetZone()+"/"+loc.GetSubZone()] = fmt.Sprintf("%d %v", l.GetLoadBalancingWeight().GetValue(), eps)
		}
	}
	var dropped uint64
	for _, d := range cla.GetPolicy().GetDropOverloads() {
		dropped += uint64(d.GetDropPercentage().GetNumerator())
	}
	var diffs []string
	for _, k := range slices.Sorted(mapsKeys(want, got)) {
		if want[k] != got[k] {
			diffs = append(diffs, fmt.Sprintf("%s: explain %q, EDS %q", k, want[k], got[k]))
		}
	}
	if dropped != split.DroppedMillionths {
		diffs = append(diffs, fmt.Sprintf("dropped: explain %d, EDS %d", split.DroppedMillionths, dropped))
	}
	if len(want) == 0 {
		diffs = append(diffs, "explain gives no traffic at all: nothing is compared")
	}
	return strings.Join(diffs, "; ")
}

// mapsKeys is the keys of both maps.
func mapsKeys(a, b map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
		for k := range b {
			if _, dup := a[k]; !dup && !yield(k) {
				return
			}
		}
	}
}
