package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// The demo's clients, as its default --clients places them.
var demoZones = map[string][]string{
	"eu-west/eu-west-1a": {"demo-eu-west-1a-1", "demo-eu-west-1a-2", "demo-eu-west-1a-3"},
	"eu-west/eu-west-1b": {"demo-eu-west-1b-1"},
}

// What the demo prints (docs/demo.md): a client zone taking a new split,
// the rows of its table, and the check of a full window.
var (
	demoRow   = regexp.MustCompile(`^  (\S+)\s+(\d+\.\d{4})%\s+(\d+\.\d{4})%\s+([+-](?:\d+\.\d{2}|Inf))$`)
	demoTable = regexp.MustCompile(`^shop/cart · clients in (\S+) `)
	demoCheck = regexp.MustCompile(`^check shop/cart from (\S+) at revision (\d+): (\d+) calls, largest \|σ\| (\S+) \(\S+\): (OK|OFF)$`)
)

// demoHolds is the demo's line saying the clients of zone hold the split
// explain computes for them.
func demoHolds(zone string) *regexp.Regexp {
	return regexp.MustCompile(`revision \d+: the (\d+ clients|client) in ` + regexp.QuoteMeta(zone) + ` holds? shop/cart's split`)
}

// TestDemoCarriesOutExplainsSplit runs `demo --check` (make demo's
// program) on a copy of the bundled examples against the real binary: it
// serves them, starts a backend on each loopback endpoint of shop/cart
// (Balanced, loadReporting) and grpc-go xDS clients in eu-west-1a (3) and
// eu-west-1b (1). While it runs, `controlplane status` lists its four
// clients, each in its zone's class and SYNCED; then an endpoint of
// eu-west-1b is marked Unhealthy in the manifest: the demo must see
// explain's split move within a second of the plane serving it, and its
// check (every endpoint of each zone within 4.5 σ over 1,000 calls) must
// pass on the split after the edit, the unhealthy endpoint at 0 % in both
// columns.
func TestDemoCarriesOutExplainsSplit(t *testing.T) {
	t.Parallel()
	demo := cpbinary.BuildCommand(t, "demo")
	start := time.Now()
	dir, ports := cpbinary.DemoExamples(t, filepath.Join("..", ".."))
	d := cpbinary.StartDemo(t, demo, binary, dir, "--check", "--rate", "100", "--window", "1000", "--timeout", "150s")
	p, out, adminAddr, adminURL := d.Process, d.Out, d.AdminAddr, d.AdminURL

	// 1. The clients hold their zone's split; status lists them.
	for zone := range demoZones {
		out.Wait(t, 60*time.Second, p.Done(), "the clients in "+zone+" hold their split", 0, demoHolds(zone))
	}
	t.Logf("the clients hold their splits %v after the demo started", time.Since(start).Round(time.Millisecond))
	waitStatusLists(t, adminAddr)

	// 2. The edit: 17112 of eu-west-1b is probe-Unhealthy.
	cart := filepath.Join(dir, "cart.yaml")
	src, err := os.ReadFile(cart)
	if err != nil {
		t.Fatal(err)
	}
	sick := ports["17112"]
	ep := "  - {address: 127.0.0.1, port: " + sick + "}\n"
	if strings.Count(string(src), ep) != 1 {
		t.Fatalf("cart.yaml has no endpoint %q", ep)
	}
	before := len(out.All())
	written := time.Now()
	writeAtomically(t, cart, strings.Replace(string(src), ep, ep+"status:\n  health:\n  - {address: 127.0.0.1, port: "+sick+", probe: Unhealthy}\n", 1))
	sickAddr := "127.0.0.1:" + sick
	var served explain.Report
	testkit.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "the plane serves the edit", func() (bool, string) {
		if err := testkit.GetJSON(adminURL+"/debug/explain?upstream=shop/cart", &served); err != nil {
			return false, err.Error()
		}
		return len(served.Upstreams) == 1 && grpctraffic.SplitOf(served.Upstreams[0].Split).Share[sickAddr] == 0, fmt.Sprintf("revision %d", served.Revision)
	})
	seen := time.Now()
	t.Logf("edit: served at revision %d, %v after the manifest was written", served.Revision, seen.Sub(written).Round(time.Millisecond))
	for zone := range demoZones {
		_, moved := out.Wait(t, 10*time.Second, p.Done(), "the demo sees explain move for "+zone, before,
			regexp.MustCompile(`explain moves shop/cart for clients in `+regexp.QuoteMeta(zone)+`: .*`+regexp.QuoteMeta(sickAddr)+` \S+ → 0\.0000%`))
		lag := moved.At.Sub(seen)
		t.Logf("edit: the demo printed explain's new split for %s %v after the plane served it (%v after the write)", zone,
			lag.Round(time.Millisecond), moved.At.Sub(written).Round(time.Millisecond))
		if lag > time.Second {
			t.Errorf("the demo saw explain move for %s %v after the plane served it, more than a second", zone, lag)
		}
		_, held := out.Wait(t, 10*time.Second, p.Done(), "the clients in "+zone+" hold the edited split", before, demoHolds(zone))
		t.Logf("edit: the clients in %s held it %v after the plane served it", zone, held.At.Sub(seen).Round(time.Millisecond))
	}

	// 3. The check passes on the edited split, and the demo exits 0.
	select {
	case <-p.Done():
	case <-time.After(160 * time.Second):
		t.Fatal("the demo did not end within 160 s of its start")
	}
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("demo --check exited %d", code)
	}
	t.Logf("demo --check exited 0 %v after it started", time.Since(start).Round(100*time.Millisecond))
	checkDemoOutput(t, out.All()[before:], served.Revision, sickAddr)
}

// waitStatusLists runs `controlplane status` until it lists the demo's
// four clients, each in its zone's class and SYNCED on every type.
func waitStatusLists(t *testing.T, adminAddr string) {
	t.Helper()
	var text string
	testkit.Eventually(t, 20*time.Second, "controlplane status lists the demo's clients, SYNCED", func() (bool, string) {
		cmd := exec.Command(binary, "status", "--admin-address", adminAddr, "-o", "json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, stderr.String())
		}
		var st struct {
			Clients []struct {
				Client clientView `json:"client"`
			} `json:"clients"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return false, err.Error()
		}
		want := map[string]string{}
		for zone, nodes := range demoZones {
			for _, n := range nodes {
				want[n] = zone
			}
		}
		var wrong []string
		for _, c := range st.Clients {
			zone, ok := want[c.Client.NodeID]
			if !ok {
				continue
			}
			delete(want, c.Client.NodeID)
			if c.Client.Class != zone {
				wrong = append(wrong, fmt.Sprintf("%s in class %q", c.Client.NodeID, c.Client.Class))
			}
			for _, typ := range []string{"CDS", "EDS", "LDS", "RDS"} {
				if s := c.Client.Types[typ].State; s != "SYNCED" {
					wrong = append(wrong, fmt.Sprintf("%s %s %s", c.Client.NodeID, typ, s))
				}
			}
		}
		for n := range want {
			wrong = append(wrong, n+" not listed")
		}
		slices.Sort(wrong)
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
	b, err := exec.Command(binary, "status", "--admin-address", adminAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("controlplane status: %v\n%s", err, b)
	}
	text = string(b)
	for _, nodes := range demoZones {
		for _, n := range nodes {
			if !strings.Contains(text, n) {
				t.Errorf("controlplane status does not list %s:\n%s", n, text)
			}
		}
	}
	t.Logf("controlplane status --admin-address %s:\n%s", adminAddr, text)
}

// checkDemoOutput reads the demo's last tables and checks: a check line
// per zone, OK, at the edit's revision or later; every row within 4.5 σ;
// the unhealthy endpoint at 0 % in explain's column and in the observed
// one; explain's shares summing to 100 %.
func checkDemoOutput(t *testing.T, lines []cpbinary.Line, editRevision uint64, sickAddr string) {
	t.Helper()
	const ok = "check: OK: every endpoint of every client zone within 4.5σ of explain's share over 1000 calls"
	if !slices.ContainsFunc(lines, func(l cpbinary.Line) bool { return l.Text == ok }) {
		t.Fatalf("the demo did not print %q", ok)
	}
	// the last table of each zone
	tables := map[string][]string{}
	checks := map[string][]string{}
	var zone string
	for _, l := range lines {
		if m := demoTable.FindStringSubmatch(l.Text); m != nil {
			zone = m[1]
			tables[zone] = nil
			continue
		}
		if m := demoCheck.FindStringSubmatch(l.Text); m != nil {
			checks[m[1]] = m
			continue
		}
		if zone != "" && demoRow.MatchString(l.Text) {
			tables[zone] = append(tables[zone], l.Text)
		}
	}
	var summary strings.Builder
	for _, z := range slices.Sorted(maps.Keys(demoZones)) {
		c := checks[z]
		if c == nil {
			t.Errorf("%s: no check line", z)
			continue
		}
		rev, _ := strconv.ParseUint(c[2], 10, 64)
		worst, _ := strconv.ParseFloat(c[4], 64)
		if c[5] != "OK" || rev < editRevision || worst > grpctraffic.Limit {
			t.Errorf("%s: %s; want OK at revision %d or later", z, c[0], editRevision)
		}
		fmt.Fprintf(&summary, "  %s: checked %s calls at revision %s, largest |σ| %s; its last table (the last calls, sliding):\n", z, c[3], c[2], c[4])
		var explainSum float64
		for _, row := range tables[z] {
			m := demoRow.FindStringSubmatch(row)
			share, _ := strconv.ParseFloat(m[2], 64)
			explainSum += share
			if z, err := strconv.ParseFloat(m[4], 64); err != nil || z > grpctraffic.Limit || z < -grpctraffic.Limit {
				t.Errorf("%s: %q is not within 4.5σ", c[1], row)
			}
			if m[1] == sickAddr && (m[2] != "0.0000" || m[3] != "0.0000") {
				t.Errorf("%s: the unhealthy endpoint: %q, want 0%% computed and observed", c[1], row)
			}
			fmt.Fprintf(&summary, "    %s\n", strings.TrimSpace(row))
		}
		if explainSum < 99.999 || explainSum > 100.001 {
			t.Errorf("%s: explain's shares sum to %.4f%%:\n%s", z, explainSum, strings.Join(tables[z], "\n"))
		}
	}
	t.Logf("the demo's check after the edit:\n%s", summary.String())
}
