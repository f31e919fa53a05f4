package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"poise.dev/poise/pkg/controlplane"
)

// explainEndpoints returns every endpoint object in /debug/explain's report
// of upstream, by "address:port".
func explainEndpoints(t *testing.T, admin, upstream string) map[string]map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/explain?upstream=" + upstream)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if a, ok := v["address"].(string); ok {
				if p, ok := v["port"].(float64); ok {
					out[fmt.Sprintf("%s:%d", a, int(p))] = v
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}

// TestActiveHealthCheckInFilesMode runs the plane on a manifest whose
// upstream checks a real gRPC health server: its endpoint turns ineligible,
// with the check as the origin, once the server says NOT_SERVING for
// unhealthyThreshold checks, and eligible again once it serves.
func TestActiveHealthCheckInFilesMode(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	port := lis.Addr().(*net.TCPAddr).Port

	const interval, threshold = time.Second, 2 // the API's shortest interval
	dir := t.TempDir()
	manifest := fmt.Sprintf(`apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: api, namespace: shop}
spec:
  protocol: GRPC
  addressPolicy: {allowLoopback: true}
  healthCheck: {type: GRPC, interval: %s, timeout: 500ms, unhealthyThreshold: %d, healthyThreshold: 1, jitterPercent: 0}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: api-a, namespace: shop}
spec:
  upstream: api
  locality: {region: r1}
  endpoints:
  - {address: 127.0.0.1, port: %d}
`, interval, threshold, port)
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- controlplane.Run(ctx, controlplane.Config{Paths: []string{dir}, XDSAddress: "127.0.0.1:0", AdminAddress: "127.0.0.1:0",
			Started: func(a controlplane.Addrs) { started <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	var admin string
	select {
	case a := <-started:
		admin = a.Admin
	case err := <-done:
		t.Fatalf("control plane: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not start")
	}
	target := fmt.Sprintf("127.0.0.1:%d", port)
	// waitFor polls explain until the endpoint is as wanted, or fails
	// after within.
	waitFor := func(what string, within time.Duration, ok func(e map[string]any) bool) map[string]any {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			e := explainEndpoints(t, admin, "shop/api")[target]
			if e != nil && ok(e) {
				return e
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; endpoint %v", what, within, e)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Checks start on the first snapshot; one passing check makes it Healthy.
	waitFor("healthy", 3*interval, func(e map[string]any) bool { return e["probe"] == "Healthy" && e["eligible"] == true })

	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	flipped := time.Now()
	// interval × threshold for the failing checks, and one interval of slack
	// for a check in flight at the flip and the poll.
	e := waitFor("ineligible", interval*threshold+interval, func(e map[string]any) bool { return e["eligible"] == false })
	from, _ := e["reasonFrom"].(string)
	t.Logf("ineligible %v after the flip, from %q", time.Since(flipped).Round(time.Millisecond), from)
	if e["probe"] != "Unhealthy" || e["reason"] != "ProbeUnhealthy" || !strings.HasPrefix(from, "active check by ") || !strings.Contains(from, "NOT_SERVING") {
		t.Fatalf("endpoint %v", e)
	}
	// the metrics count the checks and hold the endpoint Unhealthy
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`poise_active_check_endpoints{state="unhealthy"} 1`, `poise_active_check_endpoints{state="healthy"} 0`, `poise_active_checks_total{result="fail"} `} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if strings.Contains(string(body), `poise_active_checks_total{result="fail"} 0`) || strings.Contains(string(body), `poise_active_checks_total{result="pass"} 0`) {
		t.Errorf("/metrics counts no failed or no passed check")
	}

	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitFor("eligible again", 2*interval+interval, func(e map[string]any) bool { return e["probe"] == "Healthy" && e["eligible"] == true })
}
