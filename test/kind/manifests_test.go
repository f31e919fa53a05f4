package kind_test

// The suite's inputs, and static checks of them that need neither Docker nor
// an apiserver: the kind cluster has the zones the walkthrough names, the
// EndpointSets point at the right zone's backends, and Envoy's bootstrap is a
// valid Bootstrap by Envoy's own protos and validation rules, pointing at the
// chart's xDS Service and routing to clusters the walkthrough defines.

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	// Types the bootstrap's typed_config and typed_extension_protocol_options name.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"poise.dev/poise/test/kubemanifests"
)

const (
	root       = "../.."
	chartDir   = root + "/charts/poise"
	shopDir    = root + "/examples/kubernetes"
	kindConfig = "testdata/kind-config.yaml"
	kindValues = "testdata/values-kind.yaml"

	regionLabel = "topology.kubernetes.io/region"
	zoneLabel   = "topology.kubernetes.io/zone"
)

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func nestedString(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

// kindCluster is the part of kind's v1alpha4 Cluster config the suite relies on.
type kindCluster struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Networking struct {
		APIServerAddress string `json:"apiServerAddress"`
		ServiceSubnet    string `json:"serviceSubnet"`
	} `json:"networking"`
	Nodes []struct {
		Role   string            `json:"role"`
		Labels map[string]string `json:"labels"`
	} `json:"nodes"`
}

// locality is a (region, zone) pair.
type locality struct{ region, zone string }

func (l locality) String() string { return l.region + "/" + l.zone }

func readKindConfig(t testing.TB) (kindCluster, map[string]locality) {
	t.Helper()
	raw, err := os.ReadFile(kindConfig)
	if err != nil {
		t.Fatal(err)
	}
	var c kindCluster
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", kindConfig, err)
	}
	zones := map[string]locality{}
	for i, n := range c.Nodes {
		if n.Role != "worker" {
			continue
		}
		l := locality{n.Labels[regionLabel], n.Labels[zoneLabel]}
		if l.region == "" || l.zone == "" {
			t.Errorf("%s: worker %d lacks %s or %s: %v", kindConfig, i, regionLabel, zoneLabel, n.Labels)
			continue
		}
		if _, dup := zones[l.zone]; dup {
			t.Errorf("%s: two workers in zone %s", kindConfig, l.zone)
		}
		zones[l.zone] = l
	}
	return c, zones
}

// TestKindConfig: the cluster the suite creates has the zones the walkthrough
// places backends and Localities in, and keeps its API server on loopback.
func TestKindConfig(t *testing.T) {
	c, zones := readKindConfig(t)
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Errorf("%s: kind %q apiVersion %q, want a kind.x-k8s.io/v1alpha4 Cluster", kindConfig, c.Kind, c.APIVersion)
	}
	if c.Networking.APIServerAddress != "127.0.0.1" {
		t.Errorf("%s: apiServerAddress %q: the suite talks to loopback only", kindConfig, c.Networking.APIServerAddress)
	}
	if len(zones) < 3 {
		t.Fatalf("%s: %d labelled workers, want one per zone of the walkthrough (at least 3)", kindConfig, len(zones))
	}
	subnet, err := netip.ParsePrefix(c.Networking.ServiceSubnet)
	if err != nil {
		t.Fatalf("%s: serviceSubnet: %v", kindConfig, err)
	}

	objs := kubemanifests.Read(t, shopDir)
	// Echo Deployments: pinned to a zone of a worker, and saying so.
	echoZones := map[string]bool{}
	for _, d := range ofKind(objs, "Deployment") {
		if d.GetName() == "envoy" {
			continue
		}
		zone := nestedString(d, "spec", "template", "spec", "nodeSelector", zoneLabel)
		if _, ok := zones[zone]; !ok {
			t.Errorf("Deployment %s: nodeSelector zone %q is not a worker zone of %s (%v)", d.GetName(), zone, kindConfig, zones)
		}
		if got := d.GetLabels()["zone"]; got != zone {
			t.Errorf("Deployment %s: label zone=%q, nodeSelector zone %q", d.GetName(), got, zone)
		}
		ctrs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		env := map[string]string{}
		for _, c := range ctrs {
			list, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
			for _, e := range list {
				m := e.(map[string]any)
				if v, ok := m["value"].(string); ok {
					env[m["name"].(string)] = v
				}
			}
		}
		if env["ZONE"] != zone {
			t.Errorf("Deployment %s: reports zone %q but runs in %q", d.GetName(), env["ZONE"], zone)
		}
		echoZones[zone] = true
	}
	for zone := range zones {
		if !echoZones[zone] {
			t.Errorf("no echo backends in zone %s", zone)
		}
	}
	// Localities and EndpointSets: localities of the cluster.
	for _, kind := range []string{"Locality", "EndpointSet"} {
		for _, u := range ofKind(objs, kind) {
			l := locality{nestedString(u, "spec", "region"), nestedString(u, "spec", "zone")}
			if kind == "EndpointSet" {
				l = locality{nestedString(u, "spec", "locality", "region"), nestedString(u, "spec", "locality", "zone")}
			}
			if zones[l.zone] != l {
				t.Errorf("%s %s: locality %s is not a worker's (%v)", kind, u.GetName(), l, zones)
			}
		}
	}
	// Fixed ClusterIPs: in the cluster's service range, in its static band
	// (never handed out dynamically), and each EndpointSet names the Service of
	// its own zone.
	ipOfZone := map[string]string{}
	for _, s := range ofKind(objs, "Service") {
		ip := nestedString(s, "spec", "clusterIP")
		if ip == "" {
			continue
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil || !subnet.Contains(addr) {
			t.Errorf("Service %s: clusterIP %s is not in the kind cluster's service range %s", s.GetName(), ip, subnet)
			continue
		}
		if off, band := staticBand(subnet, addr); off == 0 || off >= band {
			t.Errorf("Service %s: clusterIP %s is outside the static band (the first %d addresses) of %s, "+
				"where the apiserver allocates only on request", s.GetName(), ip, band, subnet)
		}
		ipOfZone[s.GetLabels()["zone"]] = ip
	}
	for _, e := range ofKind(objs, "EndpointSet") {
		zone := nestedString(e, "spec", "locality", "zone")
		eps, _, _ := unstructured.NestedSlice(e.Object, "spec", "endpoints")
		if len(eps) == 0 {
			t.Errorf("EndpointSet %s has no endpoints", e.GetName())
		}
		for _, ep := range eps {
			if addr := ep.(map[string]any)["address"]; addr != ipOfZone[zone] {
				t.Errorf("EndpointSet %s (zone %s) lists %v, but the ClusterIP of zone %s is %q", e.GetName(), zone, addr, zone, ipOfZone[zone])
			}
		}
	}
	// The imported Service and port exist.
	for _, u := range ofKind(objs, "Upstream") {
		svc := nestedString(u, "spec", "endpointsFrom", "service", "name")
		if svc == "" {
			continue
		}
		port := nestedString(u, "spec", "endpointsFrom", "service", "port")
		found := false
		for _, s := range ofKind(objs, "Service") {
			if s.GetName() != svc || s.GetNamespace() != u.GetNamespace() {
				continue
			}
			ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
			for _, p := range ports {
				found = found || p.(map[string]any)["name"] == port
			}
		}
		if !found {
			t.Errorf("Upstream %s imports Service %s port %q, which the walkthrough does not define", u.GetName(), svc, port)
		}
	}
}

// staticBand returns addr's offset in the IPv4 service range and the size of
// the range's lower band, which the apiserver hands out only to Services that
// ask for an address (KEP-3070): min(max(16, size/16), 256).
func staticBand(subnet netip.Prefix, addr netip.Addr) (offset, band uint32) {
	v4 := func(a netip.Addr) uint32 {
		b := a.As4()
		return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	}
	size := uint32(1) << (32 - subnet.Bits())
	return v4(addr) - v4(subnet.Masked().Addr()), min(max(16, size/16), 256)
}

// envoyBootstrap is the bootstrap in the walkthrough's ConfigMap, decoded
// by Envoy's own protos (unknown fields are errors) and validated with
// Envoy's validation rules, its typed configs included.
func envoyBootstrap(t testing.TB) *bootstrapv3.Bootstrap {
	t.Helper()
	var raw string
	for _, cm := range ofKind(kubemanifests.Read(t, shopDir), "ConfigMap") {
		if s := nestedString(cm, "data", "envoy.yaml"); s != "" {
			raw = s
		}
	}
	if raw == "" {
		t.Fatalf("%s: no ConfigMap with data envoy.yaml", shopDir)
	}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy v3 Bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	type validator interface{ ValidateAll() error }
	for _, c := range b.GetStaticResources().GetClusters() {
		for name, opt := range c.GetTypedExtensionProtocolOptions() {
			m, err := opt.UnmarshalNew()
			if err != nil {
				t.Fatalf("cluster %s: %s: %v", c.GetName(), name, err)
			}
			if v, ok := m.(validator); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("cluster %s: %s: %v", c.GetName(), name, err)
				}
			}
		}
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m, err := f.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatalf("listener %s: filter %s: %v", l.GetName(), f.GetName(), err)
				}
				if v, ok := m.(validator); ok {
					if err := v.ValidateAll(); err != nil {
						t.Errorf("listener %s: filter %s: %v", l.GetName(), f.GetName(), err)
					}
				}
				if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
					for _, hf := range hcm.GetHttpFilters() {
						hm, err := hf.GetTypedConfig().UnmarshalNew()
						if err != nil {
							t.Fatalf("http filter %s: %v", hf.GetName(), err)
						}
						if v, ok := hm.(validator); ok {
							if err := v.ValidateAll(); err != nil {
								t.Errorf("http filter %s: %v", hf.GetName(), err)
							}
						}
					}
				}
			}
		}
	}
	return b
}

// routes returns the listener's routes: path prefix → cluster.
func routes(t testing.TB, b *bootstrapv3.Bootstrap) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m, err := f.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				hcm, ok := m.(*hcmv3.HttpConnectionManager)
				if !ok {
					continue
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						out[r.GetMatch().GetPrefix()] = r.GetRoute().GetCluster()
						if _, isRoute := r.GetAction().(*routev3.Route_Route); !isRoute {
							t.Errorf("route %s is not a plain route to a cluster", r.GetMatch().GetPrefix())
						}
					}
				}
			}
		}
	}
	return out
}

// TestEnvoyBootstrap: the walkthrough's Envoy takes ADS from the chart's
// xDS Service (default release poise in poise-system, the chart's default
// xDS port) and routes to the clusters Poise publishes for its Upstreams.
func TestEnvoyBootstrap(t *testing.T) {
	b := envoyBootstrap(t)

	ads := b.GetDynamicResources().GetAdsConfig()
	if ads == nil || len(ads.GetGrpcServices()) != 1 || b.GetDynamicResources().GetCdsConfig().GetAds() == nil {
		t.Fatalf("bootstrap does not take CDS over ADS: %v", b.GetDynamicResources())
	}
	adsCluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()

	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Service struct {
			XDSPort uint32 `json:"xdsPort"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("poise.poise-system.svc:%d", v.Service.XDSPort)
	var got []string
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != adsCluster {
			continue
		}
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, e := range le.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				got = append(got, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
			}
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("cluster %s does not speak HTTP/2 (gRPC) to the control plane", c.GetName())
		}
	}
	if !slices.Equal(got, []string{want}) {
		t.Errorf("the ADS cluster %q points at %v, want the chart's xDS Service %s", adsCluster, got, want)
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); a != "127.0.0.1" {
		t.Errorf("Envoy's admin listens on %q, want loopback", a)
	}

	upstreams := map[string]bool{}
	for _, u := range ofKind(kubemanifests.Read(t, shopDir), "Upstream") {
		upstreams[u.GetNamespace()+"/"+u.GetName()] = true
	}
	r := routes(t, b)
	var targets []string
	for prefix, cluster := range r {
		if !upstreams[cluster] {
			t.Errorf("route %s goes to cluster %q, which no Upstream of the walkthrough publishes (%v)", prefix, cluster, upstreams)
		}
		targets = append(targets, cluster)
	}
	for u := range upstreams {
		if !slices.Contains(targets, u) {
			t.Errorf("no route to Upstream %s", u)
		}
	}
}

// TestKindValues: the chart values of the suite use the image it loads into
// the nodes, never pulled from a registry.
func TestKindValues(t *testing.T) {
	raw, err := os.ReadFile(kindValues)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct {
			Repository, Tag, PullPolicy string
		} `json:"image"`
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if v.Image.PullPolicy != "Never" {
		t.Errorf("%s: image.pullPolicy %q, want Never (the image is loaded with kind load docker-image)", kindValues, v.Image.PullPolicy)
	}
	if got := v.Image.Repository + ":" + v.Image.Tag; got != defaultImage {
		t.Errorf("%s: image %s, want %s (what the suite builds)", kindValues, got, defaultImage)
	}
}

// defaultImage is the image the suite builds with `make image` and loads.
const defaultImage = "poise.local/poise:e2e"
