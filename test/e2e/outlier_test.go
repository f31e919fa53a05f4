package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

const (
	odUpstream = "od/echo"
	odListener = "echo.od" // the API listener of Upstream od/echo
	// odBucket is the load-report bucket the binary runs with: the window
	// is six of them (3 s) and outlier detection is evaluated once a bucket.
	odBucket = 500 * time.Millisecond
	odWindow = 6 * odBucket
	// odInterval is spec.loadReporting.interval, the API's shortest.
	odInterval = time.Second
	// odBase is spec.outlierDetection.baseEjectionTime.
	odBase = 5 * time.Second
)

// startLoad starts a grpc-go xDS client of od/echo sending RPCs.
func startLoad(t *testing.T, xdsAddr, node string, poisoned bool) *splitcheck.Load {
	t.Helper()
	var headers []string
	if poisoned {
		headers = []string{splitcheck.PoisonHeader, "1"}
	}
	return splitcheck.StartLoad(t, splitcheck.NewXDSClient(t, xdsAddr, node, odListener), node, headers...)
}

// odEndpoints is the served explain's endpoints of od/echo by address:port.
func (cp *controlPlane) odEndpoints(t *testing.T) (explain.Report, map[string]explain.Endpoint) {
	t.Helper()
	var rep explain.Report
	testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream="+odUpstream, &rep)
	out := map[string]explain.Endpoint{}
	for _, u := range rep.Upstreams {
		for _, p := range u.Priorities {
			for _, l := range p.Localities {
				for _, e := range l.Endpoints {
					out[net.JoinHostPort(e.Address, fmt.Sprint(e.Port))] = e
				}
			}
		}
	}
	return rep, out
}

// ejected is the endpoints explain shows ejected by outlier detection.
func ejected(eps map[string]explain.Endpoint) []string {
	var out []string
	for a, e := range eps {
		if e.Reason == "OutlierEjected" {
			out = append(out, a)
		}
	}
	return out
}

// TestFleetOutlierDetection runs the real binary on files with an
// Upstream over four real backends whose grpc-go xDS clients report their
// load (LRS, lrs_server self) every second, and outlier detection with
// minReporters 2, baseEjectionTime 5s and maxEjectionPercent 25:
//
//	a. one backend failing half its RPCs is ejected within a window and an
//	   evaluation period, with the evidence as explain's reasonFrom; the
//	   OK RPCs follow the recomputed split (4.5σ); it returns once its
//	   ejection time is up, and, healthy again, serves again;
//	b. a client whose RPCs all fail (every backend refuses it) ejects
//	   nothing: it is counted as an untrusted reporter;
//	c. half the backends failing every RPC: at most 25 % of the weight
//	   (one endpoint) is ejected at any time.
func TestFleetOutlierDetection(t *testing.T) {
	backends := splitcheck.StartBackends(t, "127.0.0.1", 4)
	manifests := t.TempDir()
	var y strings.Builder
	fmt.Fprintf(&y, `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: echo, namespace: od}
spec:
  protocol: GRPC
  addressPolicy: {allowLoopback: true} # the backends run on 127.0.0.1
  loadReporting: {interval: %s}
  outlierDetection: {errorPercent: 20, minRequestVolume: 100, minReporters: 2, baseEjectionTime: %s, maxEjectionTime: 20s, maxEjectionPercent: 25}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: echo-a, namespace: od}
spec:
  upstream: echo
  locality: {region: r1, zone: z1}
  endpoints:
`, odInterval, odBase)
	for _, b := range backends {
		fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d}\n", b.Port)
	}
	writeAtomically(t, filepath.Join(manifests, "echo.yaml"), y.String())
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr, "--load-report-bucket", odBucket.String())

	var clients []*splitcheck.Load
	for i := range 4 {
		clients = append(clients, startLoad(t, xdsAddr, fmt.Sprintf("od-client-%d", i), false))
	}
	// warm: every client reaches every backend
	deadline := time.Now().Add(20 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		all := true
		for _, c := range clients {
			ok, _ := c.Take()
			for _, b := range backends {
				all = all && ok[b.Addr] > 0
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clients did not reach every backend within 20s\n%s", cp.Logs())
		}
	}
	// one evaluation with traffic and no failures: nothing is ejected
	time.Sleep(odWindow)
	if _, eps := cp.odEndpoints(t); len(ejected(eps)) != 0 {
		t.Fatalf("ejected without failures: %v", ejected(eps))
	}

	// a. backend 1 fails half its RPCs
	bad := backends[1]
	bad.SetFailures(500)
	start := time.Now()
	var served explain.Report
	var eps map[string]explain.Endpoint
	for {
		served, eps = cp.odEndpoints(t)
		if e := ejected(eps); len(e) > 0 {
			if len(e) != 1 || e[0] != bad.Addr {
				t.Fatalf("a: ejected %v, want %s alone", e, bad.Addr)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("a: %s not ejected within 10s\n%s", bad.Addr, cp.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ejectedAt := time.Now()
	took := ejectedAt.Sub(start)
	from := eps[bad.Addr].ReasonFrom
	t.Logf("a: %s ejected %v after it began failing: %q", bad.Addr, took.Round(time.Millisecond), from)
	// documented: a report interval for the evidence to arrive, then one
	// evaluation period; never more than a window plus a period
	if limit := odWindow + odBucket; took > limit {
		t.Errorf("a: ejection took %v, past the documented %v", took, limit)
	}
	if !strings.HasPrefix(from, "load reports: 4 clients, ") || !strings.HasSuffix(from, "% errors, window 3 s") {
		t.Errorf("a: reasonFrom %q, want the evidence of the 4 clients over the 3 s window", from)
	}
	if !cp.logged("outlier ejected") {
		t.Errorf("a: the ejection was not logged within 5s")
	}
	if v := cp.metric(t, `poise_outlier_ejections_total{upstream="od/echo"}`); v != 1 {
		t.Errorf("a: poise_outlier_ejections_total = %v, want 1", v)
	}
	var loads struct {
		Outlier struct {
			Untrusted uint64 `json:"untrusted"`
			Ejections []struct {
				Address string `json:"address"`
				Port    int    `json:"port"`
				Origin  string `json:"origin"`
			} `json:"ejections"`
		} `json:"outlier"`
	}
	testkit.MustGetJSON(t, cp.adminURL+"/debug/loads?cluster="+odUpstream, &loads)
	if e := loads.Outlier.Ejections; len(e) != 1 || e[0].Port != int(bad.Port) || !strings.HasPrefix(e[0].Origin, "load reports: ") {
		t.Errorf("a: /debug/loads shows the ejections %+v", e)
	}
	// the OK RPCs follow the recomputed split once every client has it
	want := splitcheck.ExpectationOf(t, served)
	if want.Share[bad.Addr] != 0 {
		t.Fatalf("a: the served split still gives %s a share: %+v", bad.Addr, want)
	}
	for _, c := range clients {
		cp.waitAcked(t, c.Node, served.Revision, 5*time.Second)
	}
	time.Sleep(100 * time.Millisecond) // the ACK precedes the new picker by a moment
	for _, c := range clients {
		c.Take()
	}
	time.Sleep(2 * time.Second)
	got := splitcheck.Tally{By: map[string]int{}}
	for _, c := range clients {
		ok, _ := c.Take()
		for a, n := range ok {
			got.By[a] += n
			got.Total += n
		}
	}
	z := splitcheck.CheckSplit(t, "a: ejected", got, want)
	t.Logf("a: %d OK RPCs over the other three backends, largest |z| %.2f", got.Total, z)

	// it recovers; it returns once its ejection time is up
	bad.SetFailures(0)
	for {
		_, eps = cp.odEndpoints(t)
		if len(ejected(eps)) == 0 {
			break
		}
		if time.Since(ejectedAt) > odBase+10*time.Second {
			t.Fatalf("a: %s still ejected %v after its ejection", bad.Addr, time.Since(ejectedAt))
		}
		time.Sleep(20 * time.Millisecond)
	}
	back := time.Since(ejectedAt)
	t.Logf("a: %s returned %v after its ejection (baseEjectionTime %v)", bad.Addr, back.Round(time.Millisecond), odBase)
	if back < odBase-odBucket-100*time.Millisecond || back > odBase+odBucket+time.Second {
		t.Errorf("a: returned after %v, want the ejection time %v within an evaluation period", back, odBase)
	}
	time.Sleep(odWindow)
	served, eps = cp.odEndpoints(t)
	if e := ejected(eps); len(e) != 0 {
		t.Fatalf("a: ejected again without new failures: %v", e)
	}
	for _, c := range clients {
		cp.waitAcked(t, c.Node, served.Revision, 5*time.Second)
		c.Take()
	}
	time.Sleep(time.Second)
	var returned int
	for _, c := range clients {
		ok, _ := c.Take()
		returned += ok[bad.Addr]
	}
	if returned == 0 {
		t.Errorf("a: %s serves nothing after its return", bad.Addr)
	}

	// b. a client whose every RPC fails ejects nothing
	misbehaving := startLoad(t, xdsAddr, "od-misbehaving", true)
	start = time.Now()
	for time.Since(start) < odWindow+2*odBucket+odInterval {
		if _, eps := cp.odEndpoints(t); len(ejected(eps)) != 0 {
			t.Fatalf("b: a single misbehaving client ejected %v", ejected(eps))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok, failed := misbehaving.Take()
	if len(ok) != 0 || failed == 0 {
		t.Fatalf("b: the misbehaving client had %v OK and %d failed RPCs, want none OK", ok, failed)
	}
	if v := cp.metric(t, `poise_loadreport_untrusted_reporters{upstream="od/echo"}`); v != 1 {
		t.Errorf("b: poise_loadreport_untrusted_reporters = %v, want 1", v)
	}
	testkit.MustGetJSON(t, cp.adminURL+"/debug/loads?cluster="+odUpstream, &loads)
	if loads.Outlier.Untrusted != 1 {
		t.Errorf("b: /debug/loads shows %d untrusted reporters, want 1", loads.Outlier.Untrusted)
	}
	t.Logf("b: %d failed RPCs of the misbehaving client over %v ejected nothing; it is the untrusted reporter", failed, time.Since(start).Round(time.Millisecond))
	misbehaving.Halt()

	// c. half the backends fail every RPC: one endpoint (25 %) at most
	backends[0].SetFailures(1000)
	backends[2].SetFailures(1000)
	start = time.Now()
	most, first := 0, time.Duration(0)
	for time.Since(start) < odBase+odWindow {
		_, eps := cp.odEndpoints(t)
		n := len(ejected(eps))
		if n > 0 && first == 0 {
			first = time.Since(start)
		}
		most = max(most, n)
		if n > 1 {
			t.Fatalf("c: %d endpoints ejected at once (%v), maxEjectionPercent 25 allows one of four", n, ejected(eps))
		}
		if g := cp.metric(t, `poise_outlier_ejected_endpoints{upstream="od/echo"}`); g > 1 {
			t.Fatalf("c: poise_outlier_ejected_endpoints = %v", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if most != 1 {
		t.Fatalf("c: no endpoint ejected while two of four failed every RPC")
	}
	t.Logf("c: two of four backends failing: one ejected %v after, never more than one over %v", first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	backends[0].SetFailures(0)
	backends[2].SetFailures(0)
}
