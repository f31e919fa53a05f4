package kube_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
)

// TestServeFindsTheClusterThroughKUBECONFIG: with no --kubeconfig and no
// --leader-election-namespace, a replica finds the apiserver through
// $KUBECONFIG, as kubectl does, elects in the namespace it watches, and
// says so; it then serves what is there.
func TestServeFindsTheClusterThroughKUBECONFIG(t *testing.T) {
	ns := namespace(t)
	// built before HOME moves: the go command's caches live under it
	bin := cpbinary.Build(t)
	dir := t.TempDir()
	path := writeKubeconfig(t, dir, "team-context")
	t.Setenv("KUBECONFIG", path)
	t.Setenv("HOME", filepath.Join(dir, "home")) // no ~/.kube/config to fall back on

	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: "web", Endpoints: []v1alpha1.Endpoint{{Address: "198.51.100.10", Port: 9090}},
		}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	p := startPlaneWith(t, ns, "kubeconfig-env", func(c *controlplane.Config) {
		c.RestConfig, c.Kubeconfig, c.LeaderElectionNamespace = nil, "", ""
	})
	p.waitExplain(t, ns, "web", "the upstream served", func(u explain.Upstream) (bool, string) {
		return u.Outcome == "Routable", u.Outcome
	})
	// explain --kubeconfig reads the same cluster once and explains what
	// the replica serves
	served, err := p.explainOf(ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "explain", "--kubeconfig", path, "--namespace", ns, "--upstream", ns+"/web", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("explain --kubeconfig: %v\n%s", err, stderr.String())
	}
	var live explain.Report
	if err := json.Unmarshal(stdout.Bytes(), &live); err != nil {
		t.Fatalf("explain --kubeconfig -o json: %v\n%s", err, stdout.String())
	}
	got, _ := json.Marshal(live.Upstreams)
	want, _ := json.Marshal(served.Upstreams)
	if string(got) != string(want) {
		t.Errorf("explain --kubeconfig gives\n%s\nthe replica serves\n%s", got, want)
	}
	if strings.Contains(stderr.String(), "Service import here") {
		t.Errorf("explain --kubeconfig notes remote clusters' endpoints for a topology that imports no Service: %s", stderr.String())
	}
	if !strings.Contains(stderr.String(), restConfig.Host) {
		t.Errorf("explain --kubeconfig does not say which cluster it read: %s", stderr.String())
	}

	logs := p.logs.tail(200)
	for _, want := range []string{"$KUBECONFIG", ns} {
		if !strings.Contains(logs, want) {
			t.Errorf("the start-up log does not say %q:\n%s", want, logs)
		}
	}
}

// writeKubeconfig writes a kubeconfig for the envtest apiserver, whose
// context names namespace, and returns its path.
func writeKubeconfig(t *testing.T, dir, namespace string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: restConfig.Host, CertificateAuthorityData: restConfig.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: restConfig.CertData, ClientKeyData: restConfig.KeyData,
		Token: restConfig.BearerToken}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: namespace}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
