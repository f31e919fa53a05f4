package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

const (
	affUpstream = "aff/echo"
	affListener = "echo.aff" // the API listener of Upstream aff/echo
	// affRPCs is what each measured client sends per phase, so every zone
	// sees at least this many per phase. A zone's traffic is binomial per
	// backend; at 20,000 RPCs a share of 50 % has σ = 0.35 %, and the
	// smallest wrong rendering this test tells apart (eu/a clients under
	// Balanced receiving None, 33 % instead of 56 % local) is ~100 σ off.
	affRPCs = 20_000
)

// affZones are the three client zones and the zones of the backends, in
// canonical order: backends 2i and 2i+1 are in affZones[i].
var affZones = []string{"eu/a", "eu/b", "us/c"}

// affTopology writes Upstream aff/echo over six backends, two per zone,
// every locality of weight 1 at priority 0 and the default
// overprovisioning factor (140), with the given localityAffinity mode;
// unhealthy lists the backends whose probe reports Unhealthy.
type affTopology struct {
	mode      string
	unhealthy map[int]bool
}

func (tp affTopology) write(t *testing.T, dir string, b []*splitcheck.Backend) {
	t.Helper()
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: echo, namespace: aff}\nspec:\n  protocol: GRPC\n  addressPolicy: {allowLoopback: true} # the backends run on 127.0.0.1\n  localityAffinity: {mode: %s}\n", tp.mode)
	for i, z := range affZones {
		region, zone, _ := strings.Cut(z, "/")
		name := region + "-" + zone
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s, namespace: aff}\nspec: {upstream: echo, priority: 0, region: %s, zone: %s, weight: 1}\n", name, region, zone)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s, namespace: aff}\nspec:\n  upstream: echo\n  locality: {region: %s, zone: %s}\n  endpoints:\n", name, region, zone)
		for _, e := range []int{2 * i, 2*i + 1} {
			fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d, weight: 1}\n", b[e].Port)
		}
		var health []string
		for _, e := range []int{2 * i, 2*i + 1} {
			if tp.unhealthy[e] {
				health = append(health, fmt.Sprintf("  - {address: 127.0.0.1, port: %d, probe: Unhealthy}\n", b[e].Port))
			}
		}
		if len(health) > 0 {
			y.WriteString("status:\n  health:\n" + strings.Join(health, ""))
		}
	}
	writeAtomically(t, filepath.Join(dir, "aff.yaml"), y.String())
}

// zoneClient is one grpc-go xDS client whose bootstrap places it in a zone.
type zoneClient struct {
	node, zone string
	conn       *grpc.ClientConn
}

// TestGRPCClientsInThreeZonesCarryOutTheirClassSplit is the
// end-to-end proof of localityAffinity: real grpc-go xDS clients whose
// bootstrap sets node.locality in three zones, each zone's observed split
// within 4.5 σ (per backend) of what explain computes for clients there,
// with at least 20,000 RPCs per zone per phase:
//
//	a. PreferSameZone, all healthy: every zone stays local.
//	b. eu/a loses half its capacity: its clients spill the 30 % it cannot
//	   carry to eu/b, their region, and nothing crosses to us/c.
//	c. Balanced with 3 clients in eu/a, 1 in eu/b and 1 in us/c over equal
//	   capacity: eu/a keeps 5/9 local and sends 2/9 to each other zone,
//	   eu/b and us/c keep everything, and the sum over all five clients is
//	   the None split (again within 4.5 σ).
func TestGRPCClientsInThreeZonesCarryOutTheirClassSplit(t *testing.T) {
	start := time.Now()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 6)
	manifests := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	affTopology{mode: "PreferSameZone"}.write(t, manifests, backends)
	// the checks below name backends by address; this says which is where
	var legend strings.Builder
	for i, b := range backends {
		fmt.Fprintf(&legend, "  %s  backend %d in %s\n", b.Addr, i, affZones[i/2])
	}
	t.Logf("backends:\n%s", legend.String())
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)

	// All five clients connect now, so the census is settled long before
	// phase c turns Balanced on: the demand then changes once, from none to
	// {eu/a 3, eu/b 1, us/c 1}, and that one change is what phase c waits
	// for. Two declare their demand weight (1, as a number and as a decimal
	// string) and three leave it to the default: all count 1.
	var clients []zoneClient
	for i, c := range []struct {
		zone   string
		weight any
	}{{"eu/a", 1}, {"eu/a", nil}, {"eu/a", nil}, {"eu/b", "1"}, {"us/c", nil}} {
		n := splitcheck.Node{}
		n.Region, n.Zone, _ = strings.Cut(c.zone, "/")
		if c.weight != nil {
			n.Metadata = map[string]any{"poise.dev/demand-weight": c.weight}
		}
		node := fmt.Sprintf("aff-%s-%d", strings.ReplaceAll(c.zone, "/", "-"), i)
		clients = append(clients, zoneClient{node, c.zone, splitcheck.NewXDSClientWith(t, xdsAddr, node, affListener, n)})
	}
	cp.waitClasses(t, clients)
	oneEach := []zoneClient{clients[0], clients[3], clients[4]}
	figures := map[string]map[string]float64{} // phase → zone → largest |z|

	// a. PreferSameZone, all healthy: each class's own zone takes everything.
	//    Right after connecting, a client may still hold the base split (the
	//    class's variant is rendered once the census shows its first
	//    client), so measure warms each client until it serves from exactly
	//    the backends its split names: the base names all six.
	preferAll := classExpectations(t, manifests, "")
	for i, z := range affZones {
		expectShares(t, "a "+z, preferAll[z], backends, map[int]uint64{2 * i: 500_000, 2*i + 1: 500_000})
	}
	if maps.Equal(preferAll["eu/a"].Share, preferAll["us/c"].Share) {
		t.Fatalf("a: explain gives eu/a and us/c the same split: %v", preferAll["eu/a"].Share)
	}
	_, figures["a"] = measure(t, "a PreferSameZone, all healthy", oneEach, preferAll)

	// b. eu/a loses capacity: one of its two backends fails, its health is
	//    50 % × 140 = 70 %, and the 30 % it cannot carry spills to eu/b, the
	//    next rank for clients in eu/a (docs/weights.md, worked example 5).
	//    us/c, another region, gets nothing from eu/a; eu/b and us/c keep
	//    their own zone. Only the eu/a variant changes, so only the eu/a
	//    clients are sent (and ACK) the new revision.
	const phaseB = "b eu/a loses capacity"
	written := time.Now()
	affTopology{mode: "PreferSameZone", unhealthy: map[int]bool{1: true}}.write(t, manifests, backends)
	served := cp.waitServed(t, phaseB, manifests, affUpstream)
	for _, c := range clients[:3] {
		v := cp.waitAcked(t, c.node, served.Revision, 10*time.Second)
		t.Logf("%s: %s ACKed EDS %s %v after the manifest was written", phaseB, c.node, v, time.Since(written).Round(time.Millisecond))
	}
	spill := classExpectations(t, manifests, "")
	expectShares(t, "b eu/a", spill["eu/a"], backends, map[int]uint64{0: 700_000, 2: 150_000, 3: 150_000})
	expectShares(t, "b eu/b", spill["eu/b"], backends, map[int]uint64{2: 500_000, 3: 500_000})
	expectShares(t, "b us/c", spill["us/c"], backends, map[int]uint64{4: 500_000, 5: 500_000})
	_, figures["b"] = measure(t, phaseB, oneEach, spill)

	// c. Balanced, all healthy, equal capacity per zone: None gives each
	//    zone a third. With demand 3 : 1 : 1, eu/a's clients can keep only
	//    5/9 local and send 2/9 to each zone with a surplus; eu/b's and
	//    us/c's keep everything. The revision first renders every class
	//    the None split (no demand is applied to the upstream yet); the
	//    census has been quiet since phase a, longer than demand.Quiet, so
	//    the demand signal applies the clients' demand at once, as a
	//    revision of its own, which every client must ACK. (Churning
	//    clients wait for the hysteresis: pkg/signals/demand's unit tests.)
	const phaseC = "c Balanced 3:1:1"
	written = time.Now()
	affTopology{mode: "Balanced"}.write(t, manifests, backends)
	served = cp.waitServed(t, phaseC, manifests, affUpstream)
	for _, c := range clients {
		cp.waitAcked(t, c.node, served.Revision, 10*time.Second)
	}
	limit := 10 * time.Second // for this slow, shared machine
	applied := cp.waitDemandApplied(t, served.Revision, limit)
	for _, c := range clients {
		v := cp.waitAcked(t, c.node, applied, limit)
		t.Logf("%s: %s ACKed EDS %s, the demand applied at revision %d, %v after the manifest was written", phaseC, c.node, v, applied,
			time.Since(written).Round(time.Millisecond))
	}
	const demand = "eu/a=3,eu/b=1,us/c=1"
	balanced := classExpectations(t, manifests, demand)
	none := explainOffline(t, manifests, affUpstream)
	expectZoneShares(t, "c None", none, backends, [3]uint64{333_334, 333_333, 333_333})
	expectZoneShares(t, "c eu/a", balanced["eu/a"], backends, [3]uint64{555_557, 222_222, 222_221})
	expectZoneShares(t, "c eu/b", balanced["eu/b"], backends, [3]uint64{0, 1_000_000, 0})
	expectZoneShares(t, "c us/c", balanced["us/c"], backends, [3]uint64{0, 0, 1_000_000})
	cp.checkLiveClasses(t, phaseC, balanced)
	parts, zs := measure(t, phaseC, clients, balanced)
	figures["c"] = zs
	zs["all five, against None"] = splitcheck.CheckAggregate(t, phaseC+": all five clients against the None split", parts, none)

	// What would have failed: the same RPCs judged against PreferSameZone's
	// classes (a plane that ignored the mode change), and eu/a's judged
	// against None (a plane that did not re-divide by demand).
	var asPrefer, euaAsNone []splitcheck.Part
	for i, p := range parts {
		asPrefer = append(asPrefer, splitcheck.Part{Got: p.Got, Want: preferAll[clients[i].zone]})
		if clients[i].zone == "eu/a" {
			euaAsNone = append(euaAsNone, splitcheck.Part{Got: p.Got, Want: none})
		}
	}
	if d := splitcheck.Deviation(asPrefer); d <= 4.5 {
		t.Errorf("%s: the RPCs of all five clients are only %.2f σ from what PreferSameZone would give: the check cannot tell Balanced from it", phaseC, d)
	} else {
		t.Logf("%s: PreferSameZone's split would have been %.0f σ off, None's for eu/a %.0f σ", phaseC, d, splitcheck.Deviation(euaAsNone))
	}
	if d := splitcheck.Deviation(euaAsNone); d <= 4.5 {
		t.Errorf("%s: eu/a's RPCs are only %.2f σ from the None split: the check cannot tell Balanced from None", phaseC, d)
	}

	var summary strings.Builder
	for _, phase := range slices.Sorted(maps.Keys(figures)) {
		for _, z := range slices.Sorted(maps.Keys(figures[phase])) {
			fmt.Fprintf(&summary, "  %s  %-24s largest |z| %.2f\n", phase, z, figures[phase][z])
		}
	}
	t.Logf("expectations from controlplane explain --from; %v in all\n%s", time.Since(start).Round(100*time.Millisecond), summary.String())
}

// classExpectations is classExpectation for each of affZones.
func classExpectations(t *testing.T, dir, demand string) map[string]splitcheck.Expectation {
	t.Helper()
	out := map[string]splitcheck.Expectation{}
	for _, z := range affZones {
		out[z] = classExpectation(t, dir, affUpstream, z, demand)
	}
	return out
}

// classExpectation runs `controlplane explain --from from [--demand
// demand] -o json` on the manifests and returns the split it computes for
// clients in from (REGION/ZONE) of upstream under its localityAffinity;
// demand (REGION/ZONE=N,...) is for Balanced, which must then divide the
// split rather than fall back to None.
func classExpectation(t *testing.T, dir, upstream, from, demand string) splitcheck.Expectation {
	t.Helper()
	args := []string{"explain", "-f", dir, "--upstream", upstream, "--from", from, "-o", "json"}
	if demand != "" {
		args = append(args, "--demand", demand)
	}
	cmd := exec.Command(binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("explain %s: %v\n%s", strings.Join(args[1:], " "), err, stderr.String())
	}
	var rep explain.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Upstreams) == 1 && rep.Upstreams[0].Class != nil {
		if c := rep.Upstreams[0].Class; c.Mode == "Balanced" && demand != "" && c.ReceivesNone {
			t.Fatalf("explain --from %s --demand %s: the clients receive the None split: %s", from, demand, c.Reason)
		}
	}
	return splitcheck.ClassExpectationOf(t, rep)
}

// expectShares requires explain's split to give the backends exactly these
// shares and every other backend none.
func expectShares(t *testing.T, what string, e splitcheck.Expectation, b []*splitcheck.Backend, want map[int]uint64) {
	t.Helper()
	for i, be := range b {
		if got := e.Share[be.Addr]; got != want[i] {
			t.Fatalf("%s: explain gives backend %d (%s) a share of %d, want %d; all: %v", what, i, be.Addr, got, want[i], e.Share)
		}
	}
}

// expectZoneShares requires explain's split to give each zone's two
// backends together exactly these shares.
func expectZoneShares(t *testing.T, what string, e splitcheck.Expectation, b []*splitcheck.Backend, want [3]uint64) {
	t.Helper()
	for i, z := range affZones {
		if got := e.Share[b[2*i].Addr] + e.Share[b[2*i+1].Addr]; got != want[i] {
			t.Fatalf("%s: explain gives zone %s a share of %d, want %d; all: %v", what, z, got, want[i], e.Share)
		}
	}
}

// measure warms every client up to its zone's split, has each send
// affRPCs, and checks each zone's summed RPCs against that split. It
// returns one part per client, in order, and each zone's largest |z|.
func measure(t *testing.T, phase string, clients []zoneClient, want map[string]splitcheck.Expectation) ([]splitcheck.Part, map[string]float64) {
	t.Helper()
	for _, c := range clients {
		splitcheck.Warm(t, c.conn, want[c.zone])
	}
	parts := make([]splitcheck.Part, len(clients))
	byZone := map[string][]splitcheck.Part{}
	for i, c := range clients {
		parts[i] = splitcheck.Part{Got: splitcheck.Send(c.conn, affRPCs), Want: want[c.zone]}
		byZone[c.zone] = append(byZone[c.zone], parts[i])
	}
	worst := map[string]float64{}
	for _, z := range affZones {
		if len(byZone[z]) > 0 {
			worst[z] = splitcheck.CheckAggregate(t, fmt.Sprintf("%s: %s (%d client(s))", phase, z, len(byZone[z])), byZone[z], want[z])
		}
	}
	return parts, worst
}

// waitClasses waits until every client is connected in the class of its
// own zone, counts a demand weight of 1, and has ACKed the upstream's
// endpoints.
func (cp *controlPlane) waitClasses(t *testing.T, clients []zoneClient) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "every client in its zone's class", func() (bool, string) {
		var v clientsView
		if err := testkit.GetJSON(cp.adminURL+"/debug/clients", &v); err != nil {
			return false, err.Error()
		}
		var missing []string
		for _, c := range clients {
			i := slices.IndexFunc(v.Clients, func(x clientView) bool { return x.NodeID == c.node })
			if i < 0 {
				missing = append(missing, c.node+": not connected")
				continue
			}
			x := v.Clients[i]
			if x.Zone != c.zone || x.Class != c.zone || x.DemandWeight != 1 || x.DemandNote != "" || x.Types["EDS"].LastAckedVersion == "" {
				missing = append(missing, fmt.Sprintf("%s: zone %q class %q demand weight %d %q, EDS ACKed %q", c.node, x.Zone, x.Class, x.DemandWeight, x.DemandNote, x.Types["EDS"].LastAckedVersion))
			}
		}
		return len(missing) == 0, "\n  " + strings.Join(missing, "\n  ")
	})
}

// waitDemandApplied waits until the plane's snapshot, from revision from
// on, divides aff/echo by the demand of its connected clients (as
// /debug/explain says for clients in eu/a), and returns that revision.
// The revision the manifest change was first seen at may already be the
// demand's own: the signal applies a settled census's demand at once, and
// can do so before the test first asks.
func (cp *controlPlane) waitDemandApplied(t *testing.T, from uint64, within time.Duration) uint64 {
	t.Helper()
	var applied uint64
	testkit.Eventually(t, within, "the clients' demand applied", func() (bool, string) {
		var rep explain.Report
		if err := testkit.GetJSON(cp.adminURL+"/debug/explain?upstream="+affUpstream+"&from="+affZones[0], &rep); err != nil {
			return false, err.Error()
		}
		if len(rep.Upstreams) != 1 || rep.Upstreams[0].Class == nil || rep.Upstreams[0].Class.Balanced == nil {
			return false, fmt.Sprintf("revision %d has no Balanced class", rep.Revision)
		}
		if b := rep.Upstreams[0].Class.Balanced; rep.Revision < from || b.DemandSource != explain.DemandClients {
			return false, fmt.Sprintf("revision %d, demand source %s\n%s", rep.Revision, b.DemandSource, cp.Logs())
		}
		applied = rep.Revision
		return true, ""
	})
	return applied
}

// checkLiveClasses compares, for each zone, what /debug/explain?from=
// says the plane gives its clients with what explain --from computed.
// Only a class divided by the demand the plane applied can be compared:
// without that, the live explain has no demand to divide by, and the test
// says so rather than passing in silence.
func (cp *controlPlane) checkLiveClasses(t *testing.T, phase string, want map[string]splitcheck.Expectation) {
	t.Helper()
	for _, z := range affZones {
		var rep explain.Report
		testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream="+affUpstream+"&from="+z, &rep)
		c := rep.Upstreams[0].Class
		if c == nil || c.Balanced == nil || c.Balanced.DemandSource != explain.DemandClients {
			source, reason := "", ""
			if c != nil && c.Balanced != nil {
				source, reason = c.Balanced.DemandSource, c.Reason
			}
			t.Logf("%s: not compared for %s: /debug/explain?from= does not divide by the demand the plane applied (demand source %q: %s)", phase, z, source, reason)
			continue
		}
		if got := splitcheck.ClassExpectationOf(t, rep); !maps.Equal(got.Share, want[z].Share) || got.Dropped != want[z].Dropped {
			t.Errorf("%s: /debug/explain?from=%s gives %v, explain --from with the clients' demand %v", phase, z, got.Share, want[z].Share)
		}
	}
}
