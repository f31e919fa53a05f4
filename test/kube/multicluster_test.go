package kube_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// remoteCluster is one more real kube-apiserver and etcd, reached through a
// TCP proxy: its apiserver process can be stopped and started again on the
// same address and certificates (its etcd keeps the data), and the proxy
// can cut it off while it runs.
type remoteCluster struct {
	name  string
	env   *envtest.Environment
	k8s   client.Client
	proxy *cutProxy
}

// startRemote starts a remote cluster with a read-only ClusterRole for
// services, endpointslices and nodes (what create-remote-secret grants).
func startRemote(t *testing.T, name string) *remoteCluster {
	t.Helper()
	env := &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS")}
	// a certificate directory of its own is kept across a stop, so the
	// apiserver comes back with the same serving certificate and the
	// kubeconfigs in the Secrets stay valid
	env.ControlPlane.GetAPIServer().CertDir = t.TempDir()
	env.ControlPlane.GetAPIServer().SecureServing.ListenAddr = envtest.ListenAddr{Address: "127.0.0.1", Port: restartPort(t)}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("remote %s: start kube-apiserver and etcd: %v", name, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	t.Logf("remote %s: kube-apiserver and etcd up in %v", name, time.Since(start).Round(time.Millisecond))
	scheme, err := source.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	_ = rbacv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "poise-remote-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if err := c.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	t.Logf("remote %s: apiserver at %s", name, cfg.Host)
	host := strings.TrimSuffix(strings.TrimPrefix(cfg.Host, "https://"), "/")
	return &remoteCluster{name: name, env: env, k8s: c, proxy: startCutProxy(t, host)}
}

// stopAPIServer stops the remote's kube-apiserver process; its etcd runs on.
func (r *remoteCluster) stopAPIServer(t *testing.T) {
	if err := r.env.ControlPlane.APIServer.Stop(); err != nil {
		t.Errorf("remote %s: stop kube-apiserver: %v", r.name, err)
	}
}

// startAPIServer starts the remote's kube-apiserver again, on the same
// address and certificates.
func (r *remoteCluster) startAPIServer(t *testing.T) {
	t.Helper()
	if err := r.env.ControlPlane.APIServer.Start(); err != nil {
		t.Fatalf("remote %s: start kube-apiserver again: %v", r.name, err)
	}
}

// reader adds a user bound to the read-only role and returns a kubeconfig
// for it that reaches the apiserver through the proxy.
func (r *remoteCluster) reader(t *testing.T, user string) []byte {
	t.Helper()
	u, err := r.env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "poise-remote-reader"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if err := r.k8s.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	return kubeconfigOf(t, u.Config(), "https://"+r.proxy.addr)
}

func kubeconfigOf(t *testing.T, cfg *rest.Config, server string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["remote"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["reader"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["remote"] = &clientcmdapi.Context{Cluster: "remote", AuthInfo: "reader"}
	kc.CurrentContext = "remote"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cutProxy forwards TCP to an apiserver until cut: then it closes every
// open connection and every new one at once.
type cutProxy struct {
	addr   string
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: lis.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { lis.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cutProxy: dial %s: %v\n", p.target, err)
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe(c, up)
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// hostIP is a non-loopback IPv4 address of this machine: the apiserver
// refuses loopback EndpointSlice addresses, and the backends must be real.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address: EndpointSlices cannot point at local backends")
	return ""
}

// createClusterService creates, in one cluster, namespace ns, a Node in
// region/zone, Service echo-svc and a slice per backend.
func createClusterService(t *testing.T, c client.Client, ns, cluster, region, zone string, b []*splitcheck.Backend, create bool) {
	t.Helper()
	if create {
		if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	node := ns + "-" + cluster
	objs := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{source.LabelRegion: region, source.LabelZone: zone}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo-svc", Namespace: ns}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc")}},
		}},
	}
	for i, be := range b {
		objs = append(objs, slice(ns, "echo-svc", i, be, discoveryv1.AddressTypeIPv4, node, readyCond))
	}
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("cluster %s: create %T %s: %v", cluster, o, o.GetName(), err)
		}
	}
	t.Cleanup(func() { _ = c.Delete(t.Context(), objs[0]) })
}

func remoteSecret(ns, name, cluster string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{source.LabelRemoteCluster: cluster}},
		Data: map[string][]byte{source.RemoteKubeconfigKey: kubeconfig}}
}

// clusterOf tells an explained endpoint's cluster from its origin.
func clusterOf(ep explain.Endpoint) string {
	o := ep.Origin
	if i := strings.Index(o, " in cluster "); i >= 0 {
		return strings.Fields(o[i+len(" in cluster "):])[0]
	}
	if strings.HasPrefix(o, "cluster ") {
		return strings.Fields(o)[1]
	}
	return ""
}

func endpointsByCluster(u explain.Upstream) map[string][]explain.Endpoint {
	out := map[string][]explain.Endpoint{}
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, ep := range l.Endpoints {
				out[clusterOf(ep)] = append(out[clusterOf(ep)], ep)
			}
		}
	}
	return out
}

// TestMultiCluster: one control plane imports Service echo-svc from its
// home cluster and two remote clusters (three real kube-apiservers), each
// registered by a Secret; a grpc-go xDS client carries out the split
// across clusters; a remote whose apiserver stops keeps serving for the staleness bound,
// then is Unavailable and traffic fails over, and comes back with the
// cluster; a rotated credential keeps the import; a deleted Secret takes
// the cluster's endpoints with an Event. Poise is never restarted.
// eu-2's apiserver comes back on the port it had, one below the ephemeral
// range (restartPort) that no other test's listener can take meanwhile.
func TestMultiCluster(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ip := hostIP(t)
	eu1, eu2 := startRemote(t, "eu-1"), startRemote(t, "eu-2")
	b := splitcheck.StartBackends(t, ip, 6)
	createClusterService(t, k8s, ns, "home", "eu-west", "eu-west-a", b[0:2], false)
	createClusterService(t, eu1.k8s, ns, "eu-1", "eu-central", "eu-central-a", b[2:4], true)
	createClusterService(t, eu2.k8s, ns, "eu-2", "eu-north", "eu-north-a", b[4:6], true)
	up := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
		Protocol: v1alpha1.ProtocolGRPC,
		EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "echo-svc", Port: intstr.FromString("grpc")},
			// home takes twice the weight of each remote
			Clusters: []v1alpha1.ClusterImport{{Name: "home", Weight: new(int64(2))}, {Name: "eu-1"}, {Name: "eu-2"}}},
	}}
	if err := k8s.Create(t.Context(), up); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{
		remoteSecret(ns, "remote-eu-1", "eu-1", eu1.reader(t, "poise-reader-1")),
		remoteSecret(ns, "remote-eu-2", "eu-2", eu2.reader(t, "poise-reader-1")),
	} {
		if err := k8s.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	const staleAfter = 5 * time.Second
	p := startPlaneWith(t, ns, "mc", func(c *controlplane.Config) { c.RemoteStaleAfter = staleAfter })
	// a second replica reads the same clusters and publishes the same figures
	p2 := startPlaneWith(t, ns, "mc-2", func(c *controlplane.Config) { c.RemoteStaleAfter = staleAfter })
	sameAs := func(phase string, want splitcheck.Expectation) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, phase+": replica mc-2 publishes the same split", func() (bool, string) {
			r, err := p2.explainOf(ns, "echo")
			if err != nil {
				return false, err.Error()
			}
			got := splitcheck.ExpectationOf(t, r)
			return sameShares(got, want), fmt.Sprintf("mc-2 %+v, mc %+v", got, want)
		})
	}
	const node = "mc-client"
	conn := splitcheck.NewXDSClient(t, p.addrs.XDS, node, "echo."+ns)

	// 1. six endpoints, two from each cluster, each with its origin
	rep, took := p.waitExplain(t, ns, "echo", "echo has two endpoints from each of three clusters", func(u explain.Upstream) (bool, string) {
		by := endpointsByCluster(u)
		return len(by["home"]) == 2 && len(by["eu-1"]) == 2 && len(by["eu-2"]) == 2, fmt.Sprintf("%v", by)
	})
	t.Logf("1 import: explain lists the three clusters' endpoints %v after the plane was ready", took.Round(time.Millisecond))
	for c, eps := range endpointsByCluster(rep.Upstreams[0]) {
		for _, ep := range eps {
			t.Logf("1 import: %s:%d  %s  share %d  from %s (%s)", ep.Address, ep.Port, ep.AdminState, ep.Share, ep.Origin, c)
			if !strings.HasPrefix(ep.Origin, "EndpointSlice "+ns+"/echo-svc-") {
				t.Errorf("endpoint %s:%d origin %q does not name its EndpointSlice and cluster", ep.Address, ep.Port, ep.Origin)
			}
		}
	}
	want := splitcheck.ExpectationOf(t, rep)
	if got := want.Share[b[0].Addr]; got != 250_000 {
		t.Fatalf("home endpoint share %d, want 250000 (home weight 2 of 4, two endpoints)", got)
	}
	p.waitAcked(t, node, rep.Revision)
	measure(t, "1 split across clusters", conn, want)
	sameAs("1", want)
	testkit.Eventually(t, 15*time.Second, "RemoteClustersSynced=True and ResolvedRefs=True on echo", func() (bool, string) {
		c := upstreamCondition(t, ns, "echo", conditions.ConditionRemoteClustersSynced)
		r := upstreamCondition(t, ns, "echo", conditions.ConditionResolvedRefs)
		return c != nil && c.Status == metav1.ConditionTrue && r != nil && r.Status == metav1.ConditionTrue, fmt.Sprintf("%+v %+v", c, r)
	})
	for _, pl := range []*plane{p, p2} {
		var cs struct {
			Clusters []source.ClusterStatus `json:"clusters"`
		}
		if err := testkit.GetJSON(pl.adminURL+"/debug/clusters", &cs); err != nil {
			t.Fatal(err)
		}
		if len(cs.Clusters) != 2 || cs.Clusters[0].Name != "eu-1" || cs.Clusters[0].State != source.ClusterSynced || cs.Clusters[1].State != source.ClusterSynced {
			t.Errorf("plane %s /debug/clusters: %+v, want eu-1 and eu-2 Synced", pl.name, cs.Clusters)
		}
	}

	// 2. eu-2's apiserver stops: within the bound nothing changes. The
	//    stop (a graceful shutdown, which takes seconds) runs meanwhile:
	//    eu-2 cannot be unreachable before it began
	cut := time.Now()
	stopped := make(chan struct{})
	go func() { defer close(stopped); eu2.stopAPIServer(t) }()
	before := rep.Revision
	holds(t, staleAfter-time.Second-time.Since(cut), 200*time.Millisecond, "eu-2's endpoints serve within the bound", func() string {
		r, err := p.explainOf(ns, "echo")
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range endpointsByCluster(r.Upstreams[0])["eu-2"] {
			if ep.AdminState != "Ready" || ep.Share == 0 {
				return fmt.Sprintf("eu-2 endpoint changed %v after the stop began, within the %v bound: %+v", time.Since(cut).Round(time.Millisecond), staleAfter, ep)
			}
		}
		return ""
	})
	t.Logf("2 stop: %v after eu-2's apiserver stopped its endpoints still serve (revision %d)", time.Since(cut).Round(time.Millisecond), before)
	testkit.Eventually(t, 10*time.Second, "readyz says eu-2 is unreachable, and stays 200", func() (bool, string) {
		code, body := getBody(t, p.adminURL+"/readyz")
		return code == http.StatusOK && strings.Contains(body, "remote cluster eu-2"), fmt.Sprintf("%d %s", code, body)
	})
	// after the bound: Unavailable, with the origin, and traffic fails over
	rep, _ = p.waitExplain(t, ns, "echo", "eu-2's endpoints are Unavailable", func(u explain.Upstream) (bool, string) {
		eps := endpointsByCluster(u)["eu-2"]
		for _, ep := range eps {
			if ep.AdminState != "Unavailable" || !strings.Contains(ep.ReasonFrom, "cluster eu-2 unreachable since") {
				return false, fmt.Sprintf("%+v", ep)
			}
		}
		return len(eps) == 2, fmt.Sprintf("%d eu-2 endpoints", len(eps))
	})
	stale := time.Since(cut)
	t.Logf("2 stop: eu-2's endpoints Unavailable %v after the stop (bound %v): %s", stale.Round(time.Millisecond), staleAfter, endpointsByCluster(rep.Upstreams[0])["eu-2"][0].ReasonFrom)
	if stale < staleAfter {
		t.Errorf("eu-2 went Unavailable %v after the stop began, before the %v bound", stale, staleAfter)
	}
	failover := splitcheck.ExpectationOf(t, rep)
	if failover.Share[b[4].Addr] != 0 || failover.Share[b[0].Addr] <= want.Share[b[0].Addr] {
		t.Fatalf("no failover in the computed split: %+v", failover)
	}
	p.waitAcked(t, node, rep.Revision)
	measure(t, "2 failover from eu-2", conn, failover)
	sameAs("2", failover)
	t.Logf("2 stop: the client's traffic left eu-2 %v after the stop", time.Since(cut).Round(time.Millisecond))
	if v := metricValue(t, p, `poise_remote_cluster_state{cluster="eu-2",state="Stale"}`); v != 1 {
		t.Errorf("poise_remote_cluster_state{cluster=eu-2,state=Stale} = %v, want 1", v)
	}
	testkit.Eventually(t, 15*time.Second, "RemoteClustersSynced=False RemoteClusterUnreachable on echo", func() (bool, string) {
		c := upstreamCondition(t, ns, "echo", conditions.ConditionRemoteClustersSynced)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonRemoteClusterUnreachable, fmt.Sprintf("%+v", c)
	})

	// 3. eu-2's apiserver starts again: its endpoints and the traffic return
	<-stopped
	restored := time.Now()
	eu2.startAPIServer(t)
	rep, took = p.waitExplain(t, ns, "echo", "eu-2's endpoints are Ready again", func(u explain.Upstream) (bool, string) {
		eps := endpointsByCluster(u)["eu-2"]
		for _, ep := range eps {
			if ep.AdminState != "Ready" {
				return false, fmt.Sprintf("%+v", ep)
			}
		}
		return len(eps) == 2, fmt.Sprintf("%d eu-2 endpoints", len(eps))
	})
	t.Logf("3 restart: eu-2's endpoints Ready %v after the restarted apiserver was ready", took.Round(time.Millisecond))
	back := splitcheck.ExpectationOf(t, rep)
	if !sameShares(back, want) {
		t.Fatalf("split after restore %+v, want the first %+v", back, want)
	}
	p.waitAcked(t, node, rep.Revision)
	measure(t, "3 eu-2 back", conn, back)
	sameAs("3", back)
	t.Logf("3 restart: the client's traffic returned to eu-2 %v after the restart began", time.Since(restored).Round(time.Millisecond))

	// 4. rotation: eu-1's Secret gets a second identity; the first loses its
	//    binding, and a change in eu-1 is still imported
	var sec corev1.Secret
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "remote-eu-1"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[source.RemoteKubeconfigKey] = eu1.reader(t, "poise-reader-2")
	if err := k8s.Update(t.Context(), &sec); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the rotated credential synced", func() (bool, string) {
		return strings.Count(p.logs.tail(100000), "remote cluster synced") >= 3, "waiting for a second sync of eu-1"
	})
	if err := eu1.k8s.Delete(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "poise-reader-1"}}); err != nil {
		t.Fatal(err)
	}
	var sl discoveryv1.EndpointSlice
	if err := eu1.k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "echo-svc-1"}, &sl); err != nil {
		t.Fatal(err)
	}
	sl.Endpoints[0].Conditions = drainingCond
	if err := eu1.k8s.Update(t.Context(), &sl); err != nil {
		t.Fatal(err)
	}
	_, took = p.waitExplain(t, ns, "echo", "eu-1's change imported with the rotated credential", func(u explain.Upstream) (bool, string) {
		ep, _ := endpointOf(u, b[3])
		return ep.AdminState == "Draining", fmt.Sprintf("%+v", ep)
	})
	t.Logf("4 rotation: a change in eu-1 imported %v after it, with the new credential", took.Round(time.Millisecond))

	// 5. eu-1's Secret is deleted: its endpoints go, with an Event
	if err := k8s.Delete(t.Context(), &sec); err != nil {
		t.Fatal(err)
	}
	rep, took = p.waitExplain(t, ns, "echo", "eu-1's endpoints are gone", func(u explain.Upstream) (bool, string) {
		by := endpointsByCluster(u)
		return len(by["eu-1"]) == 0 && len(by["home"]) == 2 && len(by["eu-2"]) == 2, fmt.Sprintf("%v", by)
	})
	t.Logf("5 delete: eu-1's endpoints removed %v after its Secret was deleted", took.Round(time.Millisecond))
	sameAs("5", splitcheck.ExpectationOf(t, rep))
	testkit.Eventually(t, 15*time.Second, "a RemoteClusterRemoved Event on echo", func() (bool, string) {
		var evs corev1.EventList
		if err := k8s.List(t.Context(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "RemoteClusterRemoved" && e.InvolvedObject.Name == "echo" {
				t.Logf("5 delete: Event %s: %s", e.Reason, e.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	// only the leader records it: one Event, once, with two replicas
	// running, for a second and more
	holds(t, time.Second, 100*time.Millisecond, "one RemoteClusterRemoved Event (the leader's)", func() string {
		var evs corev1.EventList
		if err := k8s.List(t.Context(), &evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs.Items {
			if e.Reason == "RemoteClusterRemoved" {
				n += max(1, int(e.Count))
				if e.Series != nil {
					n += int(e.Series.Count) - 1
				}
			}
		}
		if n != 1 {
			return fmt.Sprintf("%d RemoteClusterRemoved Events, want 1", n)
		}
		return ""
	})

	// 6. a Secret whose kubeconfig runs a command is refused, named, and
	//    nothing else changes
	bad := remoteSecret(ns, "remote-bad", "eu-3", []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "touch /tmp/pwned"]}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`))
	if err := k8s.Create(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	for _, pl := range []*plane{p, p2} {
		testkit.Eventually(t, 15*time.Second, pl.name+": readyz names the refused Secret and stays 200", func() (bool, string) {
			code, body := getBody(t, pl.adminURL+"/readyz")
			return code == http.StatusOK && strings.Contains(body, "remote cluster eu-3 (Secret "+ns+"/remote-bad): Error") &&
				strings.Contains(body, "has an exec plugin (/bin/sh); Poise runs no command"), fmt.Sprintf("%d %s", code, body)
		})
	}
	if v := metricValue(t, p, `poise_remote_cluster_state{cluster="eu-3",state="Error"}`); v != 1 {
		t.Errorf("poise_remote_cluster_state{cluster=eu-3,state=Error} = %v, want 1", v)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Errorf("the kubeconfig's exec plugin ran")
	}
	r, err := p.explainOf(ns, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if by := endpointsByCluster(r.Upstreams[0]); len(by["home"]) != 2 || len(by["eu-2"]) != 2 || len(by) != 2 {
		t.Errorf("a refused Secret changed the import: %v", by)
	}
}

func upstreamCondition(t *testing.T, ns, name, typ string) *metav1.Condition {
	t.Helper()
	var u v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(u.Status.Conditions, typ)
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRemoteClustersOff: a replica run with --remote-clusters=false (as the
// chart runs without multicluster.enabled, with no RBAC for Secrets) reads
// no Secret: a labelled one registers nothing, and neither /readyz nor the
// metrics say anything of remote clusters. A replica beside it with remote
// clusters on shows when a registry would have read the Secret.
func TestRemoteClustersOff(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	p := startPlaneWith(t, ns, "off", func(c *controlplane.Config) { c.NoRemoteClusters = true })
	on := startPlane(t, ns, "on")
	if err := k8s.Create(t.Context(), remoteSecret(ns, "remote-x", "eu-9", []byte("not: a kubeconfig\n"))); err != nil {
		t.Fatal(err)
	}
	clusters := func(pl *plane) []source.ClusterStatus {
		var cs struct {
			Clusters []source.ClusterStatus `json:"clusters"`
		}
		if err := testkit.GetJSON(pl.adminURL+"/debug/clusters", &cs); err != nil {
			t.Fatal(err)
		}
		return cs.Clusters
	}
	testkit.Eventually(t, 15*time.Second, "the replica with remote clusters on reads the Secret", func() (bool, string) {
		cs := clusters(on)
		return len(cs) == 1 && cs[0].Name == "eu-9", fmt.Sprintf("%+v", cs)
	})
	if cs := clusters(p); len(cs) != 0 {
		t.Errorf("/debug/clusters %+v, want none", cs)
	}
	if code, body := getBody(t, p.adminURL+"/readyz"); code != http.StatusOK || strings.Contains(body, "remote cluster") {
		t.Errorf("/readyz %d %s", code, body)
	}
	if v := metricValue(t, p, `poise_remote_cluster_state{cluster="eu-9",state="Error"}`); v != 0 {
		t.Errorf("the Secret was read: state Error %v", v)
	}
}
