package kube_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/testkit"
)

// outage is how long the apiserver stays down: long enough for client-go's
// own reflector backoff (800 ms doubling to a 30 s cap, full jitter) to
// reach intervals of 12.8 to 25.6 s, so that without the source's own
// retry the informers would resume well after resumeBound.
const (
	outage      = 25 * time.Second
	resumeBound = 10 * time.Second
)

// TestAPIServerRestart: after the apiserver comes back,
// a change made then reaches the topology within resumeBound (not after
// client-go's 40 to 70 s); while it is away /readyz stays ready with a
// warning naming the broken watch, and poise_kube_source_stale_seconds
// counts up; both clear once the watches work again.
//
// It runs an apiserver and etcd of its own (the suite's shared one stays
// up for the other tests): the apiserver has a certificate directory of the
// test's, so Stop keeps its serving certificate and port and Start brings
// it back at the same address with the same CA, as a restarted apiserver
// behind a Service would be.
// Its apiserver comes back on the port it had, one below the ephemeral range
// (restartPort) that no other test's listener can take meanwhile, so it
// runs in parallel with them: the outage is time that must pass.
func TestAPIServerRestart(t *testing.T) {
	needEnv(t)
	if testing.Short() {
		t.Skip("keeps an apiserver down for 25s")
	}
	t.Parallel()
	apiserver := &envtest.APIServer{CertDir: t.TempDir()}
	apiserver.SecureServing.ListenAddr = envtest.ListenAddr{Address: "127.0.0.1", Port: restartPort(t)}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"),
		ControlPlane:          envtest.ControlPlane{APIServer: apiserver},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start a second apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop envtest: %v", err)
		}
	})
	scheme, err := source.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	testCfg := rest.CopyConfig(cfg)
	testCfg.Timeout = 10 * time.Second
	c, err := client.New(testCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "restart"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	create := func(i int) {
		t.Helper()
		for _, o := range replicaObjects(ns, i) {
			testkit.Eventually(t, 30*time.Second, "create "+o.GetName(), func() (bool, string) {
				if err := c.Create(ctx, o); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
		}
	}
	create(0)
	p := startPlaneWith(t, ns, "restart", func(pc *controlplane.Config) { pc.RestConfig = cfg })
	served := func(u explain.Upstream) (bool, string) {
		n := 0
		for _, pr := range u.Priorities {
			for _, l := range pr.Localities {
				n += len(l.Endpoints)
			}
		}
		return n > 0, "no endpoints yet"
	}
	p.waitExplain(t, ns, replicaUpstream(0), "svc-0 served", served)
	if w := readyz(t, p); strings.Contains(w, "warning") {
		t.Fatalf("/readyz before the outage: %q, want no warning", w)
	}

	// the apiserver goes away: the plane stays ready, says what is stale
	// It would drain for 20s, serving: it is killed after 1s, as a crashed
	// one would be, and the outage counts from then.
	apiserver.StopTimeout = time.Second
	if err := apiserver.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		t.Fatalf("stop the apiserver: %v", err)
	}
	down := time.Now()
	testkit.Eventually(t, 10*time.Second, "a warning on /readyz", func() (bool, string) {
		w := readyz(t, p)
		return strings.Contains(w, "warning: kubernetes: the watch of") && strings.Contains(w, "Upstream") &&
			strings.Contains(w, "the topology last seen keeps serving"), w
	})
	// the outage lasts: all along, the plane is ready (readyz fails the
	// test otherwise) and serves the topology last seen
	holds(t, outage-time.Since(down), 500*time.Millisecond, "the topology last seen served while the apiserver is down", func() string {
		readyz(t, p)
		if _, err := p.explainOf(ns, replicaUpstream(0)); err != nil {
			return err.Error()
		}
		return ""
	})
	if s := staleSeconds(t, p); s["Upstream"] < (outage - 10*time.Second).Seconds() {
		t.Errorf("poise_kube_source_stale_seconds after %v down: %v, want Upstream's to count the outage", outage, s)
	}

	// it comes back; a change made now is served within resumeBound
	if err := apiserver.Start(); err != nil {
		t.Fatalf("start the apiserver again: %v", err)
	}
	back := time.Now()
	t.Logf("apiserver down %v, back in %v", back.Sub(down).Round(time.Millisecond), time.Since(down)-outage)
	create(1)
	created := time.Now()
	_, took := p.waitExplain(t, ns, replicaUpstream(1), "svc-1, created after the restart, served", served)
	if since := time.Since(back); since > resumeBound {
		t.Errorf("svc-1 served %v after the apiserver was back (created %v after), want within %v", since, created.Sub(back), resumeBound)
	} else {
		t.Logf("svc-1 served %v after the apiserver was back (%v after it was created)", since.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	testkit.Eventually(t, resumeBound, "every watch working again", func() (bool, string) {
		s := staleSeconds(t, p)
		for kind, v := range s {
			if v > 0 {
				return false, kind + " still stale: " + strconv.FormatFloat(v, 'f', 1, 64)
			}
		}
		if len(s) < 5 {
			return false, "poise_kube_source_stale_seconds has too few kinds"
		}
		if w := readyz(t, p); strings.Contains(w, "warning") {
			return false, w
		}
		return true, ""
	})
}

// readyz returns /readyz's body, failing the test unless it is 200.
func readyz(t *testing.T, p *plane) string {
	t.Helper()
	resp, err := http.Get(p.adminURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s: %s", resp.Status, b)
	}
	return string(b)
}

// staleSeconds reads poise_kube_source_stale_seconds by kind from /metrics.
func staleSeconds(t *testing.T, p *plane) map[string]float64 {
	t.Helper()
	resp, err := http.Get(p.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	const prefix = `poise_kube_source_stale_seconds{kind="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		kind, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[kind] = v
	}
	return out
}
