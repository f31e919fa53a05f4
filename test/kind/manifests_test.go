package kind_test

// The suite's inputs, and static checks of them that need neither Docker nor
// an apiserver: the kind cluster has the zones the walkthrough names, the
// EndpointSets point at the right zone's backends, and Envoy's bootstrap is a
// valid Bootstrap by Envoy's own protos and validation rules, pointing at the
// chart's xDS Service over TLS with the chart's CA and a projected token of its
// own ServiceAccount, routing to clusters the walkthrough defines and taking
// listeners over ADS. For the spatial phase: the replicas' Upstreams,
// Services and Deployments agree, Envoy exposes the port the control plane
// binds the spatial listener to, and each request the suite sends gets, by
// the Go reference on the walkthrough's map, what the suite expects of Envoy.

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	grpccredv3 "github.com/envoyproxy/go-control-plane/envoy/config/grpc_credential/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	// Types the bootstrap's typed_config and typed_extension_protocol_options name.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/test/kubemanifests"
)

const (
	root     = "../.."
	chartDir = root + "/charts/poise"
	// crdChartDir holds the CRDs, installed before chartDir
	crdChartDir = root + "/charts/poise-crds"
	shopDir     = root + "/examples/kubernetes"
	kindConfig  = "testdata/kind-config.yaml"
	kindValues  = "testdata/values-kind.yaml"

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

// number is an integer of a decoded manifest (JSON numbers decode as float64).
func number(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), n == float64(int64(n))
	case int:
		return int64(n), true
	}
	return 0, false
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
		if d.GetLabels()["app"] != "echo" {
			continue // Envoy, and the spatial replicas (any worker; TestSpatialManifests)
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
	// The call credentials' plugin configs (file_based_metadata) are typed
	// configs too: each must name a known type and pass its own rules.
	for _, gs := range b.GetDynamicResources().GetAdsConfig().GetGrpcServices() {
		for _, cc := range gs.GetGoogleGrpc().GetCallCredentials() {
			p := cc.GetFromPlugin()
			if p == nil {
				continue
			}
			m, err := p.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatalf("ads_config call_credentials %s: %v", p.GetName(), err)
			}
			if v, ok := m.(validator); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("ads_config call_credentials %s: %v", p.GetName(), err)
				}
			}
		}
	}
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
	// Listeners over ADS too: the spatial listener is an LDS resource
	// (docs/spatial.md). Without lds_config, Envoy never asks for it and
	// nothing listens on the spatial port.
	if lds := b.GetDynamicResources().GetLdsConfig(); lds.GetAds() == nil || lds.GetResourceApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("bootstrap does not take LDS over ADS (want dynamic_resources.lds_config: {ads: {}, resource_api_version: V3}), "+
			"so Envoy would never get the spatial listener: lds_config %v", lds)
	}
	if v := b.GetDynamicResources().GetCdsConfig().GetResourceApiVersion(); v != corev3.ApiVersion_V3 {
		t.Errorf("cds_config.resource_api_version %v, want V3", v)
	}
	want := fmt.Sprintf("poise.poise-system.svc:%d", chartDefaults(t).Service.XDSPort)
	if got := ads.GetGrpcServices()[0].GetGoogleGrpc().GetTargetUri(); got != want {
		t.Errorf("ADS goes to %q (google_grpc target_uri), want the chart's xDS Service %s", got, want)
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); a != "127.0.0.1" {
		t.Errorf("Envoy's admin listens on %q, want loopback", a)
	}

	// The static listener routes to every Upstream of the walkthrough but the
	// spatial replicas, which Envoy reaches through the spatial listener.
	objs := kubemanifests.Read(t, shopDir)
	replicaUpstreams := map[string]bool{}
	for _, d := range ofKind(objs, "SpatialDomain") {
		reps, _, _ := unstructured.NestedSlice(d.Object, "spec", "replicas")
		for _, r := range reps {
			if up, ok := r.(map[string]any)["upstream"].(string); ok {
				replicaUpstreams[d.GetNamespace()+"/"+up] = true
			}
		}
	}
	upstreams := map[string]bool{}
	for _, u := range ofKind(objs, "Upstream") {
		if k := u.GetNamespace() + "/" + u.GetName(); !replicaUpstreams[k] {
			upstreams[k] = true
		}
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

// chartValues are the chart values the suite and the walkthrough depend
// on, as the chart's values.yaml or the kind values set them.
type chartValues struct {
	Image struct {
		Repository, Tag, PullPolicy string
	} `json:"image"`
	ExtraArgs       []string `json:"extraArgs"`
	SpatialListener string   `json:"spatialListener"`
	Service         struct {
		XDSPort uint32 `json:"xdsPort"`
	} `json:"service"`
	TLS struct {
		Enabled    bool   `json:"enabled"`
		SecretName string `json:"secretName"`
		Generated  struct {
			CANamespaces []string `json:"caNamespaces"`
		} `json:"generated"`
	} `json:"tls"`
	XDS struct {
		Auth          string `json:"auth"`
		TokenAudience string `json:"tokenAudience"`
	} `json:"xds"`
}

func readValues(t testing.TB, path string) chartValues {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// chartDefaults are the chart's own values.yaml.
func chartDefaults(t testing.TB) chartValues {
	t.Helper()
	return readValues(t, filepath.Join(chartDir, "values.yaml"))
}

// caConfigMap is the ConfigMap holding the CA certificate of the chart's
// release "poise" (its full name, then "-ca"; test/chart checks the name
// against the chart's rendering), under the key caKey.
const (
	caConfigMap = "poise-ca"
	caKey       = "ca.crt"
)

// TestEnvoyCredentials: the walkthrough's Envoy connects as the chart's
// defaults require. The chart serves TLS with its own CA and checks tokens
// for xds.tokenAudience, and the kind values leave both on; Envoy dials over
// TLS trusting the CA of the ConfigMap the chart writes into its namespace
// (tls.generated.caNamespaces of the kind values), sends the projected token
// of its own ServiceAccount for that audience with the file_based_metadata
// call credentials, and claims in its node metadata the namespace and
// service account the token proves. Every path the bootstrap reads is a file
// of a volume the pod mounts.
func TestEnvoyCredentials(t *testing.T) {
	def, kind := chartDefaults(t), readValues(t, kindValues)
	if !def.TLS.Enabled || def.TLS.SecretName != "" || def.XDS.Auth != "token" || def.XDS.TokenAudience == "" {
		t.Fatalf("chart defaults: tls.enabled %v, tls.secretName %q, xds.auth %q, xds.tokenAudience %q; the walkthrough expects TLS with the chart's own CA and token authentication",
			def.TLS.Enabled, def.TLS.SecretName, def.XDS.Auth, def.XDS.TokenAudience)
	}
	raw, err := os.ReadFile(kindValues)
	if err != nil {
		t.Fatal(err)
	}
	var overrides struct {
		TLS map[string]any `json:"tls"`
		XDS map[string]any `json:"xds"`
	}
	if err := yaml.Unmarshal(raw, &overrides); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"enabled", "secretName", "clientCA"} {
		if _, set := overrides.TLS[k]; set {
			t.Errorf("%s sets tls.%s: the suite installs the chart's TLS defaults, as the walkthrough does", kindValues, k)
		}
	}
	for _, k := range []string{"auth", "tokenAudience"} {
		if _, set := overrides.XDS[k]; set {
			t.Errorf("%s sets xds.%s: the suite installs the chart's authentication defaults, as the walkthrough does", kindValues, k)
		}
	}

	b := envoyBootstrap(t)
	gs := b.GetDynamicResources().GetAdsConfig().GetGrpcServices()
	if len(gs) != 1 || gs[0].GetGoogleGrpc() == nil {
		t.Fatalf("ads_config: want one google_grpc service (Envoy's own gRPC client sends no call credentials), got %v", gs)
	}
	g := gs[0].GetGoogleGrpc()
	caFile := g.GetChannelCredentials().GetSslCredentials().GetRootCerts().GetFilename()
	if caFile == "" {
		t.Errorf("google_grpc channel_credentials: want ssl_credentials with root_certs from a file (the chart's CA), got %v", g.GetChannelCredentials())
	}
	if g.GetCredentialsFactoryName() != "envoy.grpc_credentials.file_based_metadata" {
		t.Errorf("google_grpc credentials_factory_name %q: without envoy.grpc_credentials.file_based_metadata Envoy ignores the from_plugin call credentials", g.GetCredentialsFactoryName())
	}
	var tokenFile string
	for _, cc := range g.GetCallCredentials() {
		p := cc.GetFromPlugin()
		if p.GetName() != "envoy.grpc_credentials.file_based_metadata" {
			continue
		}
		m, err := p.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		fb, ok := m.(*grpccredv3.FileBasedMetadataConfig)
		if !ok {
			t.Fatalf("file_based_metadata config is a %T", m)
		}
		if k := fb.GetHeaderKey(); k != "" && k != "authorization" {
			t.Errorf("file_based_metadata header_key %q, want authorization", k)
		}
		if fb.GetHeaderPrefix() != "Bearer " {
			t.Errorf("file_based_metadata header_prefix %q, want %q", fb.GetHeaderPrefix(), "Bearer ")
		}
		tokenFile = fb.GetSecretData().GetFilename()
	}
	if tokenFile == "" {
		t.Fatal("google_grpc sends no token: want call_credentials from_plugin envoy.grpc_credentials.file_based_metadata with secret_data from a file")
	}

	objs := kubemanifests.Read(t, shopDir)
	var dep *unstructured.Unstructured
	for _, d := range ofKind(objs, "Deployment") {
		if d.GetNamespace() == shopNS && d.GetName() == envoyService {
			dep = d
		}
	}
	if dep == nil {
		t.Fatalf("%s: no Deployment %s/%s", shopDir, shopNS, envoyService)
	}
	sa := nestedString(dep, "spec", "template", "spec", "serviceAccountName")
	found := false
	for _, o := range ofKind(objs, "ServiceAccount") {
		found = found || o.GetNamespace() == shopNS && o.GetName() == sa
	}
	if sa == "" || !found {
		t.Errorf("Envoy runs as ServiceAccount %q, which %s does not define: its token would prove the namespace's default account", sa, shopDir)
	}
	md := b.GetNode().GetMetadata().GetFields()
	if got := md["NAMESPACE"].GetStringValue(); got != dep.GetNamespace() {
		t.Errorf("Envoy's node metadata NAMESPACE %q, but it runs in %s: Poise would refuse the stream", got, dep.GetNamespace())
	}
	if got := md["SERVICE_ACCOUNT"].GetStringValue(); got != sa {
		t.Errorf("Envoy's node metadata SERVICE_ACCOUNT %q, but it runs as %q: Poise would refuse the stream", got, sa)
	}

	// Which volume, and which file of it, each path is.
	spec, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	volumes := map[string]map[string]any{}
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	for _, v := range vols {
		m := v.(map[string]any)
		volumes[m["name"].(string)] = m
	}
	var envoy map[string]any
	ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
	for _, c := range ctrs {
		if m := c.(map[string]any); m["name"] == "envoy" {
			envoy = m
		}
	}
	mounted := func(path string) (map[string]any, string) {
		mounts, _, _ := unstructured.NestedSlice(envoy, "volumeMounts")
		for _, mt := range mounts {
			m := mt.(map[string]any)
			dir, _ := m["mountPath"].(string)
			if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(dir, "/")+"/"); ok && !strings.Contains(rel, "/") {
				return volumes[m["name"].(string)], rel
			}
		}
		return nil, ""
	}

	caVol, caName := mounted(caFile)
	cm, _, _ := unstructured.NestedString(caVol, "configMap", "name")
	if caVol == nil || cm != caConfigMap || caName != caKey {
		t.Errorf("root_certs %s is not key %s of ConfigMap %s mounted in the Envoy container (volume %v, file %q)", caFile, caKey, caConfigMap, caVol, caName)
	}
	if !slices.Contains(kind.TLS.Generated.CANamespaces, dep.GetNamespace()) {
		t.Errorf("%s: tls.generated.caNamespaces %v lacks %s: the chart would not write ConfigMap %s there, and Envoy's pod would not start",
			kindValues, kind.TLS.Generated.CANamespaces, dep.GetNamespace(), caConfigMap)
	}

	tokVol, tokName := mounted(tokenFile)
	sources, _, _ := unstructured.NestedSlice(tokVol, "projected", "sources")
	var sat map[string]any
	for _, src := range sources {
		if m, ok := src.(map[string]any)["serviceAccountToken"].(map[string]any); ok && m["path"] == tokName {
			sat = m
		}
	}
	if sat == nil {
		t.Fatalf("the token file %s is no serviceAccountToken of a projected volume mounted in the Envoy container (volume %v)", tokenFile, tokVol)
	}
	if sat["audience"] != def.XDS.TokenAudience {
		t.Errorf("Envoy's token is for audience %v, the chart checks %q (xds.tokenAudience)", sat["audience"], def.XDS.TokenAudience)
	}
	if exp, ok := number(sat["expirationSeconds"]); !ok || exp < 600 {
		t.Errorf("Envoy's token expirationSeconds %v: the kubelet needs at least 600", sat["expirationSeconds"])
	}
}

// TestWalkthroughInstall: docs/helm.md installs the chart as the suite does:
// the namespaces of examples/kubernetes first, the CRD chart, then `helm install` with the
// chart's TLS and authentication defaults and the CA ConfigMap written into
// the namespaces of the kind values' tls.generated.caNamespaces.
func TestWalkthroughInstall(t *testing.T) {
	raw, err := os.ReadFile(root + "/docs/helm.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## 1. Install the control plane")
	end := strings.Index(doc, "## 2.")
	if start < 0 || end < start {
		t.Fatal("docs/helm.md has no section 1. Install the control plane")
	}
	section := doc[start:end]
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section)
	if block == nil {
		t.Fatal("docs/helm.md section 1 has no sh block")
	}
	cmds := strings.ReplaceAll(block[1], "\\\n", " ")
	ns := strings.Index(cmds, "kubectl apply -f examples/kubernetes/00-namespace.yaml")
	install := strings.Index(cmds, "helm install poise charts/poise")
	if ns < 0 || install < 0 || ns > install {
		t.Fatalf("docs/helm.md section 1 does not apply 00-namespace.yaml before `helm install poise charts/poise`:\n%s", cmds)
	}
	if crds := strings.Index(cmds, "helm install poise-crds charts/poise-crds"); crds < 0 || crds > install {
		t.Fatalf("docs/helm.md section 1 does not install the CRD chart before `helm install poise charts/poise`, as the suite does:\n%s", cmds)
	}
	line := cmds[install:]
	line = line[:strings.IndexByte(line, '\n')]
	for _, forbidden := range []string{"xds.auth", "tls.enabled", "tls.secretName"} {
		if strings.Contains(line, forbidden) {
			t.Errorf("the walkthrough's install sets %s: it must run on the chart's defaults, as the kind suite does\n%s", forbidden, line)
		}
	}
	m := regexp.MustCompile(`tls\.generated\.caNamespaces=\{([^}]*)\}`).FindStringSubmatch(line)
	var got []string
	if m != nil {
		got = strings.Split(m[1], ",")
	}
	if want := readValues(t, kindValues).TLS.Generated.CANamespaces; !slices.Equal(got, want) {
		t.Errorf("the walkthrough's install writes the CA into %v, the kind suite's values into %v\n%s", got, want, line)
	}
}

// TestKindValues: the chart values of the suite use the image it loads into
// the nodes, never pulled from a registry.
func TestKindValues(t *testing.T) {
	v := readValues(t, kindValues)
	if v.Image.PullPolicy != "Never" {
		t.Errorf("%s: image.pullPolicy %q, want Never (the image is loaded with kind load docker-image)", kindValues, v.Image.PullPolicy)
	}
	if got := v.Image.Repository + ":" + v.Image.Tag; got != defaultImage {
		t.Errorf("%s: image %s, want %s (what the suite builds)", kindValues, got, defaultImage)
	}
	if want := "--admin-address=0.0.0.0:19000"; !slices.Contains(v.ExtraArgs, want) {
		t.Errorf("%s: extraArgs %v lack %s: the suite reads the debug endpoints through the pod proxy", kindValues, v.ExtraArgs, want)
	}
}

// defaultImage is the image the suite builds with `make image` and loads.
const defaultImage = "poise.local/poise:e2e"

// ---- spatial routing (examples/kubernetes/50-spatial.yaml) ----

// The spatial phase of the suite: where the objects are, how Envoy's spatial
// listener is reached, and the requests the suite sends with what each must
// get. The kind suite compares every answer of Envoy with the control plane's
// /debug/explain-route, and explain-route with these expectations;
// TestSpatialCases checks the expectations here, without Docker, against the
// Go reference (partitionmap.Decide) on the manifests.
const (
	shopNS        = "shop" // the echo backends and Envoy
	spatialNS     = "geo"
	spatialDomain = "cadastre"
	// envoySpatialPort names Envoy's container port and its Service's port
	// for the spatial listener; the suite sends requests to Service
	// shop/envoy port spatial through the API server's service proxy.
	envoyService     = "envoy"
	envoySpatialPort = "spatial"
	// spatialDown is the replica the suite scales to 0 for the second half.
	spatialDown = "eu-central"
)

// spatialDeployment is the Deployment of a replica's echo backend; its pods
// answer "replica=NAME pod=POD node=NODE".
func spatialDeployment(replica string) string { return "cadastre-" + replica }

// spatialCase is one request through Envoy's spatial listener and what it
// gets: a refusal (status and x-spatial-reason), or a 200 from the replica
// locality chooses, or from one of the replicas of the product's pool.
type spatialCase struct {
	name    string
	domain  string // x-spatial-domain; "" is spatialDomain
	product string // the product whose route the path takes
	path    string
	bbox    string            // x-spatial-bbox; "" sends none
	query   string            // the raw query of the request, e.g. bbox=...
	header  map[string]string // more request headers

	status  int
	reason  string
	replica string   // a 200 by locality: the replica that answers
	pool    []string // a 200 from the pool: the replicas that may answer (name order)
}

func (c spatialCase) domainName() string {
	if c.domain == "" {
		return spatialDomain
	}
	return c.domain
}

// describe is the request as a person would send it with curl.
func (c spatialCase) describe() string {
	target := c.path
	if c.query != "" {
		target += "?" + c.query
	}
	out := fmt.Sprintf("GET %s with x-spatial-domain: %s", target, c.domainName())
	if c.bbox != "" {
		out += ", x-spatial-bbox: " + c.bbox
	}
	for _, k := range slices.Sorted(maps.Keys(c.header)) {
		out += ", " + k + ": " + c.header[k]
	}
	return out
}

// want is what the case expects, in the words of explain-route.
func (c spatialCase) want() string {
	switch {
	case c.status != 200:
		return fmt.Sprintf("%d %s", c.status, c.reason)
	case c.replica != "":
		return fmt.Sprintf("200 %s → replica %s", c.reason, c.replica)
	default:
		return fmt.Sprintf("200 %s → pool of %s", c.reason, strings.Join(c.pool, ", "))
	}
}

const (
	boxGermany     = "8,48,9,49"     // partitions france (eu-west, eu-central) and germany (eu-central)
	boxNewEngland  = "-72,42,-71,43" // partition new-england (us-east only)
	boxOntario     = "-80,45,-79,46" // no partition
	bboxNotDecimal = "0x8,48,9,49"
	unknownDomain  = "atlantis"
)

// spatialProbe is refused whatever the health (its product has no lawful
// replica), so its x-spatial-version says which data version Envoy's Lua
// carries: the suite waits until it equals explain-route's.
var spatialProbe = spatialCase{name: "probe", product: "mining-claims", path: "/collections/mining-claims/items", bbox: boxOntario,
	status: 451, reason: "residency"}

// spatialUp: every replica has a ready pod.
var spatialUp = []spatialCase{
	{name: "parcels-germany", product: "parcels", path: "/collections/parcels/items", bbox: boxGermany,
		status: 200, reason: "locality", replica: "eu-central"},
	// Residency wins over locality: parcels may not be read in us-east, the
	// only holder of New England; the EU pool answers.
	{name: "parcels-new-england", product: "parcels", path: "/collections/parcels/items", bbox: boxNewEngland,
		status: 200, reason: "no_partition", pool: []string{"eu-central", "eu-west"}},
	// The box in the query string instead of the header.
	{name: "buildings-new-england-query", product: "buildings", path: "/collections/buildings/items", query: "bbox=" + boxNewEngland,
		status: 200, reason: "locality", replica: "us-east"},
	{name: "surveys-germany", product: "surveys", path: "/collections/surveys/items", bbox: boxGermany,
		status: 200, reason: "locality", replica: "eu-central"},
	spatialProbe,
	{name: "bad-bbox", product: "parcels", path: "/collections/parcels/items", bbox: bboxNotDecimal,
		status: 400, reason: "bad_bbox:number"},
	{name: "unknown-domain", domain: unknownDomain, product: "parcels", path: "/collections/parcels/items", bbox: boxGermany,
		status: 404, reason: "unknown_domain"},
	// A client cannot pick the cluster: Envoy strips x-spatial-cluster and
	// the Lua sets its own.
	{name: "client-cluster-header-ignored", product: "parcels", path: "/collections/parcels/items", bbox: boxGermany,
		header: map[string]string{"x-spatial-cluster": "spatial:geo:cadastre:us-east"},
		status: 200, reason: "locality", replica: "eu-central"},
	{name: "client-cluster-header-pool", product: "parcels", path: "/collections/parcels/items", bbox: boxNewEngland,
		header: map[string]string{"x-spatial-cluster": "spatial:geo:cadastre:us-east"},
		status: 200, reason: "no_partition", pool: []string{"eu-central", "eu-west"}},
}

// spatialAfterDown: spatialDown is scaled to 0, its EndpointSlice is empty and
// its Upstream has no capacity (panicMode FailClosed).
var spatialAfterDown = []spatialCase{
	{name: "parcels-germany", product: "parcels", path: "/collections/parcels/items", bbox: boxGermany,
		status: 200, reason: "locality", replica: "eu-west"},
	{name: "parcels-new-england", product: "parcels", path: "/collections/parcels/items", bbox: boxNewEngland,
		status: 200, reason: "no_partition", pool: []string{"eu-west"}},
	{name: "surveys-germany", product: "surveys", path: "/collections/surveys/items", bbox: boxGermany,
		status: 503, reason: "unhealthy"},
	spatialProbe,
	{name: "client-cluster-header-down-replica", product: "parcels", path: "/collections/parcels/items", bbox: boxGermany,
		header: map[string]string{"x-spatial-cluster": "spatial:geo:cadastre:" + spatialDown},
		status: 200, reason: "locality", replica: "eu-west"},
}

// spatialObjects are the spatial objects of the walkthrough, typed.
type spatialObjects struct {
	all        []*unstructured.Unstructured
	domain     v1alpha1.SpatialDomain
	partitions []v1alpha1.Partition
}

func readSpatial(t *testing.T) spatialObjects {
	t.Helper()
	objs := kubemanifests.Read(t, shopDir)
	out := spatialObjects{all: objs}
	var domains []string
	for _, u := range ofKind(objs, "SpatialDomain") {
		domains = append(domains, u.GetNamespace()+"/"+u.GetName())
		if u.GetNamespace() == spatialNS && u.GetName() == spatialDomain {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out.domain, true); err != nil {
				t.Fatalf("SpatialDomain %s/%s: %v", spatialNS, spatialDomain, err)
			}
		}
	}
	if !slices.Equal(domains, []string{spatialNS + "/" + spatialDomain}) {
		t.Fatalf("%s has SpatialDomains %v; the kind suite expects exactly %s/%s", shopDir, domains, spatialNS, spatialDomain)
	}
	for _, u := range ofKind(objs, "Partition") {
		var p v1alpha1.Partition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &p, true); err != nil {
			t.Fatalf("Partition %s/%s: %v", u.GetNamespace(), u.GetName(), err)
		}
		out.partitions = append(out.partitions, p)
	}
	return out
}

// spatialMap builds the domain's partition map as the control plane does:
// the same conversion (with the CRD defaults) and partitionmap.Build.
func spatialMap(t *testing.T, so spatialObjects) *partitionmap.Map {
	t.Helper()
	d, errs := convert.SpatialDomain(&so.domain)
	if len(errs) > 0 {
		t.Fatalf("SpatialDomain %s/%s is invalid: %v", spatialNS, spatialDomain, errs.ToAggregate())
	}
	var parts []partitionmap.Partition
	for i := range so.partitions {
		p, errs := convert.Partition(&so.partitions[i])
		if len(errs) > 0 {
			t.Fatalf("Partition %s/%s is invalid: %v", so.partitions[i].Namespace, so.partitions[i].Name, errs.ToAggregate())
		}
		parts = append(parts, partitionmap.Partition{Name: p.Key.Name, Extent: p.Extent, Replicas: p.Replicas})
	}
	m, problems, err := partitionmap.Build(d.Domain, parts)
	if err != nil {
		t.Fatalf("SpatialDomain %s/%s: %v", spatialNS, spatialDomain, err)
	}
	for _, p := range problems {
		// A product with no lawful replica is the 451 case; anything else
		// (a partition left out) would change the map the suite expects.
		if p.Reason != partitionmap.ProblemNoLawfulReplica {
			t.Errorf("SpatialDomain %s/%s: %v", spatialNS, spatialDomain, p)
		}
	}
	return m
}

// TestSpatialManifests: every replica of the walkthrough's SpatialDomain is
// an Upstream in its namespace that imports a Service of the walkthrough
// (panicMode FailClosed, so a replica scaled to 0 drops out), the Service
// selects exactly one Deployment — the one the suite scales — whose pods
// answer with the replica's name on the Service's target port, and every
// Partition belongs to the domain and names its replicas.
func TestSpatialManifests(t *testing.T) {
	so := readSpatial(t)
	d := so.domain
	byName := func(kind, ns, name string) *unstructured.Unstructured {
		for _, u := range ofKind(so.all, kind) {
			if u.GetNamespace() == ns && u.GetName() == name {
				return u
			}
		}
		return nil
	}
	replicas := map[string]bool{}
	for _, r := range d.Spec.Replicas {
		replicas[r.Name] = true
		up := byName("Upstream", d.Namespace, r.Upstream)
		if up == nil {
			t.Errorf("replica %s names Upstream %s/%s, which %s does not define (the replica would have no capacity: UpstreamNotFound)",
				r.Name, d.Namespace, r.Upstream, shopDir)
			continue
		}
		if pm := nestedString(up, "spec", "panicMode"); pm != string(v1alpha1.PanicModeFailClosed) {
			t.Errorf("Upstream %s/%s: panicMode %q, want FailClosed: under UseAll a replica whose pods are gone still "+
				"routes in panic, and the suite's scale-down would not move its requests", d.Namespace, r.Upstream, pm)
		}
		svcName := nestedString(up, "spec", "endpointsFrom", "service", "name")
		svcPort := nestedString(up, "spec", "endpointsFrom", "service", "port")
		svc := byName("Service", d.Namespace, svcName)
		if svcName == "" || svc == nil {
			t.Errorf("Upstream %s/%s imports Service %q, which %s does not define in %s", d.Namespace, r.Upstream, svcName, shopDir, d.Namespace)
			continue
		}
		var targetPort any
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		for _, p := range ports {
			if m := p.(map[string]any); m["name"] == svcPort {
				targetPort = m["targetPort"]
			}
		}
		if targetPort == nil {
			t.Errorf("Upstream %s/%s imports port %q of Service %s, which has no such port (or no targetPort)", d.Namespace, r.Upstream, svcPort, svcName)
			continue
		}
		selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		if len(selector) == 0 {
			t.Errorf("Service %s/%s has no selector: its EndpointSlices would be empty", d.Namespace, svcName)
			continue
		}
		var selected []*unstructured.Unstructured
		for _, dep := range ofKind(so.all, "Deployment") {
			labels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
			match := dep.GetNamespace() == d.Namespace
			for k, v := range selector {
				match = match && labels[k] == v
			}
			if match {
				selected = append(selected, dep)
			}
		}
		if len(selected) != 1 || selected[0].GetName() != spatialDeployment(r.Name) {
			var names []string
			for _, dep := range selected {
				names = append(names, dep.GetName())
			}
			t.Errorf("Service %s/%s (replica %s) selects the pods of Deployments %v, want exactly %s (the one the suite scales)",
				d.Namespace, svcName, r.Name, names, spatialDeployment(r.Name))
			continue
		}
		dep := selected[0]
		replicas, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas")
		if n, ok := number(replicas); !ok || n < 1 {
			t.Errorf("Deployment %s/%s: replicas %d, want at least 1 (the suite starts with every replica up)", d.Namespace, dep.GetName(), n)
		}
		ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
		if len(ctrs) != 1 {
			t.Errorf("Deployment %s/%s has %d containers, want the one echo container", d.Namespace, dep.GetName(), len(ctrs))
			continue
		}
		c := ctrs[0].(map[string]any)
		env := map[string]string{}
		list, _, _ := unstructured.NestedSlice(c, "env")
		for _, e := range list {
			m := e.(map[string]any)
			if v, ok := m["value"].(string); ok {
				env[m["name"].(string)] = v
			}
		}
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if env["REPLICA"] != r.Name || !slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "-text=replica=$(REPLICA) pod=$(POD_NAME)")
		}) {
			t.Errorf("Deployment %s/%s: its pods must answer \"replica=%s pod=...\" (args %v, REPLICA=%q): the suite tells who served by it",
				d.Namespace, dep.GetName(), r.Name, args, env["REPLICA"])
		}
		cports, _, _ := unstructured.NestedSlice(c, "ports")
		portOK := false
		for _, p := range cports {
			m := p.(map[string]any)
			portOK = portOK || m["name"] == targetPort || fmt.Sprint(m["containerPort"]) == fmt.Sprint(targetPort)
		}
		if !portOK {
			t.Errorf("Service %s/%s port %s targets %v, which no container port of Deployment %s declares",
				d.Namespace, svcName, svcPort, targetPort, dep.GetName())
		}
	}
	if !replicas[spatialDown] {
		t.Errorf("the suite scales replica %s to 0, which SpatialDomain %s/%s does not have", spatialDown, d.Namespace, d.Name)
	}
	if len(so.partitions) == 0 {
		t.Errorf("%s has no Partition: locality would never apply", shopDir)
	}
	for _, p := range so.partitions {
		if p.Namespace != d.Namespace || p.Spec.Domain != d.Name {
			t.Errorf("Partition %s/%s belongs to domain %s/%s, not to %s/%s", p.Namespace, p.Name, p.Namespace, p.Spec.Domain, d.Namespace, d.Name)
		}
		for _, r := range p.Spec.Replicas {
			if !replicas[r] {
				t.Errorf("Partition %s/%s names replica %s, which SpatialDomain %s does not have (it would be left out: UnknownReplica)",
					p.Namespace, p.Name, r, d.Name)
			}
		}
	}
}

// TestSpatialCases: what the suite expects of each request is what the Go
// reference decides on the walkthrough's map — with every replica healthy,
// then with spatialDown unhealthy — and each path takes its product's route
// (the longest matching path prefix, as Envoy's RDS orders them).
func TestSpatialCases(t *testing.T) {
	so := readSpatial(t)
	m := spatialMap(t, so)
	health := func(down string) []bool {
		var h []bool
		for _, r := range m.Replicas() {
			h = append(h, r.Name != down)
		}
		return h
	}
	check := func(t *testing.T, c spatialCase, health []bool) {
		if c.domainName() != spatialDomain {
			if c.domainName() == so.domain.Name {
				t.Errorf("%s: domain %s exists", c.name, c.domainName())
			}
			if c.status != 404 || c.reason != "unknown_domain" {
				t.Errorf("%s: a domain that does not exist gets 404 unknown_domain (the last VirtualHost), not %s", c.name, c.want())
			}
			return
		}
		route, longest := "", -1
		for _, p := range m.Domain().Products {
			if strings.HasPrefix(c.path, p.PathPrefix) && len(p.PathPrefix) > longest {
				route, longest = p.Name, len(p.PathPrefix)
			}
		}
		if route != c.product {
			t.Errorf("%s: path %s takes the route of product %q, not %q", c.name, c.path, route, c.product)
		}
		path := c.path
		if c.query != "" {
			path += "?" + c.query
		}
		dec := m.Decide(partitionmap.Request{Product: c.product, BBox: c.bbox, Path: path}, health, nil)
		var pool []string
		if dec.Pool {
			for _, r := range m.Lawful(c.product) {
				if health[m.ReplicaIndex(r)] {
					pool = append(pool, r)
				}
			}
		}
		if dec.Status != c.status || dec.Reason != c.reason || dec.Replica != c.replica || !slices.Equal(pool, c.pool) {
			got := spatialCase{status: dec.Status, reason: dec.Reason, replica: dec.Replica, pool: pool}
			t.Errorf("%s: %s: the Go reference decides %s on %s, the kind suite expects %s",
				c.name, c.describe(), got.want(), shopDir, c.want())
		}
	}
	t.Run("up", func(t *testing.T) {
		for _, c := range spatialUp {
			check(t, c, health(""))
		}
	})
	t.Run(spatialDown+"-down", func(t *testing.T) {
		for _, c := range spatialAfterDown {
			check(t, c, health(spatialDown))
		}
	})
	// The probe is refused whatever the health, so its x-spatial-version is
	// always there to read.
	for _, r := range m.Replicas() {
		t.Run("probe/"+r.Name+"-down", func(t *testing.T) { check(t, spatialProbe, health(r.Name)) })
	}
}

// spatialListenerPort is the port the suite's control plane tells Envoys to
// bind the spatial listener to: --spatial-listener, which the chart passes
// from its spatialListener value (the kind values may override it, or add the
// flag to extraArgs, where the last one wins); the control plane's own
// default when nothing sets it.
func spatialListenerPort(t *testing.T) (uint32, string) {
	t.Helper()
	chart, kind := chartDefaults(t), readValues(t, kindValues)
	addr, from := chart.SpatialListener, filepath.Join(chartDir, "values.yaml")+" spatialListener"
	if addr != "" {
		// The chart passes the value: its golden rendering (test/chart) shows it.
		golden, err := os.ReadFile(root + "/test/chart/testdata/default.golden.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(golden), "--spatial-listener="+addr+"\n") {
			t.Errorf("the chart's default rendering (test/chart/testdata/default.golden.yaml) does not pass --spatial-listener=%s", addr)
		}
	}
	if kind.SpatialListener != "" {
		addr, from = kind.SpatialListener, kindValues+" spatialListener"
	}
	for _, a := range kind.ExtraArgs {
		if v, ok := strings.CutPrefix(a, "--spatial-listener="); ok {
			addr, from = v, kindValues+" extraArgs"
		}
	}
	if addr == "" {
		return translate.DefaultSpatialPort, "the control plane's default"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", from, addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		t.Fatalf("%s %q: port %q", from, addr, port)
	}
	return uint32(p), from
}

// TestEnvoySpatialListener: the walkthrough's Envoy exposes the port the
// control plane binds its spatial listener to — as container port
// envoySpatialPort and as the port of the same name of Service shop/envoy,
// which the suite and docs/helm.md send spatial requests to — and the static
// listener stays on a port of its own.
func TestEnvoySpatialListener(t *testing.T) {
	want, from := spatialListenerPort(t)
	if from == filepath.Join(chartDir, "values.yaml")+" spatialListener" && want != translate.DefaultSpatialPort {
		t.Logf("note: the chart's default spatial port %d differs from the control plane's own default %d", want, translate.DefaultSpatialPort)
	}
	objs := kubemanifests.Read(t, shopDir)
	var (
		ctrPorts   map[string]int64
		envoyImage string
	)
	for _, d := range ofKind(objs, "Deployment") {
		if d.GetNamespace() != shopNS || d.GetName() != envoyService {
			continue
		}
		ctrs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, c := range ctrs {
			if c.(map[string]any)["name"] != "envoy" {
				continue
			}
			ctrPorts = map[string]int64{}
			envoyImage, _ = c.(map[string]any)["image"].(string)
			ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
			for _, p := range ports {
				m := p.(map[string]any)
				n, _ := number(m["containerPort"])
				name, _ := m["name"].(string)
				ctrPorts[name] = n
			}
		}
	}
	if ctrPorts == nil {
		t.Fatalf("%s: no Deployment %s/%s with a container envoy", shopDir, shopNS, envoyService)
	}
	// The spatial routes choose their VirtualHost by vhost_header, which an
	// Envoy older than 1.36 ignores (docs/spatial.md, Limits).
	if ok, why := envoyAtLeast(envoyImage, 1, 36); !ok {
		t.Errorf("Envoy image %s: %s; spatial routing needs Envoy 1.36 or later (vhost_header)", envoyImage, why)
	}
	if got, ok := ctrPorts[envoySpatialPort]; !ok || got != int64(want) {
		t.Errorf("Envoy's container port %q is %d (declared: %v), want %d, where the control plane binds the spatial listener (%s)",
			envoySpatialPort, got, ok, want, from)
	}

	var svcPort map[string]any
	for _, s := range ofKind(objs, "Service") {
		if s.GetNamespace() != shopNS || s.GetName() != envoyService {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
		for _, p := range ports {
			if m := p.(map[string]any); m["name"] == envoySpatialPort {
				svcPort = m
			}
		}
	}
	if svcPort == nil {
		t.Fatalf("Service %s/%s has no port named %q: the suite and docs/helm.md reach the spatial listener through it", shopNS, envoyService, envoySpatialPort)
	}
	if tp := svcPort["targetPort"]; tp != envoySpatialPort && fmt.Sprint(tp) != fmt.Sprint(want) {
		t.Errorf("Service %s/%s port %s targets %v, want the container port %s (%d)", shopNS, envoyService, envoySpatialPort, tp, envoySpatialPort, want)
	}
	if p := svcPort["protocol"]; p != nil && p != "TCP" {
		t.Errorf("Service %s/%s port %s: protocol %v, want TCP", shopNS, envoyService, envoySpatialPort, p)
	}

	// The static listener keeps its own port, the container port http.
	for _, l := range envoyBootstrap(t).GetStaticResources().GetListeners() {
		port := l.GetAddress().GetSocketAddress().GetPortValue()
		if port == want {
			t.Errorf("static listener %s binds %d, the spatial listener's port: Envoy would refuse the LDS listener", l.GetName(), port)
		}
		if int64(port) != ctrPorts["http"] {
			t.Errorf("static listener %s binds %d, but Envoy's container port http (the Service's port 80, the readiness probe) is %d",
				l.GetName(), port, ctrPorts["http"])
		}
	}
}

// TestSpatialDocs: the data version docs/helm.md shows for the walkthrough
// (in x-spatial-version and explain-route) is the one its map has.
func TestSpatialDocs(t *testing.T) {
	m := spatialMap(t, readSpatial(t))
	raw, err := os.ReadFile(root + "/docs/helm.md")
	if err != nil {
		t.Fatal(err)
	}
	up := make([]bool, len(m.Replicas()))
	for i := range up {
		up[i] = true
	}
	if want := m.DataVersion(up); !strings.Contains(string(raw), want) {
		t.Errorf("docs/helm.md does not show the walkthrough's data version %s (map version %s, every replica healthy): update its spatial section",
			want, m.Version())
	}
	for _, v := range regexp.MustCompile(`\b[0-9a-f]{16}-h[01]+\b`).FindAllString(string(raw), -1) {
		if !strings.HasPrefix(v, m.Version()+"-h") || len(v) != len(m.Version())+2+len(up) {
			t.Errorf("docs/helm.md shows data version %s, but the walkthrough's map version is %s with %d replicas", v, m.Version(), len(up))
		}
	}
}

// envoyAtLeast reads an Envoy image tag vMAJOR.MINOR[.PATCH][-suffix] and
// reports whether it is at least major.minor.
func envoyAtLeast(image string, major, minor int) (bool, string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return false, "no tag to read the version from"
	}
	v, _, _ := strings.Cut(strings.TrimPrefix(image[i+1:], "v"), "-")
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return false, fmt.Sprintf("tag %q is not vMAJOR.MINOR", image[i+1:])
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false, fmt.Sprintf("tag %q is not vMAJOR.MINOR", image[i+1:])
	}
	if ma > major || ma == major && mi >= minor {
		return true, ""
	}
	return false, fmt.Sprintf("version %d.%d", ma, mi)
}
