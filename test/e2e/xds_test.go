package e2e

import (
	"fmt"
	"os"
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
	node     = "e2e-grpc-client"
	listener = "echo.e2e" // the API listener of Upstream e2e/echo
	rpcs     = 20_000
)

// topology writes the manifests of Upstream e2e/echo over eight backends:
// priority 0 is eu-west (zones a and b, locality weights 3 and 2, mixed
// endpoint weights), priority 1 is us-east. unhealthy lists the backends
// whose probe reports Unhealthy (in their EndpointSet status).
type topology struct {
	panicMode string
	unhealthy map[int]bool
	// noPanic sets panicThreshold 0: a priority never panics, so with no
	// eligible endpoint the upstream has NoCapacity.
	noPanic bool
}

func (tp topology) write(t *testing.T, dir string, b []*splitcheck.Backend) {
	t.Helper()
	type ep struct {
		i, weight int
	}
	sets := []struct {
		name, region, zone string
		eps                []ep
	}{
		{"eu-west-a", "eu-west", "eu-west-a", []ep{{0, 1}, {1, 3}}},
		{"eu-west-b", "eu-west", "eu-west-b", []ep{{2, 2}, {3, 1}}},
		{"us-east-a", "us-east", "us-east-a", []ep{{4, 1}, {5, 1}}},
		{"us-east-b", "us-east", "us-east-b", []ep{{6, 3}, {7, 1}}},
	}
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: echo, namespace: e2e}\nspec:\n  protocol: GRPC\n  panicMode: %s\n  addressPolicy: {allowLoopback: true} # the backends run on 127.0.0.1\n", tp.panicMode)
	if tp.noPanic {
		y.WriteString("  panicThreshold: 0\n")
	}
	for _, l := range []struct {
		zone     string
		priority int
		weight   int
	}{{"eu-west-a", 0, 3}, {"eu-west-b", 0, 2}, {"us-east-a", 1, 1}, {"us-east-b", 1, 1}} {
		region := l.zone[:7]
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s, namespace: e2e}\nspec: {upstream: echo, priority: %d, region: %s, zone: %s, weight: %d}\n",
			l.zone, l.priority, region, l.zone, l.weight)
	}
	for _, s := range sets {
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s, namespace: e2e}\nspec:\n  upstream: echo\n  locality: {region: %s, zone: %s}\n  endpoints:\n", s.name, s.region, s.zone)
		for _, e := range s.eps {
			fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d, weight: %d}\n", b[e.i].Port, e.weight)
		}
		var health []string
		for _, e := range s.eps {
			if tp.unhealthy[e.i] {
				health = append(health, fmt.Sprintf("  - {address: 127.0.0.1, port: %d, probe: Unhealthy}\n", b[e.i].Port))
			}
		}
		if len(health) > 0 {
			y.WriteString("status:\n  health:\n" + strings.Join(health, ""))
		}
	}
	writeAtomically(t, filepath.Join(dir, "echo.yaml"), y.String())
}

// writeAtomically replaces a file by renaming, as editors and kubectl-style
// tooling do, so the watcher never reads half a file.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func unhealthy(idx ...int) map[int]bool {
	m := map[int]bool{}
	for _, i := range idx {
		m[i] = true
	}
	return m
}

// TestGRPCClientsCarryOutTheComputedSplit drives grpc-go's xDS client
// through a served topology phase by phase and compares what it does with
// what explain computed.
func TestGRPCClientsCarryOutTheComputedSplit(t *testing.T) {
	t.Parallel()
	backends := splitcheck.StartBackends(t, "127.0.0.1", 8)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	topology{panicMode: "UseAll"}.write(t, manifests, backends)
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)
	conn := splitcheck.NewXDSClient(t, xdsAddr, node, listener)

	var versions []string            // every EDS version the client ACKed, across restarts
	var prev *splitcheck.Expectation // the split measured last
	// apply writes a topology, waits until the client ACKs its revision and
	// reports how long that took; then measures the split.
	apply := func(phase string, tp topology) splitcheck.Expectation {
		t.Helper()
		start := time.Now()
		if tp.panicMode != "" || tp.unhealthy != nil {
			tp.write(t, manifests, backends)
		}
		served := cp.waitServed(t, phase, manifests, "e2e/echo")
		// the served snapshot is a directory fed file by file; its revision
		// counts batches, so wait for the client to ACK whatever it is now
		v := cp.waitAcked(t, node, served.Revision, 10*time.Second)
		t.Logf("%s: change reached the client (EDS %s ACKed) %v after the manifest was written", phase, v, time.Since(start).Round(time.Millisecond))
		versions = append(versions, v)
		var live explain.Report
		testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream=e2e/echo", &live)
		want := splitcheck.ExpectationOf(t, live)
		if prev != nil {
			splitcheck.WarmFrom(t, conn, want, *prev)
		} else {
			splitcheck.Warm(t, conn, want)
		}
		splitcheck.CheckSplit(t, phase, splitcheck.Send(conn, rpcs), want)
		prev = &want
		return want
	}

	// 1. weighted localities with mixed endpoint weights, all healthy:
	//    priority 0 takes everything, 3:2 between zones, 1:3 and 2:1 inside.
	want := apply("1 weighted localities", topology{panicMode: "UseAll", unhealthy: map[int]bool{}})
	expectShare(t, want, backends[1], 450_000)

	// 2. a health change inside a locality: eu-west-b loses a third of its
	//    weight and keeps 93.33 % availability; priority 0 stays whole.
	want = apply("2 health change", topology{panicMode: "UseAll", unhealthy: unhealthy(3)})
	expectShare(t, want, backends[4], 0)

	// 3. priority spill-over: eu-west-a's weight-3 endpoint fails, priority 0
	//    health drops to 80 % and 20 % spills to us-east.
	want = apply("3 priority spill-over", topology{panicMode: "UseAll", unhealthy: unhealthy(1)})
	if want.Share[backends[4].Addr] == 0 {
		t.Fatalf("phase 3 computed no spill to priority 1: %+v", want)
	}

	// 4. total panic under UseAll: both priorities below the 50 % threshold
	//    (1 of 7 and 1 of 6 eligible); traffic goes to every Ready endpoint,
	//    split between priorities by their Ready weight.
	want = apply("4 panic UseAll", topology{panicMode: "UseAll", unhealthy: unhealthy(0, 1, 2, 4, 5, 6)})
	if want.Share[backends[0].Addr] == 0 || want.Share[backends[6].Addr] == 0 {
		t.Fatalf("phase 4 computed no panic routing to unhealthy endpoints: %+v", want)
	}

	// 5. FailClosed: priority 0 is in panic (1 of 7 eligible), priority 1 is
	//    not (3 of 6): priority 0's load is dropped.
	failClosed := topology{panicMode: "FailClosed", unhealthy: unhealthy(0, 1, 2, 4, 5, 7)}
	want = apply("5 FailClosed drops", failClosed)
	if want.Dropped == 0 {
		t.Fatalf("phase 5 computed no drop: %+v", want)
	}

	// 6. an invalid edit: a Locality that contradicts another. It is refused,
	//    counted, and the client keeps the same configuration and split.
	rejectedBefore := cp.metric(t, `poise_source_batches_total{result="rejected",source="files"}`)
	revBefore := cp.metric(t, "poise_xds_published_revision")
	bad := filepath.Join(manifests, "conflict.yaml")
	start := time.Now()
	writeAtomically(t, bad, "apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: conflicting, namespace: e2e}\nspec: {upstream: echo, priority: 0, region: eu-west, zone: eu-west-a, weight: 7}\n")
	testkit.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "6 invalid edit: refused", func() (bool, string) {
		return cp.metric(t, `poise_source_batches_total{result="rejected",source="files"}`) > rejectedBefore, ""
	})
	t.Logf("6 invalid edit: refused %v after it was written", time.Since(start).Round(time.Millisecond))
	cp.waitLogged(t, "6 invalid edit: the refusal logged with its reason", "InconsistentTopology")
	if got := cp.metric(t, "poise_xds_published_revision"); got != revBefore {
		t.Fatalf("published revision moved from %v to %v after an invalid edit", revBefore, got)
	}
	splitcheck.CheckSplit(t, "6 invalid edit", splitcheck.Send(conn, rpcs), want)
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}

	// 7. restart: the control plane goes away and comes back on the same
	//    port. Clients keep routing meanwhile, reconnect, and are sent
	//    versions that never repeat the old ones.
	before := cp.ackedEDS(t, node)
	cp.Stop(t)
	down := splitcheck.Send(conn, 2_000)
	splitcheck.CheckSplit(t, "7a control plane down", down, want)
	start = time.Now()
	cp = startControlPlane(t, manifests, xdsAddr, adminAddr)
	var live explain.Report
	testkit.MustGetJSON(t, cp.adminURL+"/debug/explain?upstream=e2e/echo", &live)
	after := cp.waitAcked(t, node, live.Revision, 30*time.Second)
	t.Logf("7 restart: client reconnected and ACKed %s %v after the restart began (was %s)", after, time.Since(start).Round(time.Millisecond), before)
	for _, v := range versions {
		if v == after {
			t.Fatalf("version %s repeated across a restart", after)
		}
	}
	if prefix(after) == prefix(before) {
		t.Fatalf("instance prefix %q did not change across a restart", prefix(after))
	}
	splitcheck.CheckSplit(t, "7b after restart", splitcheck.Send(conn, rpcs), splitcheck.ExpectationOf(t, live))
}

func prefix(version string) string {
	i := strings.LastIndex(version, "-")
	if i < 0 {
		return version
	}
	return version[:i]
}

func expectShare(t *testing.T, e splitcheck.Expectation, b *splitcheck.Backend, want uint64) {
	t.Helper()
	if got := e.Share[b.Addr]; got != want {
		t.Fatalf("explain gives %s a share of %d, want %d", b.Addr, got, want)
	}
}
