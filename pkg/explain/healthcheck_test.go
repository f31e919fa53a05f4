package explain

import (
	"bytes"
	"testing"
	"time"

	"poise.dev/poise/pkg/topology"
)

// TestHealthCheckShown: explain says how an upstream's endpoints are
// actively checked, so a reader of an "active check by" origin finds the
// check behind it; an upstream without one shows nothing.
func TestHealthCheckShown(t *testing.T) {
	base := topology.HealthCheck{Interval: 10 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 3, JitterPercent: 10}
	with := func(f func(*topology.HealthCheck)) *topology.HealthCheck {
		hc := base
		f(&hc)
		return &hc
	}
	for _, tc := range []struct {
		name string
		in   *topology.HealthCheck
		text string
	}{
		{"none", nil, ""},
		{"gRPC", with(func(h *topology.HealthCheck) { h.Type, h.GRPCService = "GRPC", "shop.Checkout" }),
			"  active health check: GRPC grpc.health.v1 service \"shop.Checkout\", every 10s ± 10%, timeout 2s; Unhealthy after 3 failures, Healthy after 2 passes (origins \"active check by ...\")\n"},
		{"HTTP on a port", with(func(h *topology.HealthCheck) {
			h.Type, h.HTTPPath, h.HTTPHost, h.Port = "HTTP", "/healthz", "api.shop", 9090
			h.ExpectedStatuses = []topology.StatusRange{{Start: 200, End: 299}, {Start: 304, End: 304}}
		}),
			"  active health check: HTTP GET /healthz expecting 200-299, 304 (Host api.shop) on port 9090, every 10s ± 10%, timeout 2s; Unhealthy after 3 failures, Healthy after 2 passes (origins \"active check by ...\")\n"},
		{"TCP", with(func(h *topology.HealthCheck) {
			h.Type, h.Interval, h.Timeout, h.JitterPercent = "TCP", time.Second, 500*time.Millisecond, 0
		}),
			"  active health check: TCP connect, every 1s ± 0%, timeout 500ms; Unhealthy after 3 failures, Healthy after 2 passes (origins \"active check by ...\")\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := healthCheckOf(&topology.Upstream{HealthCheck: tc.in})
			if (got == nil) != (tc.in == nil) {
				t.Fatalf("report %+v for check %+v", got, tc.in)
			}
			var buf bytes.Buffer
			writeHealthCheck(&textWriter{w: &buf}, got)
			if buf.String() != tc.text {
				t.Errorf("text\n %q\nwant\n %q", buf.String(), tc.text)
			}
		})
	}
}
