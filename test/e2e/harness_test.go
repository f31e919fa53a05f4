package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// binary is the controlplane built once for the whole package.
var binary string

func TestMain(m *testing.M) { os.Exit(cpbinary.Main(m, &binary)) }

// controlPlane is a running controlplane process.
type controlPlane struct {
	*cpbinary.Process
	xdsAddr, adminURL string
}

// startControlPlane runs `controlplane serve -f dir` on the given ports,
// with extra flags after the suite's own, and waits until it is ready.
func startControlPlane(t *testing.T, dir, xdsAddr, adminAddr string, extra ...string) *controlPlane {
	t.Helper()
	args := append([]string{"serve", "-f", dir, "--xds-address", xdsAddr, "--admin-address", adminAddr, "--debounce", "20ms"}, extra...)
	cp := &controlPlane{Process: cpbinary.Start(t, binary, args...), xdsAddr: xdsAddr, adminURL: "http://" + adminAddr}
	cp.WaitReady(t, cp.adminURL)
	return cp
}

// waitLogged waits up to 5 s for the control plane's log to hold substr,
// and fails the test with what if it does not: a line reaches the test
// through the child's output pipe, which may lag what the admin port
// already shows.
func (cp *controlPlane) waitLogged(t *testing.T, what, substr string) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, what, func() (bool, string) {
		return strings.Contains(cp.Logs(), substr), fmt.Sprintf("the log has no %q", substr)
	})
}

// metric reads one sample from /metrics, 0 when absent.
func (cp *controlPlane) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(cp.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

type clientsView struct {
	Clients []clientView `json:"clients"`
}

// clientView is one client of /debug/clients.
type clientView struct {
	NodeID       string `json:"nodeId"`
	Kind         string `json:"kind"`
	Zone         string `json:"zone"`
	Class        string `json:"class"`
	DemandWeight uint64 `json:"demandWeight"`
	DemandNote   string `json:"demandNote"`
	Types        map[string]struct {
		LastSentVersion  string `json:"lastSentVersion"`
		LastAckedVersion string `json:"lastAckedVersion"`
		NACKs            uint64 `json:"nacks"`
		State            string `json:"state"` // SYNCED, STALE, NACKED or NOT SENT (server.Synced, ...)
	} `json:"types"`
}

// ackedEDS is the EDS version the node last ACKed, "" when not connected.
func (cp *controlPlane) ackedEDS(t *testing.T, node string) string {
	var v clientsView
	testkit.MustGetJSON(t, cp.adminURL+"/debug/clients", &v)
	for _, c := range v.Clients {
		if c.NodeID == node {
			return c.Types["EDS"].LastAckedVersion
		}
	}
	return ""
}

// waitAcked waits until the node has ACKed, on this control plane, an EDS
// version of the given revision or a later one (the file source may apply one
// write as more than one batch), and returns the version.
func (cp *controlPlane) waitAcked(t *testing.T, node string, revision uint64, timeout time.Duration) string {
	t.Helper()
	var v string
	testkit.EventuallyEvery(t, timeout, 5*time.Millisecond, fmt.Sprintf("node %s ACKs revision %d", node, revision), func() (bool, string) {
		v = cp.ackedEDS(t, node)
		r, ok := grpctraffic.ParseVersion(v)
		return ok && r >= revision, fmt.Sprintf("acked %q", v)
	})
	return v
}

// explainOffline runs `controlplane explain -o json` on the manifests, the
// same computation the served snapshot carries.
func explainOffline(t *testing.T, dir, upstream string) splitcheck.Expectation {
	t.Helper()
	out, err := exec.Command(binary, "explain", "-f", dir, "--upstream", upstream, "-o", "json").Output()
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	var rep explain.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return splitcheck.ExpectationOf(t, rep)
}

// waitServed waits until the upstream the control plane serves is the one
// the manifests in dir now describe, and returns the served report: its
// revision alone cannot say, since a read just after a write may still see
// the previous one.
func (cp *controlPlane) waitServed(t *testing.T, phase, dir, upstream string) explain.Report {
	t.Helper()
	want := explainOffline(t, dir, upstream)
	var served explain.Report
	testkit.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, phase+": the served topology follows the manifests", func() (bool, string) {
		testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream="+upstream, &served)
		got := splitcheck.ExpectationOf(t, served)
		return maps.Equal(got.Share, want.Share) && got.Dropped == want.Dropped, fmt.Sprintf("served revision %d: %+v, want %+v", served.Revision, got, want)
	})
	return served
}
