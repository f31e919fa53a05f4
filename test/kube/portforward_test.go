package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// kubelet plays the one part of a node the apiserver needs for a
// port-forward: its HTTPS port, where the apiserver proxies POST
// /portForward/NAMESPACE/POD (upgraded to SPDY, protocol portforward.k8s.io)
// and opens a pair of streams, error and data, per connection to a port. A
// real kubelet then connects inside the pod's network namespace; here each
// pod's ports are the loopback addresses of the processes that play it.
// Nothing else of a node is played: envtest runs no kubelet, so no pod
// runs, and this is the only way a port-forward through the real apiserver
// reaches anything.
type kubelet struct {
	srv *httptest.Server

	mu    sync.Mutex
	pods  map[string]map[int]string // namespace/pod → port → address
	asked []string                  // "POST /portForward/NS/POD port N", in order
}

func startKubelet(t *testing.T) *kubelet {
	t.Helper()
	k := &kubelet{pods: map[string]map[int]string{}}
	k.srv = httptest.NewTLSServer(http.HandlerFunc(k.serve))
	t.Cleanup(k.srv.Close)
	return k
}

// play makes addr what port of pod ns/name reaches.
func (k *kubelet) play(ns, name string, port int, addr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pods[ns+"/"+name] == nil {
		k.pods[ns+"/"+name] = map[int]string{}
	}
	k.pods[ns+"/"+name][port] = addr
}

func (k *kubelet) requests() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.asked...)
}

func (k *kubelet) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/portForward/"), "/")
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/portForward/") || len(parts) != 2 {
		http.Error(w, "not a port-forward", http.StatusNotFound)
		return
	}
	pod := parts[0] + "/" + parts[1]
	if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		return
	}
	streams := make(chan httpstream.Stream, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	pairs := map[string][2]httpstream.Stream{} // requestID → error, data
	for {
		select {
		case s := <-streams:
			id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
			p := pairs[id]
			if s.Headers().Get(corev1.StreamType) == corev1.StreamTypeError {
				p[0] = s
			} else {
				p[1] = s
			}
			pairs[id] = p
			if p[0] != nil && p[1] != nil {
				delete(pairs, id)
				go k.forward(pod, p[0], p[1])
			}
		case <-conn.CloseChan():
			return
		}
	}
}

// forward connects one data stream to the port it names, or says on its
// error stream why not, as a kubelet does.
func (k *kubelet) forward(pod string, errStream, data httpstream.Stream) {
	defer errStream.Close()
	defer data.Close()
	port, _ := strconv.Atoi(data.Headers().Get(corev1.PortHeader))
	k.mu.Lock()
	k.asked = append(k.asked, fmt.Sprintf("POST /portForward/%s port %d", pod, port))
	addr, ok := k.pods[pod][port]
	k.mu.Unlock()
	if !ok {
		fmt.Fprintf(errStream, "pod %s: nothing listens on port %d", pod, port)
		return
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(errStream, "pod %s port %d: %v", pod, port, err)
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, data)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(data, c)
	<-done
}

// node registers the kubelet as a node of the cluster, for pods on it.
func (k *kubelet) node(t *testing.T, name string) {
	t.Helper()
	u, _ := url.Parse(k.srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	p, _ := strconv.Atoi(port)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ctx := context.Background()
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	if err := k8s.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// chartPod creates a pod as the chart's Deployment does for release
// poise (its labels, its container's --admin-address) on node, in phase.
func chartPod(t *testing.T, ns, name, node, adminAddress string, phase corev1.PodPhase) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			"app.kubernetes.io/name": "poise", "app.kubernetes.io/instance": "poise",
			"app.kubernetes.io/component": "controlplane", "app.kubernetes.io/part-of": "poise",
		}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "controlplane", Image: "poise:test",
			Args: []string{"serve", "--source=kubernetes", "--admin-address=" + adminAddress}}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = phase
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// TestStatusThroughPortForward: `controlplane status -n NS` finds every
// running pod of the release by the chart's labels, reaches each one's
// admin port (on the port of its --admin-address) through the real
// apiserver's portforward subresource, and lists each replica by its pod
// name with its version and, per client, SYNCED or NACKED; a pending pod is
// named and not asked. proxy-config finds the replica a node is on the
// same way. The replicas are real binaries, the clients real ADS streams;
// the one part played is the node's kubelet behind the apiserver (envtest
// runs none), which connects each stream to the replica's loopback
// address as a kubelet connects it inside the pod.
func TestStatusThroughPortForward(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	bin := cpbinary.Build(t)
	k := startKubelet(t)
	k.node(t, ns+"-node")

	type replica struct{ pod, admin, xds, podAdmin string }
	replicas := []replica{
		{pod: "poise-7d9c8-a", podAdmin: "127.0.0.1:19000"},
		{pod: "poise-7d9c8-b", podAdmin: "127.0.0.1:19005"}, // another --admin-address: its port is read
	}
	for i := range replicas {
		r := &replicas[i]
		r.admin, r.xds = cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
		cpbinary.Start(t, bin, "serve", "-f", "../../examples", "--xds-address", r.xds, "--admin-address", r.admin)
		_, port, _ := net.SplitHostPort(r.podAdmin)
		p, _ := strconv.Atoi(port)
		k.play(ns, r.pod, p, r.admin)
		chartPod(t, ns, r.pod, ns+"-node", r.podAdmin, corev1.PodRunning)
	}
	chartPod(t, ns, "poise-7d9c8-c", ns+"-node", "127.0.0.1:19000", corev1.PodPending)
	// another release's pod in the namespace is not asked
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other-0", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/instance": "other",
		"app.kubernetes.io/part-of": "poise", "app.kubernetes.io/component": "controlplane"}},
		Spec: corev1.PodSpec{NodeName: ns + "-node", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := k8s.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		testkit.Eventually(t, 30*time.Second, r.pod+" ready", func() (bool, string) {
			resp, err := http.Get("http://" + r.admin + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}
	nack := adstest.Dial(t, replicas[0].xds, &core.Node{Id: "envoy-nack", Cluster: "test", UserAgentName: "envoy"})
	nack.NACK(nack.Ask(resource.ClusterType), "", "unsupported lb_policy")
	zone := adstest.Dial(t, replicas[1].xds, &core.Node{Id: "envoy-zone", Cluster: "test", UserAgentName: "envoy",
		Locality: &core.Locality{Region: "eu-west", Zone: "eu-west-1b"}})
	zone.ACK(zone.Ask(resource.ClusterType))

	kubeconfig := writeKubeconfig(t, t.TempDir(), "default")
	wantVersion := versionOf(t, bin)
	var rep struct {
		Replicas []struct {
			Replica, Version string
			Clients          int
		} `json:"replicas"`
		Clients []struct {
			Replica string        `json:"replica"`
			Client  server.Client `json:"client"`
		} `json:"clients"`
	}
	testkit.Eventually(t, 30*time.Second, "status through the port-forwards lists both replicas' clients", func() (bool, string) {
		stdout, stderr, code := runCommand(t, bin, "status", "--kubeconfig", kubeconfig, "-n", ns, "-o", "json")
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			return false, err.Error()
		}
		states := map[string]string{}
		for _, c := range rep.Clients {
			states[c.Replica+" "+c.Client.NodeID] = c.Client.Types["CDS"].State
		}
		return states[replicas[0].pod+" envoy-nack"] == server.NACKed && states[replicas[1].pod+" envoy-zone"] == server.Synced &&
			len(rep.Replicas) == 2, stdout
	})
	for i, r := range rep.Replicas {
		if r.Replica != replicas[i].pod || r.Version != wantVersion || r.Clients != 1 {
			t.Errorf("replica %d: %+v; want pod %s, version %s, one client", i, r, replicas[i].pod, wantVersion)
		}
	}
	// the port-forwards the apiserver proxied: to each running pod of the
	// release, on the port of its --admin-address
	asked := strings.Join(k.requests(), "\n")
	for _, want := range []string{"POST /portForward/" + ns + "/poise-7d9c8-a port 19000", "POST /portForward/" + ns + "/poise-7d9c8-b port 19005"} {
		if !strings.Contains(asked, want) {
			t.Errorf("the kubelet was not asked %q; it was asked:\n%s", want, asked)
		}
	}
	if strings.Contains(asked, "poise-7d9c8-c") || strings.Contains(asked, "other-0") {
		t.Errorf("a pending pod or another release's was asked:\n%s", asked)
	}

	stdout, stderr, code := runCommand(t, bin, "status", "--kubeconfig", kubeconfig, "-n", ns)
	t.Logf("controlplane status -n %s:\n%s%s", ns, stdout, stderr)
	if code != 0 || !strings.Contains(stderr, "note: pod poise-7d9c8-c is Pending: not asked") ||
		!strings.Contains(stdout, "poise-7d9c8-a") || !strings.Contains(stdout, "NACKED") {
		t.Errorf("status text: exit %d", code)
	}

	// proxy-config finds the replica the node is on
	stdout, stderr, code = runCommand(t, bin, "proxy-config", "envoy-zone", "--kubeconfig", kubeconfig, "-n", ns, "--type", "clusters")
	t.Logf("controlplane proxy-config envoy-zone -n %s:\n%s%s", ns, stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "NODE envoy-zone on poise-7d9c8-b") || !strings.Contains(stdout, "class eu-west/eu-west-1b") ||
		!strings.Contains(stderr, "note: replica poise-7d9c8-a: no xDS client with node id") {
		t.Errorf("proxy-config through the port-forward: exit %d", code)
	}

	// a pod whose admin port nothing answers is named, the others listed
	k.play(ns, replicas[1].pod, 19005, cpbinary.FreeAddr(t))
	stdout, stderr, code = runCommand(t, bin, "status", "--kubeconfig", kubeconfig, "-n", ns, "--timeout", "5s")
	if code != 1 || !strings.Contains(stderr, "error: replica poise-7d9c8-b:") || !strings.Contains(stdout, "envoy-nack") {
		t.Errorf("status with a replica that does not answer: exit %d\n%s%s", code, stdout, stderr)
	}
	// no pod of the release: exit 1, naming where it looked
	if _, stderr, code := runCommand(t, bin, "status", "--kubeconfig", kubeconfig, "-n", ns, "--release", "nope"); code != 1 ||
		!strings.Contains(stderr, "no running pod of release nope (--release; -n for another namespace) in namespace "+ns) {
		t.Errorf("status of no release: exit %d: %s", code, stderr)
	}
}

// versionOf is what bin says its version is.
func versionOf(t *testing.T, bin string) string {
	t.Helper()
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(runBinary(t, bin, "version", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	return v.Version
}

// runCommand runs bin with args for at most a minute: its stdout, stderr
// and exit code.
func runCommand(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}
