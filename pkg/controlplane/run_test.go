package controlplane_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/test/testkit"
)

// scrape runs the control plane on the examples and returns /metrics once
// the upstream gauges are set.
func scrape(t *testing.T, cfg controlplane.Config) string {
	t.Helper()
	cfg.Paths = []string{"../../examples"}
	a, _ := startPlane(t, cfg)
	var out string
	testkit.Eventually(t, 10*time.Second, "the upstream gauges on /metrics", func() (bool, string) {
		resp, err := http.Get("http://" + a.Admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s\n%s", resp.Status, b)
		}
		out = string(b)
		return strings.Contains(out, "poise_upstream_priority_load{"), "no poise_upstream_priority_load series yet"
	})
	return out
}

func TestMetricsServed(t *testing.T) {
	t.Parallel()
	out := scrape(t, controlplane.Config{Version: "v9.9.9"})
	for _, want := range []string{
		`poise_upstream_priority_load{`, `poise_upstream_locality_traffic{`, `poise_build_info{goversion="`,
		`version="v9.9.9"`, `poise_xds_nacks_total{type="EDS"} 0`, `poise_xds_connected_clients{kind="envoy"} 0`,
		`poise_source_batches_total{result="rejected",source="files"} 0`, `poise_status_leader 0`,
		`poise_source_invalid_objects{kind="Upstream"} 0`, `poise_xds_client_class_fallback_streams 0`,
		`poise_xds_client_class_overflow_streams 0`, `poise_xds_client_classes{rendering="`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

func TestMetricsWithoutLocalityGauges(t *testing.T) {
	t.Parallel()
	out := scrape(t, controlplane.Config{MetricsNoLocalityGauges: true})
	if !strings.Contains(out, "poise_upstream_priority_load{") || strings.Contains(out, "poise_upstream_locality_traffic{") {
		t.Error("with the locality gauges off: want priority loads and no locality traffic")
	}
}
