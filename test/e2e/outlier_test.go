package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/signals/outlier"
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
	// odSample is the OK RPCs the split after an ejection is measured on
	// (about two seconds of the four clients' traffic), as long as the
	// ejection lasts.
	odSample = 1_800
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

// odLoads is /debug/loads of od/echo: the window's load per endpoint and
// the last outlier evaluation (a zero one before the first).
func (cp *controlPlane) odLoads(t *testing.T) admin.Loads {
	t.Helper()
	var l admin.Loads
	testkit.MustGetJSON(t, cp.adminURL+"/debug/loads?cluster="+odUpstream, &l)
	if l.Outlier == nil {
		l.Outlier = &outlier.Status{}
	}
	return l
}

// waitWindow waits until the window holds, for each of the backends, the
// evidence an ejection needs (minRequestVolume 100 requests from
// minReporters 2 clients), and then for the next outlier evaluation, which
// judges that window.
func (cp *controlPlane) waitWindow(t *testing.T, what string, backends ...*splitcheck.Backend) {
	t.Helper()
	var seen time.Time // the evaluation before the window was full
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, what, func() (bool, string) {
		l := cp.odLoads(t)
		by := map[int32]admin.LoadEndpoint{}
		for _, e := range l.Endpoints {
			by[int32(e.Port)] = e
		}
		for _, b := range backends {
			if e := by[b.Port]; e.Issued < 100 || e.Reporters < 2 {
				return false, fmt.Sprintf("%s: %+v", b.Addr, e)
			}
		}
		seen = l.Outlier.EvaluatedAt
		return true, ""
	})
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, what+": evaluated", func() (bool, string) {
		at := cp.odLoads(t).Outlier.EvaluatedAt
		return at.After(seen), fmt.Sprintf("the last evaluation at %v", at)
	})
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
	t.Parallel()
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
	reached := make([]map[string]bool, len(clients))
	testkit.Eventually(t, 20*time.Second, "every client reaches every backend", func() (bool, string) {
		all := true
		var short []string
		for i, c := range clients {
			if reached[i] == nil {
				reached[i] = map[string]bool{}
			}
			ok, _ := c.Take()
			for a, n := range ok {
				reached[i][a] = reached[i][a] || n > 0
			}
			for _, b := range backends {
				if !reached[i][b.Addr] {
					all = false
					short = append(short, c.Node+"→"+b.Addr)
				}
			}
		}
		return all, fmt.Sprintf("not yet reached: %v", short)
	})
	// one evaluation of a window with every client's traffic and no
	// failures, enough to eject were there failures: nothing is ejected
	cp.waitWindow(t, "a window of traffic without failures", backends...)
	if _, eps := cp.odEndpoints(t); len(ejected(eps)) != 0 {
		t.Fatalf("ejected without failures: %v", ejected(eps))
	}

	// a. backend 1 fails half its RPCs
	bad := backends[1]
	bad.SetFailures(500)
	start := time.Now()
	var served explain.Report
	var eps map[string]explain.Endpoint
	testkit.Eventually(t, 10*time.Second, "a: "+bad.Addr+" ejected", func() (bool, string) {
		served, eps = cp.odEndpoints(t)
		e := ejected(eps)
		if len(e) > 0 && (len(e) != 1 || e[0] != bad.Addr) {
			t.Fatalf("a: ejected %v, want %s alone", e, bad.Addr)
		}
		return len(e) > 0, "nothing ejected"
	})
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
	cp.waitLogged(t, "a: the ejection logged", "outlier ejected")
	if v := cp.metric(t, `poise_outlier_ejections_total{upstream="od/echo"}`); v != 1 {
		t.Errorf("a: poise_outlier_ejections_total = %v, want 1", v)
	}
	loads := cp.odLoads(t)
	if e := loads.Outlier.Ejections; len(e) != 1 || e[0].Port != uint32(bad.Port) || !strings.HasPrefix(e[0].Origin, "load reports: ") {
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
	// The ACK precedes the new picker by a moment: a client has its new
	// picker once its own RPCs follow the new split, 100 OK RPCs in a row
	// with none served by bad and none failed (of the old picker's, bad
	// served about one OK RPC in seven and failed as many).
	streak := make([]int, len(clients))
	testkit.Eventually(t, 10*time.Second, "a: every client's RPCs follow the new split", func() (bool, string) {
		all := true
		for i, c := range clients {
			ok, failed := c.Take()
			if ok[bad.Addr] > 0 || failed > 0 {
				streak[i] = 0
			} else {
				for _, n := range ok {
					streak[i] += n
				}
			}
			all = all && streak[i] >= 100
		}
		return all, fmt.Sprintf("OK RPCs in a row without %s: %v", bad.Addr, streak)
	})
	// The sample: odSample OK RPCs, or fewer if the ejection is about to
	// end (the endpoint returns at the first evaluation past its time, and
	// the clients then send to it again).
	var until time.Time
	if e := loads.Outlier.Ejections; len(e) == 1 {
		until = e[0].Until
	}
	got := splitcheck.Tally{By: map[string]int{}}
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("a: %d OK RPCs of the clients on the new split", odSample), func() (bool, string) {
		for _, c := range clients {
			ok, _ := c.Take()
			for a, n := range ok {
				got.By[a] += n
				got.Total += n
			}
		}
		return got.Total >= odSample || time.Now().After(until.Add(-odBucket)), fmt.Sprintf("%d OK RPCs", got.Total)
	})
	if got.Total < odSample {
		t.Logf("a: the sample ends at %d OK RPCs: the ejection ends at %v", got.Total, until)
	}
	z := splitcheck.CheckSplit(t, "a: ejected", got, want)
	t.Logf("a: %d OK RPCs over the other three backends, largest |z| %.2f", got.Total, z)

	// it recovers; it returns once its ejection time is up
	bad.SetFailures(0)
	testkit.Eventually(t, odBase+10*time.Second-time.Since(ejectedAt), "a: "+bad.Addr+" returned", func() (bool, string) {
		_, eps = cp.odEndpoints(t)
		return len(ejected(eps)) == 0, fmt.Sprintf("still ejected %v after its ejection", time.Since(ejectedAt).Round(time.Millisecond))
	})
	back := time.Since(ejectedAt)
	t.Logf("a: %s returned %v after its ejection (baseEjectionTime %v)", bad.Addr, back.Round(time.Millisecond), odBase)
	if back < odBase-odBucket-100*time.Millisecond || back > odBase+odBucket+time.Second {
		t.Errorf("a: returned after %v, want the ejection time %v within an evaluation period", back, odBase)
	}
	served, _ = cp.odEndpoints(t)
	for _, c := range clients {
		cp.waitAcked(t, c.Node, served.Revision, 5*time.Second)
	}
	var returned int
	testkit.Eventually(t, 10*time.Second, "a: "+bad.Addr+" serves again after its return", func() (bool, string) {
		for _, c := range clients {
			ok, _ := c.Take()
			returned += ok[bad.Addr]
		}
		return returned > 0, "no OK RPC served by it"
	})
	// the evidence that ejected it has left the window: an evaluation of
	// a window with its new traffic, without failures, does not eject it
	// again
	cp.waitWindow(t, "a: a window of its traffic since its return", bad)
	if _, eps := cp.odEndpoints(t); len(ejected(eps)) != 0 {
		t.Fatalf("a: ejected again without new failures: %v", ejected(eps))
	}

	// b. a client whose every RPC fails ejects nothing: the evaluations go
	// on until one a window past the first that held its reports, which
	// are all in the window then; it is the untrusted reporter throughout
	misbehaving := startLoad(t, xdsAddr, "od-misbehaving", true)
	start = time.Now()
	var firstUntrusted time.Time
	testkit.EventuallyEvery(t, odWindow+10*time.Second, 50*time.Millisecond, "b: a window of the misbehaving client's reports evaluated", func() (bool, string) {
		if _, eps := cp.odEndpoints(t); len(ejected(eps)) != 0 {
			t.Fatalf("b: a single misbehaving client ejected %v", ejected(eps))
		}
		st := cp.odLoads(t).Outlier
		if firstUntrusted.IsZero() && st.Untrusted > 0 {
			firstUntrusted = st.EvaluatedAt
		}
		return !firstUntrusted.IsZero() && st.EvaluatedAt.Sub(firstUntrusted) >= odWindow,
			fmt.Sprintf("the last evaluation at %v: %d trusted, %d untrusted reporters (first untrusted at %v)", st.EvaluatedAt, st.Reporters, st.Untrusted, firstUntrusted)
	})
	ok, failed := misbehaving.Take()
	if len(ok) != 0 || failed == 0 {
		t.Fatalf("b: the misbehaving client had %v OK and %d failed RPCs, want none OK", ok, failed)
	}
	if v := cp.metric(t, `poise_loadreport_untrusted_reporters{upstream="od/echo"}`); v != 1 {
		t.Errorf("b: poise_loadreport_untrusted_reporters = %v, want 1", v)
	}
	if loads = cp.odLoads(t); loads.Outlier.Untrusted != 1 {
		t.Errorf("b: /debug/loads shows %d untrusted reporters, want 1", loads.Outlier.Untrusted)
	}
	t.Logf("b: %d failed RPCs of the misbehaving client over %v ejected nothing; it is the untrusted reporter", failed, time.Since(start).Round(time.Millisecond))
	misbehaving.Halt()

	// c. half the backends fail every RPC: one endpoint (25 %) at most,
	// through the first ejection, its end, and the evaluation of a window
	// with the returned endpoint's new failures
	backends[0].SetFailures(1000)
	backends[2].SetFailures(1000)
	start = time.Now()
	most, first := 0, time.Duration(0)
	var firstOut outlier.Ejection // the first ejection
	var refilled time.Time        // the evaluation before the window held its new failures
	testkit.EventuallyEvery(t, odWindow+odBase+10*time.Second, 50*time.Millisecond, "c: an ejection, its end, and a window of the returned endpoint's failures evaluated", func() (bool, string) {
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
		l := cp.odLoads(t)
		st := l.Outlier
		switch {
		case firstOut.Until.IsZero():
			if len(st.Ejections) > 0 {
				firstOut = st.Ejections[0]
			}
			return false, "nothing ejected"
		case st.EvaluatedAt.Before(firstOut.Until):
			return false, fmt.Sprintf("%s:%d ejected until %v; the last evaluation at %v", firstOut.Address, firstOut.Port, firstOut.Until, st.EvaluatedAt)
		case refilled.IsZero():
			// it returned: its new failures fill the window
			for _, e := range l.Endpoints {
				if e.Address == firstOut.Address && e.Port == firstOut.Port && e.Issued >= 100 && e.Reporters >= 2 && 5*e.Errors >= e.Issued {
					refilled = st.EvaluatedAt
					break
				}
			}
			return false, fmt.Sprintf("%s:%d returned; the window does not hold its new failures yet", firstOut.Address, firstOut.Port)
		}
		return st.EvaluatedAt.After(refilled), fmt.Sprintf("the last evaluation at %v", st.EvaluatedAt)
	})
	if most != 1 {
		t.Fatalf("c: no endpoint ejected while two of four failed every RPC")
	}
	t.Logf("c: two of four backends failing: one ejected %v after, never more than one over %v", first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	backends[0].SetFailures(0)
	backends[2].SetFailures(0)
}
