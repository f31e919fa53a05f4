package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/test/testkit"
)

// One apiserver and etcd for the whole binary: they take seconds to start.
// Each test works in its own namespace.
var (
	restConfig *rest.Config
	k8s        client.Client
	// skipReason is set when POISE_SKIP_ENVTEST=1 opted out of the suite.
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// client-go's and controller-runtime's process-wide loggers are set
	// before any test's client starts, so that no plane's Run sets them
	// while another test's client reads them; their errors reach stderr,
	// each plane's own log stays the plane's
	controlplane.RouteLibraryLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err := withCallCreds(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	assets, skip, err := testkit.EnvtestAssets("test/kube")
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case skip != "":
		skipReason = skip
		return m.Run()
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/kube: starting kube-apiserver and etcd from %s: %v\n", assets, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "test/kube: stopping envtest: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "test/kube: kube-apiserver and etcd up in %v\n", time.Since(start).Round(time.Millisecond))
	scheme, err := source.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cfg
	testCfg := rest.CopyConfig(cfg)
	testCfg.Timeout = 30 * time.Second // no API call of the tests' own hangs
	if k8s, err = client.New(testCfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// envtest waits until the CRDs are served per group-version; the
	// aggregated discovery the REST mapper reads can lag behind that
	if err := waitServed(); err != nil {
		fmt.Fprintf(os.Stderr, "test/kube: %v\n", err)
		return 1
	}
	return m.Run()
}

// waitServed waits until the client can list every kind of the CRDs.
func waitServed() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range []client.ObjectList{
		&v1alpha1.UpstreamList{}, &v1alpha1.LocalityList{}, &v1alpha1.EndpointSetList{},
		&v1alpha1.SpatialDomainList{}, &v1alpha1.PartitionList{},
	} {
		var last error
		if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			last = k8s.List(ctx, l, client.Limit(1))
			return last == nil, nil
		}); err != nil {
			return fmt.Errorf("the CRDs of config/crd are not served after 30s: %w", last)
		}
	}
	return nil
}

// needEnv skips only when the suite was switched off explicitly.
func needEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

var nsCounter atomic.Int64

// namespace creates a namespace of the test's own.
func namespace(t *testing.T) string {
	t.Helper()
	needEnv(t)
	base := strings.ToLower(t.Name())
	base = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, base)
	if len(base) > 40 {
		base = base[:40]
	}
	name := fmt.Sprintf("%s-%d", strings.Trim(base, "-"), nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}
