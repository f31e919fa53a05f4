package chart_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	grpccredv3 "github.com/envoyproxy/go-control-plane/envoy/config/grpc_credential/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	// the types the walkthrough's Envoy bootstrap names
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/kubemanifests"
	"poise.dev/poise/test/testkit"
)

// The walkthrough of docs/helm.md, short of a kubelet: the chart installed
// with its defaults (and the CA ConfigMap in shop) runs as a real
// `controlplane serve` with the arguments of the installed Deployment, the
// Secret it mounts and the release's ServiceAccount's permissions; the
// walkthrough's Envoy is a pod made from examples/kubernetes/40-envoy.yaml,
// whose token the apiserver mints as the kubelet would for its projected
// volume, and whose ADS stream a grpc-go client opens exactly as the
// bootstrap says: to its target over TLS, trusting the CA of the mounted
// ConfigMap and checking the target's name, with the token in the bootstrap's
// header and the node metadata of the bootstrap.

// envoyBootstrap is the bootstrap of the walkthrough's Envoy, decoded by
// Envoy's own protos (test/kind validates it field by field).
func envoyBootstrap(t *testing.T, objs []*unstructured.Unstructured) *bootstrapv3.Bootstrap {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "ConfigMap" {
			continue
		}
		raw, _, _ := unstructured.NestedString(u.Object, "data", "envoy.yaml")
		if raw == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		b := &bootstrapv3.Bootstrap{}
		if err := protojson.Unmarshal(js, b); err != nil {
			t.Fatalf("envoy.yaml: %v", err)
		}
		return b
	}
	t.Fatalf("%s: no ConfigMap with envoy.yaml", shopDir)
	return nil
}

// envoyTokenFile is what the bootstrap sends as call credentials: the file
// the file_based_metadata plugin reads, and the prefix it puts before it.
func envoyTokenFile(t *testing.T, b *bootstrapv3.Bootstrap) (file, prefix string) {
	t.Helper()
	for _, cc := range b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetGoogleGrpc().GetCallCredentials() {
		m, err := cc.GetFromPlugin().GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if fb, ok := m.(*grpccredv3.FileBasedMetadataConfig); ok {
			return fb.GetSecretData().GetFilename(), fb.GetHeaderPrefix()
		}
	}
	t.Fatal("the bootstrap sends no file_based_metadata call credentials")
	return "", ""
}

// podVolumeFile finds which volume of the pod a container path is a file of:
// the volume and the file's name in it.
func podVolumeFile(t *testing.T, pod *unstructured.Unstructured, path string) (map[string]any, string) {
	t.Helper()
	ctrs, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	vols, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
	for _, c := range ctrs {
		mounts, _, _ := unstructured.NestedSlice(c.(map[string]any), "volumeMounts")
		for _, m := range mounts {
			mm := m.(map[string]any)
			rel, ok := strings.CutPrefix(path, strings.TrimSuffix(mm["mountPath"].(string), "/")+"/")
			if !ok {
				continue
			}
			for _, v := range vols {
				if vm := v.(map[string]any); vm["name"] == mm["name"] {
					return vm, rel
				}
			}
		}
	}
	t.Fatalf("%s is in no volume the Envoy pod mounts", path)
	return nil, ""
}

// bearerFile sends what the file_based_metadata plugin sends: the prefix
// and the token, as authorization; grpc-go, like Envoy's Google gRPC client,
// refuses to send it without transport security.
type bearerFile struct{ prefix, token string }

func (b bearerFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.prefix + b.token}, nil
}

func (bearerFile) RequireTransportSecurity() bool { return true }

// servingArgs are the installed Deployment's arguments with the addresses
// moved to free loopback ports, the TLS files to dir, and the kubeconfig
// added; every other flag is the chart's.
func servingArgs(t *testing.T, deployArgs []string, secret map[string][]byte, dir, kubeconfig string) (args []string, xds, admin, metrics string) {
	t.Helper()
	xds, admin, metrics = cpbinary.FreeAddr(t), cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	moved := map[string]string{"--xds-address": xds, "--admin-address": admin, "--metrics-address": metrics}
	for _, a := range deployArgs {
		flag, value, _ := strings.Cut(a, "=")
		switch {
		case moved[flag] != "":
			a = flag + "=" + moved[flag]
		case flag == "--tls-cert" || flag == "--tls-key" || flag == "--tls-client-ca":
			path := filepath.Join(dir, filepath.Base(value))
			if err := os.WriteFile(path, secret[filepath.Base(value)], 0o600); err != nil {
				t.Fatal(err)
			}
			a = flag + "=" + path
		}
		args = append(args, a)
	}
	return append(args, "--kubeconfig="+kubeconfig), xds, admin, metrics
}

// checkWalkthroughEnvoy: see the comment at the top of this file. Also: the
// same stream without the token is refused, and a client that checks
// another name than the Service's does not get through the handshake.
func checkWalkthroughEnvoy(t *testing.T, srv *apiServer, c renderCase) {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(srv.cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := fullname(c.release)

	// The walkthrough's objects, for real this time.
	objs := kubemanifests.Read(t, shopDir)
	for _, u := range objs {
		if err := srv.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s: %v", describe(u), err)
		}
	}

	// The replica: the installed Deployment's arguments, its Secret's files,
	// its ServiceAccount's permissions.
	var dep unstructured.Unstructured
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := srv.c.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, &dep); err != nil {
		t.Fatal(err)
	}
	ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	deployArgs, _, _ := unstructured.NestedStringSlice(ctrs[0].(map[string]any), "args")
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	var secretName string
	for _, v := range vols {
		if s, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
			secretName = s
		}
	}
	var secret corev1.Secret
	if err := srv.c.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: secretName}, &secret); err != nil {
		t.Fatalf("the Secret the replicas mount (%q): %v", secretName, err)
	}
	sa := releaseServiceAccount(t, srv, c)
	dir := t.TempDir()
	kc, err := sa.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	args, xdsAddr, adminAddr, metricsAddr := servingArgs(t, deployArgs, secret.Data, dir, kubeconfig)
	for _, want := range []string{"--xds-auth=token", "--tls-cert=" + filepath.Join(dir, "tls.crt")} {
		if !slices.Contains(args, want) {
			t.Fatalf("the installed Deployment's arguments %v lack %s", deployArgs, want)
		}
	}
	start := time.Now()
	bin := cpbinary.Build(t)
	t.Logf("controlplane built in %v", time.Since(start).Round(time.Millisecond))
	plane := cpbinary.Start(t, bin, args...)
	start = time.Now()
	testkit.EventuallyEvery(t, 60*time.Second, 100*time.Millisecond, "the replica ready", func() (bool, string) {
		if plane.Exited() {
			t.Fatalf("controlplane exited:\n%s", plane.Logs())
		}
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(body)
	})
	t.Logf("replica ready in %v with the chart's arguments: %s", time.Since(start).Round(time.Millisecond), strings.Join(args, " "))

	// The Envoy pod: the Deployment's pod template, placed on a node (no
	// scheduler here).
	var envoyDep *unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "Deployment" && u.GetNamespace() == shopNS && u.GetName() == "envoy" {
			envoyDep = u
		}
	}
	if envoyDep == nil {
		t.Fatalf("%s: no Deployment %s/envoy", shopDir, shopNS)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-eu-west-1a",
		Labels: map[string]string{"topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a"}}}
	if err := srv.c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	tmpl, _, _ := unstructured.NestedMap(envoyDep.Object, "spec", "template")
	pod := &unstructured.Unstructured{Object: tmpl}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetNamespace(shopNS)
	pod.SetName("envoy-7d9f8b6c5-x2k4p")
	if err := unstructured.SetNestedField(pod.Object, node.Name, "spec", "nodeName"); err != nil {
		t.Fatal(err)
	}
	if err := srv.c.Create(ctx, pod); err != nil {
		t.Fatalf("the Envoy pod of %s: %v", shopDir, err)
	}

	// Its bootstrap, and the files it reads: the CA from the ConfigMap the
	// chart wrote into shop, the token the kubelet would mint for the
	// projected volume.
	b := envoyBootstrap(t, objs)
	g := b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetGoogleGrpc()
	caVol, caKey := podVolumeFile(t, pod, g.GetChannelCredentials().GetSslCredentials().GetRootCerts().GetFilename())
	cmName, _, _ := unstructured.NestedString(caVol, "configMap", "name")
	if want := name + "-ca"; cmName != want {
		t.Errorf("Envoy trusts ConfigMap %q, the chart publishes its CA as %q", cmName, want)
	}
	var cm corev1.ConfigMap
	if err := srv.c.Get(ctx, client.ObjectKey{Namespace: shopNS, Name: cmName}, &cm); err != nil {
		t.Fatalf("Envoy's CA ConfigMap %s/%s: %v (the chart writes it there with tls.generated.caNamespaces)", shopNS, cmName, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(cm.Data[caKey])) {
		t.Fatalf("ConfigMap %s/%s key %s holds no certificate", shopNS, cmName, caKey)
	}
	tokenPath, prefix := envoyTokenFile(t, b)
	tokVol, tokName := podVolumeFile(t, pod, tokenPath)
	sources, _, _ := unstructured.NestedSlice(tokVol, "projected", "sources")
	var audience string
	var expiration int64
	for _, s := range sources {
		if m, ok := s.(map[string]any)["serviceAccountToken"].(map[string]any); ok && m["path"] == tokName {
			audience, _ = m["audience"].(string)
			expiration, _ = m["expirationSeconds"].(int64)
		}
	}
	if audience == "" || expiration < 600 {
		t.Fatalf("the token file %s is no projected serviceAccountToken with an audience and expirationSeconds ≥ 600 (volume %v)", tokenPath, tokVol)
	}
	saName, _, _ := unstructured.NestedString(pod.Object, "spec", "serviceAccountName")
	tr, err := cs.CoreV1().ServiceAccounts(shopNS).CreateToken(ctx, saName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &expiration,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.GetName(), UID: types.UID(pod.GetUID())},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the token of %s/%s for audience %q: %v", shopNS, saName, audience, err)
	}

	host, _, err := net.SplitHostPort(g.GetTargetUri())
	if err != nil {
		t.Fatalf("target_uri %q: %v", g.GetTargetUri(), err)
	}
	dial := func(serverName string, creds ...grpc.DialOption) *grpc.ClientConn {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: serverName}))}, creds...)
		conn, err := grpc.NewClient(xdsAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	nodeMsg := b.GetNode()
	nodeMsg.Id = pod.GetName() // --service-node=$(POD_NAME)
	// cds opens an ADS stream, asks for every cluster and returns the first
	// response; the stream stays open for the rest of the test.
	cds := func(conn *grpc.ClientConn) (*discoveryv3.DiscoveryResponse, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		t.Cleanup(cancel)
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(cctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: nodeMsg, TypeUrl: resource.ClusterType}); err != nil {
			_, err = stream.Recv()
			return nil, err
		}
		return stream.Recv()
	}

	resp, err := cds(dial(host, grpc.WithPerRPCCredentials(bearerFile{prefix: prefix, token: tr.Status.Token})))
	if err != nil {
		t.Fatalf("the walkthrough's Envoy (TLS to %s, token of %s/%s for %q) is not served: %v", host, shopNS, saName, audience, err)
	}
	var clusters []string
	for _, r := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c.GetName())
	}
	for _, want := range []string{shopNS + "/echo", shopNS + "/echo-pinned"} {
		if !slices.Contains(clusters, want) {
			t.Errorf("Envoy's CDS has %v, lacking %s, which its routes name", clusters, want)
		}
	}
	t.Logf("the walkthrough's Envoy, over TLS to %s with its token, received %d clusters: %v", host, len(clusters), clusters)

	// /debug/clients says who it was.
	var view struct {
		Clients []struct {
			NodeID   string `json:"nodeId"`
			Identity *struct {
				Principal string `json:"principal"`
				Method    string `json:"method"`
				Pod       string `json:"pod"`
			} `json:"identity"`
		} `json:"clients"`
	}
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, "Envoy's identity in /debug/clients", func() (bool, string) {
		r, err := http.Get("http://" + adminAddr + "/debug/clients")
		if err != nil {
			return false, err.Error()
		}
		defer r.Body.Close()
		if err := json.NewDecoder(r.Body).Decode(&view); err != nil {
			return false, err.Error()
		}
		for _, cl := range view.Clients {
			if cl.NodeID == pod.GetName() && cl.Identity != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", view.Clients)
	})
	for _, cl := range view.Clients {
		if cl.NodeID != pod.GetName() || cl.Identity == nil {
			continue
		}
		if id := *cl.Identity; id.Principal != shopNS+"/"+saName || id.Method != "token" || id.Pod != shopNS+"/"+pod.GetName() {
			t.Errorf("/debug/clients shows Envoy as %+v, want %s/%s by token, pod %s/%s", id, shopNS, saName, shopNS, pod.GetName())
		}
	}

	// Without the token: refused. Checking another name: no handshake.
	if _, err := cds(dial(host)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without a token: %v, want Unauthenticated", err)
	}
	if _, err := cds(dial("poise.elsewhere.svc", grpc.WithPerRPCCredentials(bearerFile{prefix: prefix, token: tr.Status.Token}))); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client checking the name poise.elsewhere.svc: %v, want the handshake to fail on the certificate", err)
	}
}
