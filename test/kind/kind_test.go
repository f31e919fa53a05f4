//go:build kind

package kind_test

// The kind end-to-end suite. `make e2e-kind` runs it with KIND and HELM set;
// it needs a Docker engine. It only ever connects to 127.0.0.1: the kind API
// server listens there (testdata/kind-config.yaml), and every request to a
// pod — Envoy's listeners, the control plane's admin port — goes through the
// API server's pod or service proxy (the spatial phase sends its requests to
// Service shop/envoy port spatial). (The kind nodes pull Envoy and http-echo
// from Docker Hub; the Poise image is built here and loaded, never pulled.)
//
// Environment:
//
//	KIND, HELM               the binaries (make e2e-kind sets them)
//	POISE_KIND_CLUSTER       cluster name (default poise-e2e)
//	POISE_KIND_REUSE=1       use an existing cluster of that name (helm upgrade --install)
//	POISE_KIND_KEEP=1        do not delete the cluster at the end
//	POISE_KIND_IMAGE         a Poise image already built: skip `make image`
//	POISE_KIND_ENVOY_IMAGE   replace the walkthrough's Envoy image
//	POISE_KIND_ECHO_IMAGE    replace the walkthrough's http-echo image
//	POISE_KIND_REQUESTS      requests per measurement (default 2000)

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/kubemanifests"
	"poise.dev/poise/test/testkit"
)

const (
	// sigmas is the tolerance of every per-zone share: the observed count of
	// a zone with computed share p out of n requests must lie within
	// sigmas·sqrt(n·p·(1-p)) of n·p (binomial); a zone computed at 0 or 100 %
	// must get exactly none or all. Envoy's weighted round robin is steadier
	// than binomial; 4.5 sigma keeps the dozen comparisons of a run (3 zones ×
	// 4 measurements) from failing by chance (7e-6 each) and still catches a
	// 25 % share off by more than 4.4 points at n = 2000.
	sigmas = 4.5

	// poll is how often a wait asks the cluster again: each ask is a few API
	// requests or an admin call through a port-forward.
	poll = 500 * time.Millisecond

	systemNS     = "poise-system"
	release      = "poise"
	adminPort    = "19000"
	envoyPort    = "10000"
	fieldOwner   = "poise-e2e"
	upImport     = "echo"        // Upstream importing Service echo
	upPinned     = "echo-pinned" // Upstream with EndpointSets
	pinnedPath   = "/pinned"
	downZone     = "eu-west-1a" // the zone made unready
	downPinned   = "echo-pinned-eu-west-1a"
	downPinnedIP = "10.96.0.201"
)

// suite is the cluster and the clients of one run.
type suite struct {
	t          *testing.T
	kind, helm string
	cluster    string
	kubeconfig string
	c          client.Client
	cs         *kubernetes.Clientset
	httpc      *http.Client // the API server's client, for proxied requests whose status and headers matter
	requests   int

	mu       sync.Mutex
	podZones map[string]string // echo pod → zone label
}

func TestKind(t *testing.T) {
	s := setUp(t)

	t.Run("zones", s.checkZones)
	// Envoy is served as who its token proves: ServiceAccount shop/envoy,
	// over TLS with the chart's generated certificate.
	t.Run("identity", s.checkIdentity)
	if t.Failed() {
		t.FailNow()
	}

	// All zones ready: priority 0 is eu-west, split 3:1 between 1a and 1b by
	// the Locality weights; us-east-1a is the standby.
	t.Run("split/"+upImport, func(t *testing.T) {
		s.measure(t, upImport, "/", func(u explain.Upstream) (bool, string) {
			return eligible(u, downZone) > 0 && eligible(u, "eu-west-1b") > 0, "waiting for both eu-west zones"
		})
	})
	t.Run("split/"+upPinned, func(t *testing.T) {
		s.measure(t, upPinned, pinnedPath, func(u explain.Upstream) (bool, string) {
			return traffic(u)[downZone] > 0, "waiting for eu-west-1a"
		})
	})
	t.Run("status", s.checkStatus)
	if t.Failed() {
		t.FailNow()
	}

	// eu-west-1a goes away: its Deployment is scaled to 0, and a prober (the
	// test, here) reports the zone's ClusterIP Unhealthy on the EndpointSet.
	s.scale(t, shopNS, "echo-"+downZone, 0)
	s.probeUnhealthy(t, downPinned, downPinnedIP, 80)

	t.Run("spill/"+upImport, func(t *testing.T) {
		u := s.measure(t, upImport, "/", func(u explain.Upstream) (bool, string) {
			return traffic(u)[downZone] == 0 && endpoints(u, downZone) == 0,
				fmt.Sprintf("eu-west-1a still has %d endpoints, traffic %d", endpoints(u, downZone), traffic(u)[downZone])
		})
		// The imported zone's endpoints are gone: eu-west-1b takes priority 0 whole.
		if got := traffic(u)["eu-west-1b"]; got != 1_000_000 {
			t.Errorf("explain: eu-west-1b traffic %d millionths, want all of it", got)
		}
	})
	t.Run("spill/"+upPinned, func(t *testing.T) {
		u := s.measure(t, upPinned, pinnedPath, func(u explain.Upstream) (bool, string) {
			return traffic(u)[downZone] == 0, fmt.Sprintf("eu-west-1a traffic %d", traffic(u)[downZone])
		})
		// Priority 0 keeps 1 of 2 units: health 140% × 1/2 = 70%, and 30%
		// spills to priority 1 (examples/kubernetes/30-upstream-endpointsets.yaml).
		tr := traffic(u)
		if tr["eu-west-1b"] != 700_000 || tr["us-east-1a"] != 300_000 {
			t.Errorf("explain: eu-west-1b %d, us-east-1a %d millionths; want 700000 and 300000", tr["eu-west-1b"], tr["us-east-1a"])
		}
	})
	t.Run("status-after-spill", s.checkStatus)

	// Spatial routing (examples/kubernetes/50-spatial.yaml): requests through
	// Envoy's spatial listener, each answer compared with the control plane's
	// /debug/explain-route; then eu-central is scaled to 0 and again
	// (spatial_kind_test.go).
	t.Run("spatial", s.checkSpatial)
}

// ---- setup ----

func setUp(t *testing.T) *suite {
	t.Helper()
	s := &suite{t: t, cluster: envOr("POISE_KIND_CLUSTER", "poise-e2e"), requests: 2000, podZones: map[string]string{}}
	if v := os.Getenv("POISE_KIND_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("POISE_KIND_REQUESTS=%q: want a number ≥ 100", v)
		}
		s.requests = n
	}

	// Tools. The suite was asked for explicitly (-tags kind): anything
	// missing is a failure that says what to do, never a skip.
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatal("the kind suite needs Docker: no docker on PATH (install Docker, or run the other suites with `make test`)")
	}
	if out, err := exec.Command(docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("the kind suite needs a running Docker engine: `docker info` failed: %v\n%s", err, out)
	}
	s.kind = tool(t, "KIND", "kind", "run `make e2e-kind` (hack/kind.sh builds kind from the Go module proxy) or set KIND")
	s.helm = tool(t, "HELM", "helm", "run `make e2e-kind` (hack/helm.sh builds helm) or set HELM")

	start := time.Now()
	s.createCluster(t)
	t.Logf("cluster %s ready in %v", s.cluster, time.Since(start).Round(time.Second))

	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(cfg.Host); err != nil || !net.ParseIP(u.Hostname()).IsLoopback() {
		t.Fatalf("the kind API server is at %s, not on loopback (testdata/kind-config.yaml sets apiServerAddress 127.0.0.1)", cfg.Host)
	}
	cfg.QPS, cfg.Burst = 200, 400 // requests go through the pod proxy
	cfg.Timeout = 30 * time.Second
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if s.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if s.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if s.httpc, err = rest.HTTPClientFor(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpState()
		}
	})

	start = time.Now()
	image := s.loadImage(t)
	t.Logf("image %s built and loaded in %v", image, time.Since(start).Round(time.Second))

	// The walkthrough's namespaces first: the chart writes its CA
	// certificate into shop (tls.generated.caNamespaces of the kind values).
	s.applyShop(t, "Namespace")

	start = time.Now()
	s.installChart(t, image)
	t.Logf("chart installed and rolled out in %v", time.Since(start).Round(time.Second))

	start = time.Now()
	s.applyShop(t)
	s.waitRollout(t, shopNS, 6*time.Minute)
	s.waitRollout(t, spatialNS, 3*time.Minute)
	t.Logf("examples/kubernetes applied and rolled out in %v", time.Since(start).Round(time.Second))
	return s
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func tool(t *testing.T, env, name, hint string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		if _, err := os.Stat(v); err != nil {
			t.Fatalf("%s=%s: %v", env, v, err)
		}
		return v
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("the kind suite needs %s: %s not set and no %s on PATH; %s", name, env, name, hint)
	}
	return p
}

// run runs a command with a timeout and returns its stdout; a failure fails
// the test with the command's output.
func run(t *testing.T, timeout time.Duration, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), tail(stderr.String(), 60))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (s *suite) createCluster(t *testing.T) {
	t.Helper()
	existing := strings.Fields(run(t, time.Minute, "", s.kind, "get", "clusters"))
	s.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if slices.Contains(existing, s.cluster) {
		if os.Getenv("POISE_KIND_REUSE") != "1" {
			t.Fatalf("a kind cluster named %s exists already: delete it (`%s delete cluster --name %s`), "+
				"set POISE_KIND_REUSE=1 to run in it, or POISE_KIND_CLUSTER to use another name", s.cluster, s.kind, s.cluster)
		}
		t.Logf("reusing kind cluster %s (POISE_KIND_REUSE=1)", s.cluster)
	} else {
		t.Cleanup(func() {
			if os.Getenv("POISE_KIND_KEEP") == "1" {
				t.Logf("keeping kind cluster %s (POISE_KIND_KEEP=1): `%s get kubeconfig --name %s`; delete it with `%s delete cluster --name %s`",
					s.cluster, s.kind, s.cluster, s.kind, s.cluster)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ctx, s.kind, "delete", "cluster", "--name", s.cluster).CombinedOutput(); err != nil {
				t.Errorf("kind delete cluster %s: %v\n%s", s.cluster, err, out)
			}
		})
		run(t, 10*time.Minute, "", s.kind, "create", "cluster", "--name", s.cluster, "--config", kindConfig,
			"--kubeconfig", s.kubeconfig, "--wait", "5m")
	}
	kc := run(t, time.Minute, "", s.kind, "get", "kubeconfig", "--name", s.cluster)
	if err := os.WriteFile(s.kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadImage builds the image with `make image` (or takes POISE_KIND_IMAGE)
// and loads it onto the nodes.
func (s *suite) loadImage(t *testing.T) string {
	t.Helper()
	image := os.Getenv("POISE_KIND_IMAGE")
	if image == "" {
		image = defaultImage
		run(t, 20*time.Minute, root, "make", "image", "IMAGE="+image)
	}
	run(t, 5*time.Minute, "", s.kind, "load", "docker-image", image, "--name", s.cluster)
	return image
}

func (s *suite) helmCmd(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.helm, append(args, "--kubeconfig", s.kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (s *suite) installChart(t *testing.T, image string) {
	t.Helper()
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		t.Fatalf("image %q has no tag", image)
	}
	verb := []string{"install"}
	if os.Getenv("POISE_KIND_REUSE") == "1" {
		verb = []string{"upgrade", "--install"}
	}
	// the CRD chart first, as docs/helm.md says (a cluster reused from before
	// it existed holds CRDs Helm does not own: take them over)
	crdArgs := append(slices.Clone(verb), "poise-crds", crdChartDir, "--namespace", systemNS, "--create-namespace", "--wait", "--timeout", "2m")
	if os.Getenv("POISE_KIND_REUSE") == "1" {
		crdArgs = append(crdArgs, "--take-ownership")
	}
	s.helmCmd(t, 3*time.Minute, crdArgs...)
	args := append(verb, release, chartDir, "--namespace", systemNS, "--create-namespace",
		"--values", kindValues, "--set", "image.repository="+image[:i], "--set", "image.tag="+image[i+1:],
		"--wait", "--timeout", "5m")
	out := s.helmCmd(t, 6*time.Minute, args...)
	if !strings.Contains(out, "poise.poise-system.svc:18000") {
		t.Errorf("helm's NOTES do not name poise.poise-system.svc:18000, the address the walkthrough's Envoy uses:\n%s", out)
	}
	s.waitRollout(t, systemNS, 3*time.Minute)
}

// applyShop applies examples/kubernetes with server-side apply, as
// `kubectl apply --server-side -f examples/kubernetes` does; with kinds, only
// the objects of those kinds.
func (s *suite) applyShop(t *testing.T, kinds ...string) {
	t.Helper()
	images := map[string]string{
		"envoy": os.Getenv("POISE_KIND_ENVOY_IMAGE"),
		"echo":  os.Getenv("POISE_KIND_ECHO_IMAGE"),
	}
	for _, u := range kubemanifests.Read(t, shopDir) {
		if len(kinds) > 0 && !slices.Contains(kinds, u.GetKind()) {
			continue
		}
		if u.GetKind() == "Deployment" {
			overrideImages(t, u, images)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
		cancel()
		if err != nil {
			t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

func overrideImages(t *testing.T, u *unstructured.Unstructured, images map[string]string) {
	t.Helper()
	ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	for i, c := range ctrs {
		m := c.(map[string]any)
		if img := images[m["name"].(string)]; img != "" {
			m["image"] = img
			ctrs[i] = m
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, ctrs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}

// waitRollout waits until every Deployment of the namespace has all its
// replicas updated and available.
func (s *suite) waitRollout(t *testing.T, ns string, timeout time.Duration) {
	t.Helper()
	testkit.EventuallyEvery(t, timeout, poll, "Deployments of "+ns+" rolled out", func() (bool, string) {
		var list appsv1.DeploymentList
		if err := s.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		if len(list.Items) == 0 {
			return false, "no Deployments"
		}
		for _, d := range list.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			st := d.Status
			if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
				return false, fmt.Sprintf("%s: %d/%d updated, %d available, %d total", d.Name, st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas)
			}
		}
		return true, ""
	})
}

// ---- checks ----

// checkZones: every echo pod runs on a node whose zone label is the zone the
// pod reports, so counting responses by reported zone counts by node zone.
func (s *suite) checkZones(t *testing.T) {
	var pods corev1.PodList
	if err := s.c.List(context.Background(), &pods, client.InNamespace(shopNS), client.MatchingLabels{"app": "echo"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		var node corev1.Node
		if err := s.c.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			t.Fatalf("pod %s: node %s: %v", p.Name, p.Spec.NodeName, err)
		}
		if got, want := node.Labels[zoneLabel], p.Labels["zone"]; got != want {
			t.Errorf("pod %s reports zone %s but runs on node %s in zone %s", p.Name, want, node.Name, got)
		}
		s.mu.Lock()
		s.podZones[p.Name] = p.Labels["zone"]
		s.mu.Unlock()
	}
	t.Logf("%d echo pods, each on a node of its zone", len(pods.Items))
}

// traffic is the computed traffic per zone, in millionths, summed over
// priorities.
func traffic(u explain.Upstream) map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			out[l.Zone] += l.Traffic
		}
	}
	return out
}

// endpoints counts the endpoints of a zone; eligible those that are eligible.
func endpoints(u explain.Upstream, zone string) int {
	n := 0
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			if l.Zone == zone {
				n += len(l.Endpoints)
			}
		}
	}
	return n
}

func eligible(u explain.Upstream, zone string) int {
	n := 0
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			if l.Zone != zone {
				continue
			}
			for _, e := range l.Endpoints {
				if e.Eligible {
					n++
				}
			}
		}
	}
	return n
}

// measure waits until the control plane serving Envoy computes what ready
// wants and Envoy has ACKed everything it was sent, sends s.requests
// requests through Envoy, and compares the responses per zone with the
// computed traffic. It returns the explain report it compared with.
func (s *suite) measure(t *testing.T, upstream, path string, ready func(explain.Upstream) (bool, string)) explain.Upstream {
	t.Helper()
	envoy := s.envoyPod(t)
	var (
		rep   explain.Report
		plane string
	)
	took := testkit.EventuallyEvery(t, 4*time.Minute, poll, fmt.Sprintf("%s/%s computed and ACKed by Envoy", shopNS, upstream), func() (bool, string) {
		var err error
		if plane, err = s.planeServing(envoy); err != nil {
			return false, err.Error()
		}
		rep = explain.Report{}
		if err := s.admin(plane, "/debug/explain", map[string]string{"upstream": shopNS + "/" + upstream}, &rep); err != nil {
			return false, err.Error()
		}
		if len(rep.Upstreams) != 1 {
			return false, fmt.Sprintf("explain has %d upstreams", len(rep.Upstreams))
		}
		if ok, why := ready(rep.Upstreams[0]); !ok {
			return false, why
		}
		if rep.Upstreams[0].Outcome != "Routable" {
			return false, "outcome " + rep.Upstreams[0].Outcome
		}
		// Envoy holds what was sent: every CDS and EDS response ACKed, none
		// NACKed, and the plane is still at the same revision.
		if ok, why := s.synced(plane, envoy); !ok {
			return false, why
		}
		var again explain.Report
		if err := s.admin(plane, "/debug/explain", map[string]string{"upstream": shopNS + "/" + upstream}, &again); err != nil {
			return false, err.Error()
		}
		if again.Revision != rep.Revision {
			return false, fmt.Sprintf("revision moved from %d to %d", rep.Revision, again.Revision)
		}
		return true, ""
	})
	u := rep.Upstreams[0]
	want := traffic(u)
	t.Logf("plane %s revision %d, Envoy %s in sync after %v; computed traffic (millionths): %v", plane, rep.Revision, envoy, took.Round(time.Millisecond), want)

	start := time.Now()
	got, failures := s.send(t, envoy, path, s.requests)
	t.Logf("%d requests through Envoy in %v: %v", s.requests, time.Since(start).Round(time.Millisecond), got)
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed, e.g. %v", len(failures), s.requests, failures[:min(3, len(failures))])
	}
	n := float64(s.requests - len(failures))
	zones := map[string]bool{}
	for z := range want {
		zones[z] = true
	}
	for z := range got {
		zones[z] = true
	}
	for _, z := range sortedKeys(zones) {
		p := float64(want[z]) / 1e6
		expected := n * p
		sd := math.Sqrt(n * p * (1 - p))
		diff := math.Abs(float64(got[z]) - expected)
		status := "ok"
		if diff > sigmas*sd+1e-9 && !(sd == 0 && diff < 0.5) {
			status = "OUT OF TOLERANCE"
			t.Errorf("zone %s: %d of %.0f responses, computed %.4f%% → %.1f ± %.1f (%.1f sigma allowed)", z, got[z], n, p*100, expected, sigmas*sd, sigmas)
		}
		t.Logf("  zone %-11s observed %5d (%.2f%%)  computed %.4f%%  |Δ| %.1f  4.5σ %.1f  %s", z, got[z], 100*float64(got[z])/n, p*100, diff, sigmas*sd, status)
	}
	return u
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// send makes n GET requests to Envoy's listener through the API server's pod
// proxy (8 at a time) and counts the responding zones. A response names the
// zone, pod and node (http-echo's -text); a pod that is not an echo pod of
// that zone is a failure.
func (s *suite) send(t *testing.T, envoy, path string, n int) (map[string]int, []string) {
	t.Helper()
	var (
		mu       sync.Mutex
		counts   = map[string]int{}
		failures []string
		wg       sync.WaitGroup
		next     = make(chan struct{})
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				body, err := s.cs.CoreV1().Pods(shopNS).ProxyGet("http", envoy, envoyPort, path, nil).DoRaw(ctx)
				cancel()
				zone, pod, perr := parseEcho(string(body))
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("%v: %s", err, bytes.TrimSpace(body)))
				case perr != nil:
					failures = append(failures, perr.Error())
				default:
					counts[zone]++
					s.mu.Lock()
					known, ok := s.podZones[pod]
					s.mu.Unlock()
					if ok && known != zone {
						failures = append(failures, fmt.Sprintf("pod %s of zone %s answered as %s", pod, known, zone))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return counts, failures
}

// parseEcho reads "zone=Z pod=P node=N".
func parseEcho(body string) (zone, pod string, err error) {
	f := echoFields(body)
	if f["zone"] == "" || f["pod"] == "" {
		return "", "", fmt.Errorf("not an echo response: %q", body)
	}
	return f["zone"], f["pod"], nil
}

// echoFields reads the "key=value" fields of an echo backend's answer.
func echoFields(body string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(body) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

// admin GETs a path of a control plane pod's admin port through the API
// server's pod proxy and decodes the JSON.
func (s *suite) admin(pod, path string, params map[string]string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := s.cs.CoreV1().Pods(systemNS).ProxyGet("http", pod, adminPort, path, params).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET %s%s from %s: %v: %s", path, params, pod, err, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

type clientsView struct {
	Clients []clientState `json:"clients"`
}

// clientState is one stream of /debug/clients.
type clientState struct {
	NodeID   string `json:"nodeId"`
	Identity *struct {
		Principal string    `json:"principal"`
		Method    string    `json:"method"`
		Pod       string    `json:"pod"`
		Expires   time.Time `json:"expires"`
	} `json:"identity"`
	Types map[string]struct {
		LastSentVersion  string `json:"lastSentVersion"`
		LastAckedVersion string `json:"lastAckedVersion"`
		NACKs            uint64 `json:"nacks"`
		LastNACK         *struct {
			Error string `json:"error"`
		} `json:"lastNack"`
	} `json:"types"`
}

// clientOf is Envoy's stream on the plane, or why there is none.
func (s *suite) clientOf(plane, envoy string) (*clientState, string) {
	var v clientsView
	if err := s.admin(plane, "/debug/clients", nil, &v); err != nil {
		return nil, err.Error()
	}
	for i := range v.Clients {
		if v.Clients[i].NodeID == envoy {
			return &v.Clients[i], ""
		}
	}
	return nil, "Envoy is not connected to " + plane
}

// planeServing is the control plane pod Envoy's ADS stream is on (Envoy's
// node id is its pod name).
func (s *suite) planeServing(envoy string) (string, error) {
	var pods corev1.PodList
	if err := s.c.List(context.Background(), &pods, client.InNamespace(systemNS),
		client.MatchingLabels{"app.kubernetes.io/name": "poise", "app.kubernetes.io/instance": release}); err != nil {
		return "", err
	}
	var seen []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		c, why := s.clientOf(p.Name, envoy)
		if c != nil {
			return p.Name, nil
		}
		seen = append(seen, p.Name+": "+why)
	}
	return "", fmt.Errorf("no control plane pod serves Envoy %s: %v", envoy, seen)
}

// synced: Envoy ACKed the last CDS and EDS responses the plane sent it and
// NACKed none.
func (s *suite) synced(plane, envoy string) (bool, string) {
	return s.syncedTypes(plane, envoy, "CDS", "EDS")
}

// syncedTypes: Envoy ACKed the last response of each type the plane sent it
// and NACKed none.
func (s *suite) syncedTypes(plane, envoy string, types ...string) (bool, string) {
	c, why := s.clientOf(plane, envoy)
	if c == nil {
		return false, why
	}
	for _, typ := range types {
		st, ok := c.Types[typ]
		switch {
		case !ok || st.LastSentVersion == "":
			return false, "nothing of " + typ + " sent yet"
		case st.NACKs > 0:
			msg := ""
			if st.LastNACK != nil {
				msg = st.LastNACK.Error
			}
			s.t.Errorf("Envoy NACKed %s: %s", typ, msg)
			return false, "NACK"
		case st.LastAckedVersion != st.LastSentVersion:
			return false, fmt.Sprintf("%s sent %s, ACKed %s", typ, st.LastSentVersion, st.LastAckedVersion)
		}
	}
	return true, ""
}

func (s *suite) envoyPod(t *testing.T) string {
	t.Helper()
	var pods corev1.PodList
	if err := s.c.List(context.Background(), &pods, client.InNamespace(shopNS), client.MatchingLabels{"app": "envoy"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	t.Fatalf("no running Envoy pod in %s", shopNS)
	return ""
}

// checkIdentity: the control plane serving Envoy shows Envoy's stream as
// proven by a token of ServiceAccount shop/envoy bound to Envoy's pod, which
// it can only have received over TLS (call credentials are never sent in
// plaintext), expiring within the hour the projected volume asks for.
func (s *suite) checkIdentity(t *testing.T) {
	envoy := s.envoyPod(t)
	testkit.EventuallyEvery(t, 2*time.Minute, poll, "Envoy "+envoy+" served with its token's identity", func() (bool, string) {
		plane, err := s.planeServing(envoy)
		if err != nil {
			return false, err.Error()
		}
		c, why := s.clientOf(plane, envoy)
		if c == nil {
			return false, why
		}
		id := c.Identity
		switch {
		case id == nil:
			return false, "no identity on Envoy's stream"
		case id.Principal != shopNS+"/envoy" || id.Method != "token":
			t.Errorf("Envoy's stream is proven as %q by %q, want %s/envoy by token", id.Principal, id.Method, shopNS)
		case id.Pod != shopNS+"/"+envoy:
			t.Errorf("Envoy's token is bound to pod %q, want %s/%s", id.Pod, shopNS, envoy)
		case id.Expires.IsZero() || time.Until(id.Expires) > time.Hour+time.Minute:
			t.Errorf("Envoy's proof expires at %v: the projected token lives an hour", id.Expires)
		}
		t.Logf("plane %s serves Envoy %s as %s (%s, pod %s, until %v)", plane, envoy, id.Principal, id.Method, id.Pod, id.Expires)
		return true, ""
	})
}

// checkStatus: the Upstream status the elected replica writes carries the
// same traffic per locality as /debug/explain.
func (s *suite) checkStatus(t *testing.T) {
	envoy := s.envoyPod(t)
	plane, err := s.planeServing(envoy)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{upImport, upPinned} {
		testkit.EventuallyEvery(t, time.Minute, poll, "status of Upstream "+name+" matches explain", func() (bool, string) {
			var rep explain.Report
			if err := s.admin(plane, "/debug/explain", map[string]string{"upstream": shopNS + "/" + name}, &rep); err != nil {
				return false, err.Error()
			}
			if len(rep.Upstreams) != 1 {
				return false, fmt.Sprintf("explain has %d upstreams", len(rep.Upstreams))
			}
			var up v1alpha1.Upstream
			if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: shopNS, Name: name}, &up); err != nil {
				return false, err.Error()
			}
			if up.Status.ObservedGeneration != up.Generation {
				return false, fmt.Sprintf("observedGeneration %d, generation %d", up.Status.ObservedGeneration, up.Generation)
			}
			got := map[string]uint64{}
			for _, l := range up.Status.Localities {
				got[l.Zone] += uint64(l.Traffic)
			}
			want := traffic(rep.Upstreams[0])
			for z := range want {
				if want[z] == 0 {
					delete(want, z)
				}
			}
			for z := range got {
				if got[z] == 0 {
					delete(got, z)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return false, fmt.Sprintf("status traffic %v, explain %v", got, want)
			}
			return true, ""
		})
	}
}

// ---- making a zone unready ----

func (s *suite) scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	var d appsv1.Deployment
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &replicas
	if err := s.c.Patch(context.Background(), &d, patch); err != nil {
		t.Fatalf("scale %s to %d: %v", name, replicas, err)
	}
	t.Logf("scaled Deployment %s/%s to %d", ns, name, replicas)
}

// probeUnhealthy does what a prober does: it writes an endpoint's health to
// the EndpointSet's status. The spec (admin state) is left alone.
func (s *suite) probeUnhealthy(t *testing.T, set, address string, port int32) {
	t.Helper()
	var es v1alpha1.EndpointSet
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: shopNS, Name: set}, &es); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(es.DeepCopy())
	es.Status.Health = []v1alpha1.EndpointHealth{{Address: address, Port: port, Probe: v1alpha1.ProbeUnhealthy}}
	if err := s.c.Status().Patch(context.Background(), &es, patch); err != nil {
		t.Fatalf("write the health of EndpointSet %s: %v", set, err)
	}
	t.Logf("EndpointSet %s/%s: %s:%d reported Unhealthy in status", shopNS, set, address, port)
}

// ---- diagnostics ----

// dumpState logs what a failed run needs: pods, and the last log lines of
// the control plane and Envoy.
func (s *suite) dumpState() {
	t := s.t
	for _, ns := range []string{systemNS, shopNS, spatialNS} {
		var pods corev1.PodList
		if err := s.c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			t.Logf("list pods in %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			var states []string
			for _, cs := range p.Status.ContainerStatuses {
				st := "running"
				if w := cs.State.Waiting; w != nil {
					st = w.Reason + ": " + w.Message
				} else if term := cs.State.Terminated; term != nil {
					st = "terminated: " + term.Reason
				}
				states = append(states, fmt.Sprintf("%s ready=%v %s", cs.Name, cs.Ready, st))
			}
			t.Logf("pod %s/%s on %s: %s %v", ns, p.Name, p.Spec.NodeName, p.Status.Phase, states)
			if ns == systemNS || p.Labels["app"] == "envoy" {
				var lines int64 = 40
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				logs, err := s.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
				cancel()
				if err == nil {
					t.Logf("logs of %s/%s (last %d lines):\n%s", ns, p.Name, lines, logs)
				}
			}
		}
	}
	if os.Getenv("POISE_KIND_KEEP") != "1" {
		t.Logf("rerun with POISE_KIND_KEEP=1 to keep the cluster for debugging")
	}
}
