package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

const (
	keysNode     = "e2e-keyed-client"
	keysListener = "carts.e2e" // the API listener of Upstream e2e/carts
	keysHeader   = "x-user"
	keyCount     = 10_000
)

// keyedTopology writes Upstream e2e/carts: RingHash keyed by the x-user
// header (a "Bearer " prefix rewritten away), two zones 3:1 with mixed
// endpoint weights, over the backends listed (by index).
//
// pods, when set, names the pod each backend plays: its endpoint gets the
// pod's hash key ("pod-N") and the pod's weight, so a pod that comes back
// on another backend (another address) is the same endpoint to a client
// that honours hash keys.
// unhealthy lists the backends whose probe the EndpointSet's status reports
// Unhealthy.
func keyedTopology(t *testing.T, dir string, b []*splitcheck.Backend, zoneA, zoneB []int, pods map[int]int, unhealthy ...int) {
	t.Helper()
	var y strings.Builder
	y.WriteString(`apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: carts, namespace: e2e}
spec:
  protocol: GRPC
  loadBalancing: RingHash
  addressPolicy: {allowLoopback: true}
  requestAffinity:
    keys:
    - header: {name: x-user, rewrite: {pattern: '^Bearer '}}
`)
	for _, z := range []struct {
		name   string
		weight int
		eps    []int
	}{{"a", 3, zoneA}, {"b", 1, zoneB}} {
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: carts-%s, namespace: e2e}\nspec: {upstream: carts, priority: 0, region: r, zone: %s, weight: %d}\n", z.name, z.name, z.weight)
		fmt.Fprintf(&y, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: carts-%s, namespace: e2e}\nspec:\n  upstream: carts\n  locality: {region: r, zone: %s}\n  endpoints:\n", z.name, z.name)
		for _, i := range z.eps {
			if pod, ok := pods[i]; ok {
				fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d, weight: %d, hashKey: pod-%d}\n", b[i].Port, 1+pod%3, pod)
				continue
			}
			fmt.Fprintf(&y, "  - {address: 127.0.0.1, port: %d, weight: %d}\n", b[i].Port, 1+i%3)
		}
		var health []string
		for _, i := range z.eps {
			if slices.Contains(unhealthy, i) {
				health = append(health, fmt.Sprintf("  - {address: 127.0.0.1, port: %d, probe: Unhealthy}\n", b[i].Port))
			}
		}
		if len(health) > 0 {
			y.WriteString("status:\n  health:\n" + strings.Join(health, ""))
		}
	}
	writeAtomically(t, filepath.Join(dir, "carts.yaml"), y.String())
}

// predictedOwners runs `controlplane explain --keys` on the manifests and
// returns, for each key of the file, the endpoint grpc-go sends it to.
func predictedOwners(t *testing.T, dir, keysFile string, extra ...string) map[string]string {
	t.Helper()
	args := append([]string{"explain", "-f", dir, "--upstream", "e2e/carts", "--keys", keysFile}, extra...)
	cmd := exec.Command(binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("explain --keys: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	column := -1
	owners := map[string]string{}
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch {
		case column < 0 && f[0] == "# key":
			for i, c := range f {
				if c == "grpc-go" {
					column = i
				}
			}
			if column < 0 {
				t.Fatalf("explain --keys names no grpc-go column: %q", sc.Text())
			}
		case column > 0 && !strings.HasPrefix(f[0], "#") && len(f) > column:
			owners[f[0]] = f[column]
		}
		if strings.HasPrefix(sc.Text(), "upstream ") {
			break // the summary after the keys
		}
	}
	if len(owners) != keyCount {
		t.Fatalf("explain --keys gave %d owners for %d keys:\n%.2000s", len(owners), keyCount, out)
	}
	return owners
}

// served sends one RPC per key with the key in the x-user header (as the
// rewrite's "Bearer " form for every other key, which must hash the same)
// over 8 workers, and returns the backend that served each.
func servedOwners(t *testing.T, conn *grpc.ClientConn, keys []string) map[string]string {
	t.Helper()
	client := healthpb.NewHealthClient(conn)
	got := make(map[string]string, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 8 {
				value := keys[i]
				if i%2 == 1 {
					value = "Bearer " + keys[i]
				}
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), keysHeader, value), 10*time.Second)
				var md metadata.MD
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
				cancel()
				if err != nil || len(md.Get("x-backend")) != 1 {
					errs <- fmt.Errorf("key %q: %v (x-backend %q)", keys[i], err, md.Get("x-backend"))
					return
				}
				mu.Lock()
				got[keys[i]] = md.Get("x-backend")[0]
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return got
}

// TestKeyedRPCsGoWhereExplainSays: real grpc-go xDS clients send 10,000
// distinct keys in a header to a RingHash upstream with request affinity;
// the backend that served each RPC is, for every key, the one `explain
// --keys` predicts for grpc-go from the same manifests. Then an endpoint is
// removed, two added and one marked unhealthy: again every key matches, and the keys that moved
// are exactly those explain's two predictions differ on (on grpc-go's
// capped ring, more than the keys the removed endpoint owned). Last, the
// endpoints get hash keys, and one pod comes back at another address with
// its hash key: it gets back exactly its keys (grpc-go places endpoints by
// hash key, gRFC A76).
func TestKeyedRPCsGoWhereExplainSays(t *testing.T) {
	t.Parallel()
	keyedRPCs(t, os.Getenv(ringCapEnv))
}

// ringCapEnv, in a child test process, is the ring cap grpc-go was started
// with (GRPC_RING_HASH_CAP, which it reads once, when the process starts).
const ringCapEnv = "POISE_E2E_GRPC_RING_HASH_CAP"

// TestKeyedRPCsAtARaisedRingCap is TestKeyedRPCsGoWhereExplainSays in a
// process whose grpc-go caps its ring at 65,536 entries instead of 4,096,
// with explain told so (--grpc-ring-cap): the same 10,000 keys, every one
// where explain says on the larger ring.
func TestKeyedRPCsAtARaisedRingCap(t *testing.T) {
	t.Parallel()
	if os.Getenv(ringCapEnv) != "" {
		t.Skip("this is the child process: TestKeyedRPCsGoWhereExplainSays runs at the raised cap here")
	}
	const ringCap = "65536"
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKeyedRPCsGoWhereExplainSays$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRPC_RING_HASH_CAP="+ringCap, ringCapEnv+"="+ringCap)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKeyedRPCsGoWhereExplainSays") {
		t.Fatalf("at GRPC_RING_HASH_CAP=%s: %v\n%s", ringCap, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "keys_test.go") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// keyedRPCs is TestKeyedRPCsGoWhereExplainSays with grpc-go's ring capped
// at ringCap ("" for its default, 4,096).
func keyedRPCs(t *testing.T, ringCap string) {
	backends := splitcheck.StartBackends(t, "127.0.0.1", 7)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, keyCount)
	var file strings.Builder
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
		file.WriteString(keys[i] + "\n")
	}
	keysFile := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keysFile, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	keyedTopology(t, manifests, backends, []int{0, 1, 2}, []int{3, 4}, nil)
	xdsAddr, adminAddr := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	cp := startControlPlane(t, manifests, xdsAddr, adminAddr)
	conn := splitcheck.NewXDSClient(t, xdsAddr, keysNode, keysListener)

	var before map[string]string
	named := map[int]int{0: 0, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}
	moved := map[int]int{0: 0, 1: 2, 3: 3, 4: 4, 5: 5, 6: 6} // pod-2 on backend 1
	for _, phase := range []struct {
		name         string
		zoneA, zoneB []int
		pods         map[int]int
		unhealthy    []int
	}{
		{"1 five endpoints", []int{0, 1, 2}, []int{3, 4}, nil, nil},
		{"2 one removed", []int{0, 2}, []int{3, 4}, nil, nil},
		{"3 two added", []int{0, 2, 5}, []int{3, 4, 6}, nil, nil},
		{"4 one marked unhealthy", []int{0, 2, 5}, []int{3, 4, 6}, nil, []int{5}},
		{"5 hash keys", []int{0, 2, 5}, []int{3, 4, 6}, named, nil},
		{"6 pod-2 back at another address", []int{0, 1, 5}, []int{3, 4, 6}, moved, nil},
	} {
		keyedTopology(t, manifests, backends, phase.zoneA, phase.zoneB, phase.pods, phase.unhealthy...)
		served := cp.waitServed(t, phase.name, manifests, "e2e/carts")
		cp.waitAcked(t, keysNode, served.Revision, 10*time.Second)
		var extra []string
		if ringCap != "" {
			extra = []string{"--grpc-ring-cap", ringCap}
		}
		want := predictedOwners(t, manifests, keysFile, extra...)
		// the client ACKs an assignment a moment before its picker has the
		// new ring: wait until a sample of keys lands where predicted
		sample := keys[:200]
		testkit.Eventually(t, 10*time.Second, phase.name+": the client's picker has the new ring", func() (bool, string) {
			got := servedOwners(t, conn, sample)
			for _, k := range sample {
				if got[k] != want[k] {
					return false, fmt.Sprintf("key %s served by %s, explain says %s", k, got[k], want[k])
				}
			}
			return true, ""
		})
		start := time.Now()
		got := servedOwners(t, conn, keys)
		wrong := 0
		for _, k := range keys {
			if got[k] != want[k] {
				if wrong++; wrong <= 5 {
					t.Errorf("%s: key %s served by %s, explain --keys says grpc-go sends it to %s", phase.name, k, got[k], want[k])
				}
			}
		}
		if wrong > 0 {
			t.Fatalf("%s: %d of %d keys not where explain says", phase.name, wrong, len(keys))
		}
		owned := map[string]int{}
		for _, k := range keys {
			owned[want[k]]++
		}
		t.Logf("%s (grpc-go ring cap %s): %d keys, every one served where explain --keys says (%v); keys by endpoint %v", phase.name, cmpOr(ringCap, "4096 (default)"), len(keys), time.Since(start).Round(time.Millisecond), owned)
		if before != nil {
			// every key is where explain said, before and after: the keys
			// that moved are those its two predictions differ on
			moved, orphaned := 0, 0
			for _, k := range keys {
				if before[k] != want[k] {
					moved++
				}
				if owned[before[k]] == 0 {
					orphaned++ // its endpoint is gone
				}
			}
			if moved < orphaned {
				t.Errorf("%s: %d keys moved, fewer than the %d whose endpoint is gone", phase.name, moved, orphaned)
			}
			t.Logf("%s: %d keys moved, as explain's predictions before and after say; %d of them because their endpoint is gone, the rest because the ring was laid out again", phase.name, moved, orphaned)
		}
		if phase.pods != nil && phase.pods[1] == 2 {
			// the pod kept its hash key: it gets back exactly its keys,
			// at its new address, and no other key moves
			pod2, wrong := 0, 0
			for _, k := range keys {
				was := before[k]
				if was == backends[2].Addr {
					pod2++
					was = backends[1].Addr
				}
				if want[k] != was {
					wrong++
				}
			}
			if wrong > 0 || pod2 == 0 {
				t.Errorf("%s: %d keys are not where they were (pod-2's %d at its new address): a hash key should keep its place on the ring", phase.name, wrong, pod2)
			} else {
				t.Logf("%s: pod-2 got back exactly its %d keys at %s; no other key moved", phase.name, pod2, backends[1].Addr)
			}
		}
		before = want
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
