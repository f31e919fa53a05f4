package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"poise.dev/poise/pkg/explain"
)

// binary is the controlplane built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "poise-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "controlplane")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/controlplane")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build controlplane:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// backend is a real gRPC server on 127.0.0.1 that names itself in a header.
type backend struct {
	healthpb.UnimplementedHealthServer
	addr string
	port int
	srv  *grpc.Server
}

func (b *backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-backend", b.addr)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	var out []*backend
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &backend{addr: lis.Addr().String(), port: lis.Addr().(*net.TCPAddr).Port, srv: grpc.NewServer()}
		healthpb.RegisterHealthServer(b.srv, b)
		go b.srv.Serve(lis)
		t.Cleanup(b.srv.Stop)
		out = append(out, b)
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// controlPlane is a running controlplane process.
type controlPlane struct {
	cmd               *exec.Cmd
	xdsAddr, adminURL string
	out               *bytes.Buffer
	done              chan struct{}
}

func startControlPlane(t *testing.T, dir, xdsAddr, adminAddr string) *controlPlane {
	t.Helper()
	cp := &controlPlane{xdsAddr: xdsAddr, adminURL: "http://" + adminAddr, out: &bytes.Buffer{}, done: make(chan struct{})}
	cp.cmd = exec.Command(binary, "serve", "-f", dir, "--xds-address", xdsAddr, "--admin-address", adminAddr, "--debounce", "20ms")
	lw := &lockedWriter{w: cp.out}
	cp.cmd.Stdout, cp.cmd.Stderr = lw, lw
	if err := cp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cp.cmd.Wait(); close(cp.done) }()
	t.Cleanup(func() { cp.stop(t) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(cp.adminURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cp
			}
		}
		select {
		case <-cp.done:
			t.Fatalf("controlplane exited before it was ready:\n%s", cp.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("controlplane not ready after 20s:\n%s", cp.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (cp *controlPlane) stop(t *testing.T) {
	select {
	case <-cp.done:
		return
	default:
	}
	_ = cp.cmd.Process.Signal(os.Interrupt)
	select {
	case <-cp.done:
	case <-time.After(10 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.done
		t.Errorf("controlplane did not stop within 10s of SIGINT")
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (cp *controlPlane) logs() string {
	if lw, ok := cp.cmd.Stdout.(*lockedWriter); ok {
		lw.mu.Lock()
		defer lw.mu.Unlock()
	}
	return cp.out.String()
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
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
	Clients []struct {
		NodeID string `json:"nodeId"`
		Kind   string `json:"kind"`
		Types  map[string]struct {
			LastSentVersion  string `json:"lastSentVersion"`
			LastAckedVersion string `json:"lastAckedVersion"`
			NACKs            uint64 `json:"nacks"`
		} `json:"types"`
	} `json:"clients"`
}

// ackedEDS is the EDS version the node last ACKed, "" when not connected.
func (cp *controlPlane) ackedEDS(t *testing.T, node string) string {
	var v clientsView
	getJSON(t, cp.adminURL+"/debug/clients", &v)
	for _, c := range v.Clients {
		if c.NodeID == node {
			return c.Types["EDS"].LastAckedVersion
		}
	}
	return ""
}

// waitAcked waits until the node has ACKed an EDS version of the given
// revision and returns the version.
func (cp *controlPlane) waitAcked(t *testing.T, node string, revision uint64, timeout time.Duration) string {
	t.Helper()
	suffix := fmt.Sprintf("-%d", revision)
	deadline := time.Now().Add(timeout)
	for {
		if v := cp.ackedEDS(t, node); strings.HasSuffix(v, suffix) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s did not ACK revision %d within %v (acked %q)\n%s", node, revision, timeout, cp.ackedEDS(t, node), cp.logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newXDSClient dials xds:///listener through grpc-go's own xDS resolver,
// isolated per call with its own bootstrap.
func newXDSClient(t *testing.T, xdsAddr, node, listener string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":"passthrough:///%s","channel_creds":[{"type":"insecure"}]}],"node":{"id":%q,"cluster":"e2e"}}`, xdsAddr, node)
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+listener, grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect() // resolve now: the xDS stream opens before the first RPC
	return conn
}

// tally is what a batch of RPCs observed.
type tally struct {
	total   int
	dropped int
	by      map[string]int // backend address → RPCs it served
	other   []error
}

// send makes n RPCs over 8 workers and counts who served each.
func send(t *testing.T, conn *grpc.ClientConn, n int) tally {
	t.Helper()
	client := healthpb.NewHealthClient(conn)
	res := tally{total: n, by: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	per := n / 8
	for w := range 8 {
		count := per
		if w == 7 {
			count = n - 7*per
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			dropped := 0
			var other []error
			for range count {
				var md metadata.MD
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
				cancel()
				switch {
				case err == nil && len(md.Get("x-backend")) == 1:
					local[md.Get("x-backend")[0]]++
				case status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "dropped"):
					dropped++
				default:
					other = append(other, err)
				}
			}
			mu.Lock()
			for k, v := range local {
				res.by[k] += v
			}
			res.dropped += dropped
			res.other = append(res.other, other...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// expectation is the split explain computed: millionths per backend and dropped.
type expectation struct {
	revision uint64
	share    map[string]uint64
	dropped  uint64
}

// explainOffline runs `controlplane explain -o json` on the manifests, the
// same computation the served snapshot carries.
func explainOffline(t *testing.T, dir, upstream string) expectation {
	t.Helper()
	out, err := exec.Command(binary, "explain", "-f", dir, "--upstream", upstream, "-o", "json").Output()
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	var rep explain.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return expectationOf(t, rep)
}

func expectationOf(t *testing.T, rep explain.Report) expectation {
	t.Helper()
	if len(rep.Upstreams) != 1 {
		t.Fatalf("want one upstream in the report, got %d", len(rep.Upstreams))
	}
	u := rep.Upstreams[0]
	e := expectation{revision: rep.Revision, share: map[string]uint64{}, dropped: u.DroppedMillionths}
	if u.Outcome == "PanicRejected" {
		e.dropped = 1_000_000
	}
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, ep := range l.Endpoints {
				e.share[net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port))] = ep.Share
			}
		}
	}
	return e
}

// warm sends RPCs until every backend with a share has served one, so the
// measured split is not skewed by connections still being made (gRPC
// weighs only READY localities).
func warm(t *testing.T, conn *grpc.ClientConn, want expectation) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	seen := map[string]bool{}
	for {
		res := send(t, conn, 200)
		for k := range res.by {
			seen[k] = true
		}
		missing := []string{}
		for addr, s := range want.share {
			if s > 0 && !seen[addr] {
				missing = append(missing, addr)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends %v never served an RPC", missing)
		}
	}
}

// checkSplit requires every cell (each backend, and the dropped fraction)
// within 4.5 standard deviations of its binomial expectation; a cell whose
// share is 0 must see nothing.
func checkSplit(t *testing.T, phase string, got tally, want expectation) {
	t.Helper()
	if len(got.other) > 0 {
		t.Fatalf("%s: %d RPCs failed unexpectedly, first: %v", phase, len(got.other), got.other[0])
	}
	n := float64(got.total)
	type cell struct {
		name     string
		observed int
		p        float64
	}
	var cells []cell
	for addr, s := range want.share {
		cells = append(cells, cell{addr, got.by[addr], float64(s) / 1e6})
	}
	for addr, c := range got.by {
		if _, ok := want.share[addr]; !ok {
			cells = append(cells, cell{addr + " (not in the topology)", c, 0})
		}
	}
	cells = append(cells, cell{"dropped", got.dropped, float64(want.dropped) / 1e6})
	sort.Slice(cells, func(i, j int) bool { return cells[i].name < cells[j].name })
	var report strings.Builder
	worst := 0.0
	for _, c := range cells {
		mean := n * c.p
		sd := math.Sqrt(n * c.p * (1 - c.p))
		z := 0.0
		if sd > 0 {
			z = (float64(c.observed) - mean) / sd
		}
		fmt.Fprintf(&report, "  %-28s expected %7.4f%%  observed %7.4f%% (%6d)  z=%+.2f\n", c.name, 100*c.p, 100*float64(c.observed)/n, c.observed, z)
		if c.p == 0 && c.observed > 0 {
			t.Errorf("%s: %s has share 0 but served %d RPCs", phase, c.name, c.observed)
		}
		if math.Abs(z) > 4.5 {
			t.Errorf("%s: %s is %.2f standard deviations from its computed share", phase, c.name, z)
		}
		worst = max(worst, math.Abs(z))
	}
	t.Logf("%s: %d RPCs, largest |z| = %.2f\n%s", phase, got.total, worst, report.String())
}
