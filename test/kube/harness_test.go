package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
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

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
)

// rpcs is how many RPCs a split check sends.
const rpcs = 10_000

// ---- control planes ----

// plane is one in-process control plane (controlplane.Run) on the
// Kubernetes source, with its logs captured.
type plane struct {
	name     string
	addrs    controlplane.Addrs
	adminURL string
	logs     *logSink
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
	err      error
}

// startPlane runs a control plane on namespace ns and waits until it is
// ready (caches synced, first snapshot published).
func startPlane(t *testing.T, ns, name string) *plane {
	t.Helper()
	p := &plane{name: name, logs: &logSink{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	started := make(chan controlplane.Addrs, 1)
	cfg := controlplane.Config{
		Source:                  "kubernetes",
		RestConfig:              restConfig,
		Namespace:               ns,
		LeaderElectionNamespace: ns,
		LeaderElectionID:        "poise-status-writer",
		LeaseDuration:           3 * time.Second,
		RenewDeadline:           2 * time.Second,
		RetryPeriod:             250 * time.Millisecond,
		XDSAddress:              "127.0.0.1:0",
		AdminAddress:            "127.0.0.1:0",
		Debounce:                20 * time.Millisecond,
		Log:                     slog.New(slog.NewTextHandler(p.logs, nil)).With("plane", name),
		Started:                 func(a controlplane.Addrs) { started <- a },
	}
	go func() { p.done <- controlplane.Run(ctx, cfg) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("plane %s logs (last 60 lines):\n%s", p.name, p.logs.tail(60))
		}
	})
	select {
	case p.addrs = <-started:
	case err := <-p.done:
		p.done <- err
		t.Fatalf("plane %s exited before it listened: %v\n%s", name, err, p.logs.tail(60))
	case <-time.After(60 * time.Second):
		t.Fatalf("plane %s did not listen within 60s\n%s", name, p.logs.tail(60))
	}
	p.adminURL = "http://" + p.addrs.Admin
	eventually(t, 30*time.Second, "plane "+name+" ready", func() (bool, string) {
		resp, err := http.Get(p.adminURL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(b)
	})
	return p
}

// stop cancels the plane and waits for Run to return; an error from Run
// fails the test.
func (p *plane) stop(t *testing.T) {
	t.Helper()
	p.stopOnce.Do(func() {
		p.cancel()
		select {
		case p.err = <-p.done:
			if p.err != nil {
				t.Errorf("plane %s: Run returned %v", p.name, p.err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("plane %s: Run did not return within 20s of cancellation", p.name)
		}
	})
}

// leads reports whether the plane's status writer has started.
func (p *plane) leads() bool { return p.logs.contains("status writer started") }

// logSink collects a plane's structured logs.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logSink) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Contains(l.buf.Bytes(), []byte(s))
}

func (l *logSink) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---- admin endpoints ----

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// explainOf is GET /debug/explain?upstream=ns/name.
func (p *plane) explainOf(ns, name string) (explain.Report, error) {
	var rep explain.Report
	err := getJSON(p.adminURL+"/debug/explain?upstream="+ns+"/"+name, &rep)
	if err == nil && len(rep.Upstreams) != 1 {
		err = fmt.Errorf("explain %s/%s: %d upstreams in the report", ns, name, len(rep.Upstreams))
	}
	return rep, err
}

// waitExplain polls explain until cond holds and returns that report.
func (p *plane) waitExplain(t *testing.T, ns, name, what string, cond func(explain.Upstream) (bool, string)) (explain.Report, time.Duration) {
	t.Helper()
	var rep explain.Report
	took := eventually(t, 15*time.Second, what, func() (bool, string) {
		var err error
		if rep, err = p.explainOf(ns, name); err != nil {
			return false, err.Error()
		}
		return cond(rep.Upstreams[0])
	})
	return rep, took
}

// ackedEDS is the revision of the EDS version the node last ACKed.
func (p *plane) ackedEDS(node string) (uint64, string, error) {
	var v struct {
		Clients []struct {
			NodeID string `json:"nodeId"`
			Types  map[string]struct {
				LastAckedVersion string `json:"lastAckedVersion"`
				NACKs            uint64 `json:"nacks"`
			} `json:"types"`
		} `json:"clients"`
	}
	if err := getJSON(p.adminURL+"/debug/clients", &v); err != nil {
		return 0, "", err
	}
	for _, c := range v.Clients {
		if c.NodeID != node {
			continue
		}
		for typ, st := range c.Types {
			if st.NACKs > 0 {
				return 0, "", fmt.Errorf("node %s NACKed %s", node, typ)
			}
		}
		ver := c.Types["EDS"].LastAckedVersion
		i := strings.LastIndex(ver, "-")
		rev, err := strconv.ParseUint(ver[i+1:], 10, 64)
		if err != nil {
			return 0, ver, nil
		}
		return rev, ver, nil
	}
	return 0, "", nil
}

// waitAcked waits until the node ACKed an EDS version of at least revision.
func (p *plane) waitAcked(t *testing.T, node string, revision uint64) time.Duration {
	t.Helper()
	return eventually(t, 15*time.Second, fmt.Sprintf("node %s ACKs EDS revision %d from plane %s", node, revision, p.name), func() (bool, string) {
		rev, ver, err := p.ackedEDS(node)
		if err != nil {
			return false, err.Error()
		}
		return rev >= revision, fmt.Sprintf("acked %q", ver)
	})
}

// ---- backends and the xDS client ----

// backend is a real gRPC server that names itself in a response header.
type backend struct {
	healthpb.UnimplementedHealthServer
	host string
	addr string
	port int32
}

func (b *backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-backend", b.addr)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func startBackends(t *testing.T, host string, n int) []*backend {
	t.Helper()
	var out []*backend
	for range n {
		lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		b := &backend{host: host, addr: lis.Addr().String(), port: int32(lis.Addr().(*net.TCPAddr).Port)}
		healthpb.RegisterHealthServer(srv, b)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		out = append(out, b)
	}
	return out
}

// newXDSClient dials xds:///listener through grpc-go's own xDS resolver,
// isolated per call with its own bootstrap.
func newXDSClient(t *testing.T, xdsAddr, node, listener string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":"passthrough:///%s","channel_creds":[{"type":"insecure"}]}],"node":{"id":%q,"cluster":"kube"}}`, xdsAddr, node)
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+listener, grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
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
func send(conn *grpc.ClientConn, n int) tally {
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

func expectationOf(rep explain.Report) expectation {
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

// warm sends RPCs until every backend with a share has served one and no
// backend without one serves any more, so the measured split is not skewed
// by connections still being made or an update still arriving.
func warm(t *testing.T, conn *grpc.ClientConn, want expectation) {
	t.Helper()
	eventually(t, 20*time.Second, "every backend with a share serves, and none without", func() (bool, string) {
		res := send(conn, 400)
		var missing, extra []string
		for addr, s := range want.share {
			if s > 0 && res.by[addr] == 0 {
				missing = append(missing, addr)
			}
		}
		for addr, n := range res.by {
			if want.share[addr] == 0 && n > 0 {
				extra = append(extra, addr)
			}
		}
		return len(missing) == 0 && len(extra) == 0 && len(res.other) == 0,
			fmt.Sprintf("not serving: %v; serving without a share: %v; failures: %d %v", missing, extra, len(res.other), firstErr(res.other))
	})
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
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

// measure warms the client up to the expectation and checks the split of rpcs RPCs.
func measure(t *testing.T, phase string, conn *grpc.ClientConn, want expectation) {
	t.Helper()
	warm(t, conn, want)
	start := time.Now()
	got := send(conn, rpcs)
	checkSplit(t, phase, got, want)
	t.Logf("%s: %d RPCs took %v", phase, rpcs, time.Since(start).Round(time.Millisecond))
}

// endpointOf finds an endpoint in an explained upstream.
func endpointOf(u explain.Upstream, b *backend) (explain.Endpoint, bool) {
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, ep := range l.Endpoints {
				if net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port)) == b.addr {
					return ep, true
				}
			}
		}
	}
	return explain.Endpoint{}, false
}
