package controlplane_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/test/testkit"
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

// checkedUpstream writes, in a new directory, Upstream shop/api whose one
// endpoint is a real gRPC health server its active check asks every second,
// out after unhealthy failures and back after one pass. It returns the
// server, the directory and the endpoint's address.
func checkedUpstream(t *testing.T, unhealthy int) (*health.Server, string, string) {
	t.Helper()
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
`, checkInterval, unhealthy, port)
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return hs, dir, fmt.Sprintf("127.0.0.1:%d", port)
}

// activeChecks is poise_active_checks_total of the given result ("pass" or
// "fail") on the admin port's /metrics, 0 when absent.
func activeChecks(t *testing.T, admin, result string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := `poise_active_checks_total{result="` + result + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s%s: %v", prefix, rest, err)
			}
			return v
		}
	}
	return 0
}

// checkInterval is the API's shortest.
const checkInterval = time.Second

// TestActiveHealthCheckInFilesMode runs the plane on a manifest whose
// upstream checks a real gRPC health server: its endpoint turns ineligible,
// with the check as the origin, once the server says NOT_SERVING for
// unhealthyThreshold checks, and eligible again once it serves. The log
// warns of each turn, with explain's origin, and of the upstream's panic.
func TestActiveHealthCheckInFilesMode(t *testing.T) {
	t.Parallel()
	const interval, threshold = checkInterval, 2
	hs, dir, target := checkedUpstream(t, threshold)
	a, log := startPlane(t, controlplane.Config{Paths: []string{dir}})
	admin := a.Admin
	// waitFor waits until explain shows the endpoint as wanted, or fails
	// after within.
	waitFor := func(what string, within time.Duration, ok func(e map[string]any) bool) map[string]any {
		t.Helper()
		var e map[string]any
		testkit.Eventually(t, within, what, func() (bool, string) {
			e = explainEndpoints(t, admin, "shop/api")[target]
			return e != nil && ok(e), fmt.Sprintf("endpoint %v", e)
		})
		return e
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

	turns := func() []map[string]any { return log.Records(t, "endpoint taken out", "endpoint brought back") }
	testkit.Eventually(t, 5*time.Second, "two turns logged", func() (bool, string) { return len(turns()) >= 2, fmt.Sprint(turns()) })
	// sleep: the plane log looks at the publications at most once a second
	// and nothing says a look found nothing new; a third line would show
	// within the next look
	time.Sleep(1500 * time.Millisecond)
	lines := turns()
	if len(lines) != 2 || lines[0]["msg"] != "endpoint taken out" || lines[1]["msg"] != "endpoint brought back" {
		t.Fatalf("turns logged: %v", lines)
	}
	for i, l := range lines {
		if l["level"] != "WARN" || l["upstream"] != "shop/api" || l["endpoint"] != target || l["reason"] != "ProbeUnhealthy" || l["changes"] != 1.0 {
			t.Errorf("turn %d: %v", i, l)
		}
	}
	if lines[0]["reasonFrom"] != from {
		t.Errorf("taken out from %q, explain says %q", lines[0]["reasonFrom"], from)
	}
	if back, _ := lines[1]["reasonFrom"].(string); !strings.HasPrefix(back, "active check by ") || !strings.Contains(back, "pass") {
		t.Errorf("brought back from %q", back)
	}
	// its one endpoint out, the upstream is in total panic and back
	states := log.Records(t, "upstream outcome, panic or drop changed")
	if len(states) != 2 || states[0]["panic"] != "total" || states[1]["panic"] != "none" || states[0]["level"] != "WARN" {
		t.Errorf("upstream states logged: %v", states)
	}
}

// TestFlappingCheckIsBounded: an endpoint whose health server turns every
// second, checked every second, is logged at most a line a period past its
// first two turns; the lines count every turn they stand for, and the last
// says where it ended.
func TestFlappingCheckIsBounded(t *testing.T) {
	t.Parallel()
	const period = 3 * time.Second
	hs, dir, target := checkedUpstream(t, 1)
	a, log := startPlane(t, controlplane.Config{Paths: []string{dir}, LogPeriod: period})
	eligible := func() (bool, string) {
		e := explainEndpoints(t, a.Admin, "shop/api")[target]
		return e["probe"] == "Healthy" && e["eligible"] == true, fmt.Sprint(e)
	}
	testkit.Eventually(t, 5*checkInterval, "healthy", eligible)

	// Twelve turns, each made once a check has seen the one before: the
	// endpoint flaps at every check.
	began := time.Now()
	for i := range 12 {
		s, result := healthpb.HealthCheckResponse_NOT_SERVING, "fail"
		if i%2 == 1 {
			s, result = healthpb.HealthCheckResponse_SERVING, "pass"
		}
		before := activeChecks(t, a.Admin, result)
		hs.SetServingStatus("", s)
		testkit.Eventually(t, 3*checkInterval, fmt.Sprintf("turn %d (%s) checked", i, s), func() (bool, string) {
			n := activeChecks(t, a.Admin, result)
			return n > before, fmt.Sprintf("%s checks: %v, %v before the turn", result, n, before)
		})
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	testkit.Eventually(t, 3*checkInterval, "healthy at the end", eligible)
	// sleep: past its burst the endpoint has a line at most once a period;
	// the line holding the last turns is written when its period is up, and
	// no event says it was: a period and a look must pass
	time.Sleep(period + 2*time.Second)
	elapsed := time.Since(began)

	lines := log.Records(t, "endpoint taken out", "endpoint brought back")
	turns := 0
	for _, l := range lines {
		turns += int(l["changes"].(float64))
	}
	limit := 2 + int((elapsed+period-1)/period) + 1
	t.Logf("%d turns over %v in %d lines (at most %d)", turns, elapsed.Round(time.Millisecond), len(lines), limit)
	if len(lines) > limit {
		t.Fatalf("%d lines over %v, want at most %d: %v", len(lines), elapsed, limit, lines)
	}
	if turns <= len(lines) {
		t.Errorf("%d turns in %d lines: the flapping was not merged", turns, len(lines))
	}
	if last := lines[len(lines)-1]; last["msg"] != "endpoint brought back" {
		t.Errorf("the last line %v, want the endpoint back", last)
	}
}
