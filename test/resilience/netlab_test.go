package resilience

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// A lab is a small network of hosts on one machine: the apiserver (with
// etcd) on an address of the test's own network namespace, and each
// replica in a network namespace of its own, joined to the test's by two
// veth links the test can cut and restore on their own: an api link (the
// replica's way to the apiserver) and a client link (its clients' way to
// it, and the test's to its admin port). Cutting a link takes its end in
// the test's namespace down: packets are dropped, nothing is refused or
// reset, as in a partition. No packet leaves the machine: the addresses
// are of 198.18.0.0/15, set aside for tests (RFC 2544).
type lab struct {
	t   *testing.T
	n   int    // the lab's number: its addresses are 198.18.n.0/24
	api string // the apiserver's address
	// k8s writes to the apiserver as the test; kubeconfig is the replicas'
	k8s        client.Client
	restConfig *rest.Config
	kubeconfig string
	bin        string
	apiserver  *envtest.APIServer
}

// labs numbers the labs of this process; the process ID spreads the
// numbers of concurrent test processes.
var labs atomic.Int32

// newLab starts the apiserver of a lab, or skips the test when this
// machine cannot make network namespaces (it needs root and ip(8)).
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces (ip netns) need root; run make resilience as root (CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip(8) is not installed (Debian package iproute2): the Kubernetes scenarios cut veth links between network namespaces")
	}
	assets, skip, err := testkit.EnvtestAssets("test/resilience")
	switch {
	case err != nil:
		t.Fatal(err)
	case skip != "":
		t.Skip(skip)
	}
	l := &lab{t: t, bin: cpbinary.Build(t)}
	for try := range 256 {
		l.n = (os.Getpid() + int(labs.Add(1)) + try) % 250
		l.api = fmt.Sprintf("198.18.%d.254", l.n)
		if exec.Command("ip", "addr", "add", l.api+"/32", "dev", "lo").Run() == nil {
			break
		}
		l.api = ""
	}
	if l.api == "" {
		t.Fatal("no free lab address in 198.18.0.0/16")
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", l.api+"/32", "dev", "lo").Run() })

	apiserver := &envtest.APIServer{CertDir: t.TempDir()}
	apiserver.SecureServing.ListenAddr = envtest.ListenAddr{Address: l.api, Port: cpbinary.FreePort(t)}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		ControlPlane:          envtest.ControlPlane{APIServer: apiserver},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the lab's apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop the lab's apiserver: %v", err)
		}
	})
	l.restConfig, l.apiserver = cfg, apiserver
	scheme, err := source.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	testCfg := rest.CopyConfig(cfg)
	testCfg.Timeout = 30 * time.Second
	testCfg.QPS, testCfg.Burst = 500, 1000 // the churn's pace is the test's, not client-go's default 5/s
	if l.k8s, err = client.New(testCfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	kc.CurrentContext = "lab"
	l.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, l.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return l
}

// stopAPIServer stops the lab's apiserver (etcd stays): it is given one
// second to drain, as a crashed one would have none. startAPIServer
// brings it back on the same address, with the same certificates.
func (l *lab) stopAPIServer() {
	l.t.Helper()
	was := l.apiserver.StopTimeout
	l.apiserver.StopTimeout = time.Second
	defer func() { l.apiserver.StopTimeout = was }()
	if err := l.apiserver.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		l.t.Fatalf("stop the apiserver: %v", err)
	}
}

func (l *lab) startAPIServer() {
	l.t.Helper()
	if err := l.apiserver.Start(); err != nil {
		l.t.Fatalf("start the apiserver again: %v", err)
	}
}

// ip runs ip(8) with args, failing the test on an error.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// host is a network namespace of the lab's, with its two links.
type host struct {
	l                   *lab
	ns                  string
	apiLink, clientLink string // their ends in the test's namespace
	addr                string // the host's address on its client link
}

// host makes the lab's k-th host (k < 30).
func (l *lab) host(k int) *host {
	l.t.Helper()
	h := &host{l: l, ns: fmt.Sprintf("poise-lab%d-h%d", l.n, k),
		apiLink: fmt.Sprintf("pl%da%d", l.n, k), clientLink: fmt.Sprintf("pl%dc%d", l.n, k)}
	_ = exec.Command("ip", "netns", "del", h.ns).Run() // left by a test killed before its clean-up
	l.ip("netns", "add", h.ns)
	l.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() }) // takes its links with it
	base := 8 * k
	for i, link := range []struct{ root, inner string }{{h.apiLink, "api"}, {h.clientLink, "cli"}} {
		outer, inner := fmt.Sprintf("198.18.%d.%d", l.n, base+4*i+1), fmt.Sprintf("198.18.%d.%d", l.n, base+4*i+2)
		l.ip("link", "add", link.root, "type", "veth", "peer", "name", link.inner, "netns", h.ns)
		l.ip("addr", "add", outer+"/30", "dev", link.root)
		l.ip("link", "set", link.root, "up")
		l.ip("-n", h.ns, "addr", "add", inner+"/30", "dev", link.inner)
		l.ip("-n", h.ns, "link", "set", link.inner, "up")
		if i == 0 {
			l.ip("-n", h.ns, "route", "add", l.api+"/32", "via", outer)
		} else {
			h.addr = inner
		}
	}
	l.ip("-n", h.ns, "link", "set", "lo", "up")
	return h
}

// cut takes a link's end in the test's namespace down: every packet on it
// is dropped from now on. restore brings it back; a test that ends before
// it does has it restored first, so that the apiserver and the replica
// stop without waiting out connections that carry nothing.
func (h *host) cut(link string) {
	h.l.ip("link", "set", link, "down")
	h.l.t.Cleanup(func() { _ = exec.Command("ip", "link", "set", link, "up").Run() })
}

func (h *host) restore(link string) { h.l.ip("link", "set", link, "up") }

// replica is a controlplane serving from the lab's apiserver, on host h.
type replica struct {
	h     *host
	proc  *cpbinary.Process
	xds   string
	admin string // base URL
}

// serve starts a replica on h watching namespace ns (every namespace:
// ""), with extra flags; without --xds-auth among them it serves xDS
// without authentication.
func (h *host) serve(ns string, extra ...string) *replica {
	h.l.t.Helper()
	r := &replica{h: h, xds: h.addr + ":18000", admin: "http://" + h.addr + ":19000"}
	args := []string{"netns", "exec", h.ns, h.l.bin, "serve", "--source=kubernetes", "--kubeconfig", h.l.kubeconfig,
		"--xds-address", r.xds, "--admin-address", h.addr + ":19000", "--debounce", "20ms"}
	if ns != "" {
		args = append(args, "--namespace", ns)
	}
	if !slices.ContainsFunc(extra, func(f string) bool { return strings.HasPrefix(f, "--xds-auth") }) {
		args = append(args, "--xds-allow-anonymous-non-loopback")
	}
	args = append(args, extra...)
	r.proc = cpbinary.Start(h.l.t, "ip", args...)
	r.proc.WaitReady(h.l.t, r.admin)
	return r
}

// readyz is the replica's /readyz body ("" when it cannot be read).
func (r *replica) readyz() string { return r.get("/readyz") }

func (r *replica) get(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.admin+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return string(b)
}

// waitAdmin asks the replica's admin path every 50 ms until ok accepts the
// answer (a state only the admin port shows: it has no event to wait on),
// and returns how long it took; it fails the test after within.
func (r *replica) waitAdmin(what, path string, within time.Duration, ok func(string) bool) time.Duration {
	r.h.l.t.Helper()
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		if last = r.get(path); ok(last) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			r.h.l.t.Fatalf("%s: not within %v; %s says:\n%s", what, within, path, last)
		}
		select {
		case <-r.proc.Done():
			r.h.l.t.Fatalf("%s: the replica exited:\n%s", what, r.proc.Logs())
		case <-tick.C:
		}
	}
}
