package source

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// testCA is a self-signed CA certificate in PEM.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func kubeconfigBytes(t *testing.T, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthorityData: testCA(t)}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t0ken"}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	if edit != nil {
		edit(kc)
	}
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRemoteConfigValidation(t *testing.T) {
	t.Parallel()
	secret := func(label string, data []byte) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "poise", Name: "remote-eu-2", Labels: map[string]string{LabelRemoteCluster: label}}}
		if data != nil {
			s.Data = map[string][]byte{RemoteKubeconfigKey: data}
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   string // "" means accepted
	}{
		{"token", secret("eu-2", kubeconfigBytes(t, nil)), ""},
		{"client certificate not PEM", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) {
			k.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("c"), ClientKeyData: []byte("k")}
		})), "data.kubeconfig: TLS of context \"ctx\""},
		{"CA not PEM", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) { k.Clusters["c"].CertificateAuthorityData = []byte("ca") })),
			"data.kubeconfig: TLS of context \"ctx\""},
		{"label not a DNS label", secret("EU_2", kubeconfigBytes(t, nil)), "label poise.dev/remote-cluster: cluster name \"EU_2\" must be a DNS label"},
		{"label too long", secret(strings.Repeat("a", 64), kubeconfigBytes(t, nil)), "must be a DNS label"},
		{"the home cluster's name", secret("home", kubeconfigBytes(t, nil)), "is the home cluster's name"},
		{"no kubeconfig", secret("eu-2", nil), "Secret poise/remote-eu-2 data.kubeconfig: missing or empty"},
		{"too large", secret("eu-2", make([]byte, MaxKubeconfigBytes+1)), "data.kubeconfig: 65537 bytes, more than the 65536"},
		{"not YAML", secret("eu-2", []byte("{{{")), "data.kubeconfig: not a kubeconfig"},
		{"no current context", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) { k.CurrentContext = "" })), "current-context \"\" names no context"},
		{"exec plugin", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) {
			k.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "aws", APIVersion: "client.authentication.k8s.io/v1"}}
		})), "user \"u\" has an exec plugin (aws); Poise runs no command"},
		{"auth provider", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) {
			k.AuthInfos["u"] = &clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "gcp"}}
		})), "has an auth-provider plugin (gcp)"},
		{"token file", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) { k.AuthInfos["u"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/token"} })),
			"reads a credential from a file"},
		{"CA file", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) {
			k.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1", CertificateAuthority: "/etc/ca.crt"}
		})), "reads certificate-authority from a file"},
		{"no server", secret("eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) { k.Clusters["c"].Server = "" })), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, cfg, err := RemoteConfig(tc.secret, "home")
			if tc.name == "no server" {
				// clientcmd refuses a cluster without a server itself
				if err == nil || !strings.Contains(err.Error(), "Secret poise/remote-eu-2 data.kubeconfig") {
					t.Fatalf("err = %v, want an error naming the Secret and field", err)
				}
				return
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && (cfg == nil || cfg.Host != "https://10.0.0.1:6443" || name != "eu-2"):
				t.Fatalf("got %q %+v", name, cfg)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			case tc.want != "" && !strings.HasPrefix(err.Error(), "Secret poise/remote-eu-2 "):
				t.Fatalf("err = %v does not name the Secret", err)
			}
		})
	}
}

// clusterReader is one cluster's Service echo-svc with a slice of the
// given addresses on port 8080, on a Node in region/zone.
func clusterReader(t *testing.T, region, zone string, addrs ...string) client.Reader {
	t.Helper()
	return clusterReaderReady(t, true, region, zone, addrs...)
}

// clusterReaderReady is clusterReader with every endpoint ready or not.
func clusterReaderReady(t *testing.T, ready bool, region, zone string, addrs ...string) client.Reader {
	t.Helper()
	port, name := int32(8080), "grpc"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "echo-svc-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "echo-svc"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	node := "n-" + zone
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&discoveryv1.EndpointSlice{}, sliceServiceIndex, func(o client.Object) []string {
			return []string{o.GetLabels()[discoveryv1.LabelServiceName]}
		}).
		WithObjects(
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "echo-svc"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 80}}}},
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{LabelRegion: region, LabelZone: zone}}},
			sl,
		).Build()
}

// importResolved imports Service echo-svc for Upstream shop/name from home
// and r's clusters, and resolves it in a Directory of its own.
func importResolved(t *testing.T, home client.Reader, r *Remotes, name string, clusters []topology.ClusterImport) (*Source, *topology.UpstreamState) {
	t.Helper()
	s := &Source{Reader: home, Remotes: r}
	s.init()
	u := topology.Upstream{Key: topology.Key{Namespace: "shop", Name: name}, Policy: weights.DefaultPolicy(),
		Service: &topology.ServiceRef{Name: "echo-svc", Port: "grpc", Clusters: clusters}}
	ops, err := s.importFor(context.Background(), &u)
	if err != nil {
		t.Fatal(err)
	}
	var b topology.Batch
	b.PutUpstream(u)
	for _, o := range ops {
		o.apply(&b)
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return s, snap.Upstream(u.Key)
}

// TestImportAcrossClusters: endpoint sets per (cluster, region, zone), the
// remote ones in their own subZone at their cluster's priority and weight,
// origins naming the slice and cluster, a duplicate address refused for
// the cluster first by name, a stale cluster's endpoints Unavailable with
// why, and the same result in any order of registration.
func TestImportAcrossClusters(t *testing.T) {
	t.Parallel()
	home := clusterReader(t, "eu-west", "eu-west-a", "10.0.0.1", "10.0.0.2")
	eu1 := clusterReader(t, "eu-central", "eu-central-a", "10.1.0.1", "10.0.0.2") // 10.0.0.2 is home's too
	eu2 := clusterReader(t, "eu-north", "eu-north-a", "10.2.0.1")
	since := time.Date(2026, 11, 30, 10, 42, 7, 0, time.UTC)
	type row struct {
		set    string
		addr   string
		prio   uint32
		loc    weights.Locality
		weight uint64
		admin  weights.AdminState
		from   string
		share  uint64
	}
	build := func(order []string) []row {
		r := &Remotes{HomeName: "home"}
		r.init()
		views := map[string]*remote{
			"eu-1": {name: "eu-1", secret: "poise/remote-eu-1", reader: eu1},
			"eu-2": {name: "eu-2", secret: "poise/remote-eu-2", reader: eu2, unreachable: since, stale: true},
		}
		for _, n := range order {
			r.clusters[views[n].secret] = views[n]
		}
		s, st := importResolved(t, home, r, "echo", []topology.ClusterImport{{Name: "eu-1", Priority: 0, Weight: 1}, {Name: "eu-2", Priority: 1, Weight: 1}, {Name: "home", Priority: 0, Weight: 2}})
		u := st.Upstream
		c := s.ClusterConditions()[u.Key]
		// eu-2 is stale, which the reason says before the duplicate
		if c.Reason != conditions.ReasonRemoteClusterUnreachable || !strings.Contains(c.Message, "cluster eu-2 unreachable since 10:42:07") ||
			!strings.Contains(c.Message, "10.0.0.2:8080 in cluster home is also in cluster eu-1, which wins") {
			t.Errorf("condition %+v does not say which cluster keeps the duplicate", c)
		}
		var out []row
		for i := range st.Endpoints {
			er, e, o := st.EndpointResult(i)
			t.Logf("%s:%d p%d %s locality weight %d %s share %d from %s", e.Address, e.Port, e.Priority, e.Locality.String(), e.LocalityWeight, e.Admin, er.Share, o.Health.AdminOrigin)
			out = append(out, row{o.Set.Key.Name, e.Address, e.Priority, e.Locality, e.LocalityWeight, e.Admin, o.Health.AdminOrigin, er.Share})
		}
		return out
	}
	first := build([]string{"eu-1", "eu-2"})
	if again := build([]string{"eu-2", "eu-1"}); !slices.Equal(first, again) {
		t.Fatalf("the order of registration changed the import:\n%+v\n%+v", first, again)
	}
	const (
		homeSet = "echo:echo-svc:eu-west:eu-west-a"
		eu1Set  = "echo:echo-svc:eu-central:eu-central-a:eu-1"
		eu2Set  = "echo:echo-svc:eu-north:eu-north-a:eu-2"
	)
	homeLoc := weights.Locality{Region: "eu-west", Zone: "eu-west-a"}
	eu1Loc := weights.Locality{Region: "eu-central", Zone: "eu-central-a", SubZone: "eu-1"}
	eu2Loc := weights.Locality{Region: "eu-north", Zone: "eu-north-a", SubZone: "eu-2"}
	// priority 0: home weight 2 (one endpoint: its 10.0.0.2 went to eu-1),
	// eu-1 weight 1 (two endpoints): 2/3 and 1/6 each; eu-2 is priority 1
	// and stale, so it takes nothing
	want := []row{
		{eu1Set, "10.0.0.2", 0, eu1Loc, 1, weights.Ready, "EndpointSlice shop/echo-svc-abc in cluster eu-1", 166_666},
		{eu1Set, "10.1.0.1", 0, eu1Loc, 1, weights.Ready, "EndpointSlice shop/echo-svc-abc in cluster eu-1", 166_667},
		{homeSet, "10.0.0.1", 0, homeLoc, 2, weights.Ready, "EndpointSlice shop/echo-svc-abc in cluster home", 666_667},
		{eu2Set, "10.2.0.1", 1, eu2Loc, 1, weights.Unavailable, "cluster eu-2 unreachable since 10:42:07; last seen in EndpointSlice shop/echo-svc-abc", 0},
	}
	slices.SortFunc(first, func(a, b row) int { return strings.Compare(a.set+a.addr, b.set+b.addr) })
	slices.SortFunc(want, func(a, b row) int { return strings.Compare(a.set+a.addr, b.set+b.addr) })
	if len(first) != len(want) {
		t.Fatalf("got %+v\nwant %+v", first, want)
	}
	for i := range want {
		w, g := want[i], first[i]
		// shares are checked to within one millionth (rounding is the math's)
		if g.share+1 < w.share || g.share > w.share+1 {
			t.Errorf("endpoint %s share %d, want %d", g.addr, g.share, w.share)
		}
		g.share, w.share = 0, 0
		if g != w {
			t.Errorf("got  %+v\nwant %+v", g, w)
		}
	}
}

// TestClusterWeightsWorkedExample holds the figures of the worked example
// in docs/weights.md ("Clusters: priority and weight") exactly: the
// clusters only decide where endpoints come from and how they are grouped,
// and the math of the sections above does the rest.
func TestClusterWeightsWorkedExample(t *testing.T) {
	t.Parallel()
	eu2 := clusterReader(t, "eu-central", "eu-central-a", "10.1.0.1", "10.1.0.2")
	us1 := clusterReader(t, "us-east", "us-east-a", "10.2.0.1", "10.2.0.2")
	shares := func(staleEU2, homeReady bool) map[string]uint64 {
		home := clusterReaderReady(t, homeReady, "eu-west", "eu-west-a", "10.0.0.1", "10.0.0.2")
		r := &Remotes{HomeName: "home"}
		r.init()
		r.clusters["poise/remote-eu-2"] = &remote{name: "eu-2", secret: "poise/remote-eu-2", reader: eu2}
		r.clusters["poise/remote-us-1"] = &remote{name: "us-1", secret: "poise/remote-us-1", reader: us1}
		if staleEU2 {
			c := r.clusters["poise/remote-eu-2"]
			c.unreachable, c.stale = time.Date(2026, 11, 30, 10, 42, 7, 0, time.UTC), true
		}
		_, st := importResolved(t, home, r, "checkout", []topology.ClusterImport{{Name: "eu-2", Priority: 0, Weight: 1}, {Name: "home", Priority: 0, Weight: 3}, {Name: "us-1", Priority: 1, Weight: 1}})
		for _, p := range st.Result.Priorities {
			t.Logf("stale eu-2 %v, home ready %v: priority %d health %d load %d", staleEU2, homeReady, p.Priority, p.Health, p.Load)
		}
		out := map[string]uint64{}
		for i := range st.Endpoints {
			er, e, _ := st.EndpointResult(i)
			out[e.Address] = er.Share
			t.Logf("stale eu-2 %v, home ready %v: %s p%d %s weight %d %s share %d", staleEU2, homeReady, e.Address, e.Priority, e.Locality.String(), e.LocalityWeight, e.Admin, er.Share)
		}
		return out
	}
	for _, tc := range []struct {
		stale, homeReady bool
		want             map[string]uint64
	}{
		// A: priority 0 is healthy: 3:1 between home and eu-2; us-1 waits
		{false, true, map[string]uint64{"10.0.0.1": 375_000, "10.0.0.2": 375_000, "10.1.0.1": 125_000, "10.1.0.2": 125_000, "10.2.0.1": 0, "10.2.0.2": 0}},
		// B: eu-2 stale: its endpoints are Unavailable, which is never
		// configured, so priority 0 keeps health 100 % and home takes it all
		{true, true, map[string]uint64{"10.0.0.1": 500_000, "10.0.0.2": 500_000, "10.1.0.1": 0, "10.1.0.2": 0, "10.2.0.1": 0, "10.2.0.2": 0}},
		// C: and home's endpoints not ready either: priority 0 has nothing
		// configured, and us-1 at priority 1 takes everything
		{true, false, map[string]uint64{"10.0.0.1": 0, "10.0.0.2": 0, "10.1.0.1": 0, "10.1.0.2": 0, "10.2.0.1": 500_000, "10.2.0.2": 500_000}},
	} {
		got := shares(tc.stale, tc.homeReady)
		for addr, w := range tc.want {
			if got[addr] != w {
				t.Errorf("stale eu-2 %v, home ready %v: %s share %d, want %d", tc.stale, tc.homeReady, addr, got[addr], w)
			}
		}
	}
}

// TestFirstEndpoints: a remote cluster's import past the bound keeps the
// first endpoints by address over all its sets, whatever the sets' order.
func TestFirstEndpoints(t *testing.T) {
	t.Parallel()
	set := func(name string, addrs ...string) topology.EndpointSet {
		s := topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: name}}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, topology.Endpoint{Address: a, Port: 80})
		}
		return s
	}
	for _, order := range [][]topology.EndpointSet{
		{set("a", "10.0.0.3", "10.0.0.5"), set("b", "10.0.0.1", "10.0.0.4"), set("c", "10.0.0.9")},
		{set("c", "10.0.0.9"), set("b", "10.0.0.1", "10.0.0.4"), set("a", "10.0.0.3", "10.0.0.5")},
	} {
		got := map[string][]string{}
		for _, s := range firstEndpoints(order, 3) {
			for _, e := range s.Endpoints {
				got[s.Key.Name] = append(got[s.Key.Name], e.Address)
			}
		}
		if len(got) != 2 || strings.Join(got["a"], ",") != "10.0.0.3" || strings.Join(got["b"], ",") != "10.0.0.1,10.0.0.4" {
			t.Errorf("firstEndpoints kept %v, want a: 10.0.0.3, b: 10.0.0.1 10.0.0.4, and no set c", got)
		}
	}
}

// TestRemoteSecretLifecycle: the registry's answers to Secrets, without a
// remote apiserver: a second Secret for a registered name is refused naming
// the first; a bad rotation keeps the last good reader serving and says why;
// a deleted Secret's cluster goes, and tells the source.
func TestRemoteSecretLifecycle(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var removed []string
	r := &Remotes{HomeName: "home", Probe: time.Hour, Removed: func(cluster, secret string) { removed = append(removed, cluster+" "+secret) }}
	r.init()
	sec := func(name, cluster string, data []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "poise", Name: name, Labels: map[string]string{LabelRemoteCluster: cluster}},
			Data: map[string][]byte{RemoteKubeconfigKey: data}}
	}
	good := kubeconfigBytes(t, nil)
	r.secret(ctx, sec("a", "eu-2", good))
	r.secret(ctx, sec("b", "eu-2", good))
	st := r.Status()
	// a is Pending, or Error once its unreachable server refused a connection
	if len(st) != 2 || st[0].Secret != "poise/a" || (st[0].State != ClusterPending && st[0].State != ClusterError) || st[1].State != ClusterError ||
		!strings.Contains(st[1].Error, `Secret poise/b label poise.dev/remote-cluster: cluster "eu-2" is registered already by Secret poise/a`) {
		t.Fatalf("status %+v, want a Pending and b refused naming a", st)
	}
	// a: pretend its cache synced, then rotate it to an exec plugin
	r.mu.Lock()
	home := clusterReader(t, "r", "z", "10.0.0.1")
	r.clusters["poise/a"].reader = home
	r.mu.Unlock()
	r.secret(ctx, sec("a", "eu-2", kubeconfigBytes(t, func(k *clientcmdapi.Config) {
		k.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "sh"}}
	})))
	if v := r.views(); len(v) != 1 || v[0].reader != home {
		t.Fatalf("views %+v, want a's last good reader still serving", v)
	}
	if st := r.Status(); st[0].State != ClusterError || !strings.Contains(st[0].Error, "exec plugin (sh)") || !strings.Contains(st[0].Error, "the previous credential keeps serving") {
		t.Fatalf("status %+v, want Error naming the exec plugin and that the previous credential serves", st[0])
	}
	if w := r.Warnings(); len(w) != 2 || !strings.Contains(w[0], "remote cluster eu-2 (Secret poise/a): Error") {
		t.Fatalf("warnings %q", w)
	}
	r.gone("poise/a")
	if len(removed) != 1 || removed[0] != "eu-2 poise/a" || len(r.views()) != 0 {
		t.Fatalf("removed %v, views %v, want eu-2 removed", removed, r.views())
	}
	r.gone("poise/b") // refused: never imported, nothing to remove
	if len(removed) != 1 || len(r.Status()) != 0 {
		t.Fatalf("removed %v status %v", removed, r.Status())
	}
}
