// Package splitcheck is what the end-to-end suites share to prove a traffic
// split: real gRPC backends on 127.0.0.1 that name themselves, grpc-go's own
// xDS client, and a statistical comparison of the RPCs it sends with the
// shares explain computed.
package splitcheck

import (
	"context"
	"fmt"
	"math"
	"net"
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

// Backend is a real gRPC health server that names itself in a header.
type Backend struct {
	healthpb.UnimplementedHealthServer
	Host string
	Addr string // host:port
	Port int32
}

// Check answers SERVING and says which backend served.
func (b *Backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-backend", b.Addr)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// StartBackends starts n backends on host (127.0.0.1 in every suite).
func StartBackends(t *testing.T, host string, n int) []*Backend {
	t.Helper()
	var out []*Backend
	for range n {
		lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		b := &Backend{Host: host, Addr: lis.Addr().String(), Port: int32(lis.Addr().(*net.TCPAddr).Port)}
		healthpb.RegisterHealthServer(srv, b)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		out = append(out, b)
	}
	return out
}

// NewXDSClient dials xds:///listener through grpc-go's own xDS resolver,
// isolated per call with its own bootstrap, and starts resolving at once.
func NewXDSClient(t *testing.T, xdsAddr, node, listener string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":"passthrough:///%s","channel_creds":[{"type":"insecure"}]}],"node":{"id":%q,"cluster":"poise-tests"}}`, xdsAddr, node)
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

// Tally is what a batch of RPCs observed.
type Tally struct {
	Total   int
	Dropped int
	By      map[string]int // backend address → RPCs it served
	Other   []error
}

// Send makes n RPCs over 8 workers and counts who served each.
func Send(conn *grpc.ClientConn, n int) Tally {
	client := healthpb.NewHealthClient(conn)
	res := Tally{Total: n, By: map[string]int{}}
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
				res.By[k] += v
			}
			res.Dropped += dropped
			res.Other = append(res.Other, other...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// Expectation is the split explain computed: millionths per backend address,
// and the dropped millionths.
type Expectation struct {
	Revision uint64
	Share    map[string]uint64
	Dropped  uint64
}

// ExpectationOf reads the one upstream of an explain report.
func ExpectationOf(t *testing.T, rep explain.Report) Expectation {
	t.Helper()
	if len(rep.Upstreams) != 1 {
		t.Fatalf("want one upstream in the report, got %d", len(rep.Upstreams))
	}
	u := rep.Upstreams[0]
	e := Expectation{Revision: rep.Revision, Share: map[string]uint64{}, Dropped: u.DroppedMillionths}
	if u.Outcome == "PanicRejected" {
		e.Dropped = 1_000_000
	}
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			for _, ep := range l.Endpoints {
				e.Share[net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port))] = ep.Share
			}
		}
	}
	return e
}

// Warm sends RPCs until every backend with a share has served one and no
// backend without one serves any more, so the measured split is not skewed
// by connections still being made (gRPC weighs only READY localities) or an
// update still arriving.
func Warm(t *testing.T, conn *grpc.ClientConn, want Expectation) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := Send(conn, 400)
		var missing, extra []string
		for addr, s := range want.Share {
			if s > 0 && res.By[addr] == 0 {
				missing = append(missing, addr)
			}
		}
		for addr, n := range res.By {
			if want.Share[addr] == 0 && n > 0 {
				extra = append(extra, addr)
			}
		}
		if len(missing) == 0 && len(extra) == 0 && len(res.Other) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: not serving %v; serving without a share %v; %d failures (first: %v)", missing, extra, len(res.Other), firstErr(res.Other))
		}
	}
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// CheckSplit requires every cell (each backend, and the dropped fraction)
// within 4.5 standard deviations of its binomial expectation; a cell whose
// share is 0 must see nothing.
func CheckSplit(t *testing.T, phase string, got Tally, want Expectation) {
	t.Helper()
	if len(got.Other) > 0 {
		t.Fatalf("%s: %d RPCs failed unexpectedly, first: %v", phase, len(got.Other), got.Other[0])
	}
	n := float64(got.Total)
	type cell struct {
		name     string
		observed int
		p        float64
	}
	var cells []cell
	for addr, s := range want.Share {
		cells = append(cells, cell{addr, got.By[addr], float64(s) / 1e6})
	}
	for addr, c := range got.By {
		if _, ok := want.Share[addr]; !ok {
			cells = append(cells, cell{addr + " (not in the topology)", c, 0})
		}
	}
	cells = append(cells, cell{"dropped", got.Dropped, float64(want.Dropped) / 1e6})
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
	t.Logf("%s: %d RPCs, largest |z| = %.2f\n%s", phase, got.Total, worst, report.String())
}
