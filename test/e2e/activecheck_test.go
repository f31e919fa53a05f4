package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// TestActiveCheckTakesOutANotServingBackend runs the real binary on files
// with an Upstream whose three real backends it checks itself (gRPC health,
// every second, Unhealthy after two failures, no jitter). One backend's
// health turns NOT_SERVING (its RPCs still succeed): within interval ×
// unhealthyThreshold, plus a check in flight, the served explain shows it
// ineligible with the check's origin, and a real grpc-go xDS client stops
// sending to it (4.5σ); when it serves again it comes back.
func TestActiveCheckTakesOutANotServingBackend(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 3)
	manifests := t.TempDir()
	var y strings.Builder
	fmt.Fprint(&y, `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: echo, namespace: hc}
spec:
  protocol: GRPC
  addressPolicy: {allowLoopback: true} # the backends run on 127.0.0.1
  healthCheck: {type: GRPC, interval: 1s, timeout: 500ms, unhealthyThreshold: 2, healthyThreshold: 2, jitterPercent: 0}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: echo-a, namespace: hc}
spec:
  upstream: echo
  locality: {region: r1, zone: z1}
  endpoints:
`)
	for _, b := range backends {
		fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d}\n", b.Port)
	}
	writeAtomically(t, filepath.Join(manifests, "echo.yaml"), y.String())
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)
	conn := splitcheck.NewXDSClient(t, xdsAddr, "hc-client", "echo.hc")

	endpoint := func(rep explain.Report, b *splitcheck.Backend) explain.Endpoint {
		for _, p := range rep.Upstreams[0].Priorities {
			for _, l := range p.Localities {
				for _, e := range l.Endpoints {
					if int32(e.Port) == b.Port {
						return e
					}
				}
			}
		}
		t.Fatalf("%s not explained", b.Addr)
		return explain.Endpoint{}
	}
	wait := func(what string, within time.Duration, ok func(explain.Endpoint) bool) (explain.Report, time.Duration) {
		t.Helper()
		var rep explain.Report
		took := testkit.Eventually(t, within, what, func() (bool, string) {
			rep = explain.Report{}
			testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream=hc/echo", &rep)
			e := endpoint(rep, backends[1])
			return ok(e), fmt.Sprintf("%s: %+v", backends[1].Addr, e)
		})
		return rep, took
	}
	measure := func(phase string, rep explain.Report) {
		t.Helper()
		// a verdict that changes no CLA (Unknown to Healthy) publishes no
		// new EDS version: warming up to the split is the wait
		want := splitcheck.ExpectationOf(t, rep)
		splitcheck.Warm(t, conn, want)
		splitcheck.CheckSplit(t, phase, splitcheck.Send(conn, rpcs), want)
	}
	rep, _ := wait("first check passes", 5*time.Second, func(e explain.Endpoint) bool { return e.Probe == "Healthy" })
	measure("all serving", rep)

	backends[1].SetServing(false)
	// two checks a second apart, the first up to a second after the flip,
	// each within its 500 ms timeout, and the poll
	rep, took := wait("NOT_SERVING is ineligible", 2*time.Second+time.Second+500*time.Millisecond, func(e explain.Endpoint) bool { return !e.Eligible })
	e := endpoint(rep, backends[1])
	t.Logf("ineligible %v after NOT_SERVING: %s (from %s)", took.Round(time.Millisecond), e.Reason, e.ReasonFrom)
	if e.Reason != "ProbeUnhealthy" || !strings.HasPrefix(e.ReasonFrom, "active check by ") || !strings.HasSuffix(e.ReasonFrom, "2 failures, last: grpc health NOT_SERVING") {
		t.Fatalf("endpoint %+v", e)
	}
	if hc := rep.Upstreams[0].HealthCheck; hc == nil || hc.Type != "GRPC" || hc.IntervalMs != 1000 || hc.UnhealthyThreshold != 2 {
		t.Errorf("explain's healthCheck %+v", hc)
	}
	measure("NOT_SERVING taken out", rep)
	if want := splitcheck.ExpectationOf(t, rep); want.Share[backends[1].Addr] != 0 {
		t.Fatalf("the served split still sends to it: %+v", want)
	}

	backends[1].SetServing(true)
	rep, took = wait("serving again is eligible", 3*time.Second+500*time.Millisecond, func(e explain.Endpoint) bool { return e.Eligible })
	t.Logf("eligible again %v after it served (healthyThreshold 2)", took.Round(time.Millisecond))
	measure("back", rep)
}
