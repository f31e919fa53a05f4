// Package splitcheck is what the end-to-end suites share to prove a traffic
// split: real gRPC backends on 127.0.0.1 that name themselves, grpc-go's own
// xDS client, and a statistical comparison of the RPCs it sends with the
// shares explain computed.
package splitcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
)

// PoisonHeader is a request header every Backend refuses (PermissionDenied):
// a client that sends it fails on every endpoint, as a client with broken
// credentials would.
const PoisonHeader = "x-poison"

// Backend is a real gRPC health server that names itself in a header.
type Backend struct {
	healthpb.UnimplementedHealthServer
	Host string
	Addr string // host:port
	Port int32
	// notServing turns its answer to NOT_SERVING (SetServing).
	notServing atomic.Bool
	// failures is the per mille of RPCs that fail (SetFailures); n counts
	// them; onlyWith, when set, is the header an RPC must carry to count.
	failures, n atomic.Int64
	onlyWith    atomic.Pointer[string]
	// attempts counts every RPC that reached the backend; unavailable is
	// the random UNAVAILABLE failure mode (SetUnavailable).
	attempts    atomic.Int64
	unavailable atomic.Pointer[randomFailures]
}

// SetServing makes Check answer SERVING (true) or NOT_SERVING (false). Either
// way the RPC succeeds and names the backend, so clients' traffic is still
// counted while an active check sees the server fail.
func (b *Backend) SetServing(serving bool) { b.notServing.Store(!serving) }

// SetFailures makes the given per mille of RPCs fail with Internal, evenly:
// RPC n fails when ⌊n·p/1000⌋ moves. With onlyWith, only the RPCs that carry
// that header count and fail: the clients on one side of a broken path.
func (b *Backend) SetFailures(perMille int64, onlyWith ...string) {
	h := ""
	if len(onlyWith) > 0 {
		h = onlyWith[0]
	}
	b.onlyWith.Store(&h)
	b.failures.Store(perMille)
}

// Check answers SERVING (or NOT_SERVING, see SetServing) and says which
// backend served, or fails (PoisonHeader, SetFailures).
func (b *Backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(PoisonHeader)) > 0 {
		return nil, status.Error(codes.PermissionDenied, "this client is refused")
	}
	b.attempts.Add(1)
	if b.failsUnavailable() {
		return nil, status.Error(codes.Unavailable, "injected unavailability")
	}
	if p := b.failures.Load(); p > 0 && b.selected(ctx) {
		if n := b.n.Add(1); n*p/1000 != (n-1)*p/1000 {
			return nil, status.Error(codes.Internal, "injected failure")
		}
	}
	return grpctraffic.Answer(ctx, b.Addr, !b.notServing.Load())
}

// selected says whether an RPC counts for SetFailures.
func (b *Backend) selected(ctx context.Context) bool {
	h := b.onlyWith.Load()
	if h == nil || *h == "" {
		return true
	}
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(*h)) > 0
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
		b := &Backend{Host: host, Addr: lis.Addr().String(), Port: int32(lis.Addr().(*net.TCPAddr).Port)}
		t.Cleanup(grpctraffic.Serve(lis, b).Stop)
		out = append(out, b)
	}
	return out
}

// NewXDSClient dials xds:///listener through grpc-go's own xDS resolver,
// isolated per call with its own bootstrap, and starts resolving at once.
// Its node names no locality and no metadata.
func NewXDSClient(t *testing.T, xdsAddr, node, listener string) *grpc.ClientConn {
	t.Helper()
	return NewXDSClientWith(t, xdsAddr, node, listener, Node{})
}

// Node is what a client's bootstrap says of its node besides its id and
// cluster, which NewXDSClientWith sets.
type Node = grpctraffic.Node

// NewXDSClientWith is NewXDSClient for a node that names its locality or
// carries metadata. Each call has its own bootstrap and so its own xDS
// client and stream, even when two calls describe the same node: the
// control plane counts them as two clients.
func NewXDSClientWith(t *testing.T, xdsAddr, node, listener string, n Node) *grpc.ClientConn {
	t.Helper()
	n.ID, n.Cluster = node, "poise-tests"
	return DialXDS(t, grpctraffic.Bootstrap(xdsAddr, n), listener)
}

// DialXDS dials xds:///listener through grpc-go's own xDS resolver with a
// bootstrap of its own (grpctraffic.Dial); the connection closes with the
// test.
func DialXDS(t *testing.T, bootstrap map[string]any, listener string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpctraffic.Dial(bootstrap, listener)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
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
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				backend, err := grpctraffic.Call(ctx, client)
				cancel()
				switch {
				case err == nil:
					local[backend]++
				case errors.Is(err, grpctraffic.ErrDropped):
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

// Expectation is the split explain computed (millionths per backend
// address, and the dropped millionths) at a revision.
type Expectation struct {
	Revision uint64
	grpctraffic.Split
}

// ExpectationOf reads the one upstream of an explain report.
func ExpectationOf(t *testing.T, rep explain.Report) Expectation {
	t.Helper()
	if len(rep.Upstreams) != 1 {
		t.Fatalf("want one upstream in the report, got %d", len(rep.Upstreams))
	}
	return Expectation{Revision: rep.Revision, Split: grpctraffic.SplitOf(rep.Upstreams[0].Split)}
}

// ClassExpectationOf reads what the clients of the report's locality
// (explain --from, /debug/explain?from=) receive from its one upstream: the
// class's split, or the upstream's own where the class receives None.
func ClassExpectationOf(t *testing.T, rep explain.Report) Expectation {
	t.Helper()
	if len(rep.Upstreams) != 1 {
		t.Fatalf("want one upstream in the report, got %d", len(rep.Upstreams))
	}
	if rep.Upstreams[0].Class == nil {
		t.Fatalf("the report names no client locality (no class): %+v", rep.From)
	}
	split, err := grpctraffic.ClientSplit(rep.Upstreams[0])
	if err != nil {
		t.Fatal(err)
	}
	return Expectation{Revision: rep.Revision, Split: split}
}

// Warm sends RPCs until every backend with a share has served one and no
// backend without one serves any more, so the measured split is not skewed
// by connections still being made (gRPC weighs only READY localities) or an
// update still arriving: the client's picker is seen only through the RPCs
// it places, 400 at a time, for up to 20 s. (A helper package, splitcheck
// does not import testkit: packages of one layer do not import each other.)
func Warm(t *testing.T, conn *grpc.ClientConn, want Expectation) {
	t.Helper()
	const within = 20 * time.Second
	expired := time.NewTimer(within)
	defer expired.Stop()
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
		select {
		case <-expired.C:
			t.Fatalf("after %v: not serving %v; serving without a share %v; %d failures (first: %v)", within, missing, extra, len(res.Other), firstErr(res.Other))
		default:
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
// share is 0 must see nothing. It returns the largest |z|.
func CheckSplit(t *testing.T, phase string, got Tally, want Expectation) float64 {
	t.Helper()
	return check(t, phase, []Part{{got, want}}, &want)
}

// Part is what one client observed and the split it was sent.
type Part struct {
	Got  Tally
	Want Expectation
}

// CheckAggregate requires the summed tallies of several clients within 4.5
// standard deviations of target, the split they are meant to add up to:
// each cell's mean is the RPCs sent in all × its target share, and its
// variance that of a sum of binomials, Σ nᵢ·pᵢ·(1 − pᵢ) over each part's
// own share — what the sum varies by when every client carries out its
// own split. That is at most the variance of one binomial at the mean
// share, so this is the stricter reading. A cell whose target share is 0
// must see nothing. It returns the largest |z|.
func CheckAggregate(t *testing.T, phase string, parts []Part, target Expectation) float64 {
	t.Helper()
	return check(t, phase, parts, &target)
}

// Deviation is the largest |z| of the parts' summed tallies from what
// their Want splits add up to (+Inf where a cell of share 0 served). With
// an alternative split as Want it says how far the observations are from
// what that alternative would have produced: a test shows with it that its
// check tells the split it expects from a wrong one.
func Deviation(parts []Part) float64 {
	worst := 0.0
	for _, c := range cellsOf(parts, nil) {
		worst = max(worst, math.Abs(c.z()))
	}
	return worst
}

// cell is one backend, or the dropped fraction, of a check.
type cell struct {
	name           string
	observed       int
	share          float64 // the expected fraction, as shown
	mean, variance float64
}

// z is the cell's deviation in standard deviations; ±Inf when it has none
// to deviate by and the observation is more than rounding away.
func (c cell) z() float64 { return grpctraffic.Deviation(float64(c.observed), c.mean, c.variance) }

// cellsOf lays out the cells of parts: the mean of each is the total × its
// target share, or, with no target, what the parts' own shares add up to
// (Σ nᵢ·pᵢ); its variance is Σ nᵢ·pᵢ·(1 − pᵢ).
func cellsOf(parts []Part, target *Expectation) []cell {
	total := 0
	byName := map[string]*cell{}
	at := func(name string) *cell {
		c := byName[name]
		if c == nil {
			c = &cell{name: name}
			byName[name] = c
		}
		return c
	}
	known := map[string]bool{}
	for _, pt := range parts {
		n := float64(pt.Got.Total)
		total += pt.Got.Total
		add := func(name string, millionths uint64) {
			p := float64(millionths) / 1e6
			c := at(name)
			c.variance += n * p * (1 - p)
			if target == nil {
				c.mean += n * p
			}
		}
		for addr, s := range pt.Want.Share {
			known[addr] = true
			add(addr, s)
		}
		add("dropped", pt.Want.Dropped)
		for addr, v := range pt.Got.By {
			at(addr).observed += v
		}
		at("dropped").observed += pt.Got.Dropped
	}
	if target != nil {
		for addr, s := range target.Share {
			known[addr] = true
			at(addr).mean = float64(total) * float64(s) / 1e6
		}
		at("dropped").mean = float64(total) * float64(target.Dropped) / 1e6
	}
	var cells []cell
	for name, c := range byName {
		if name != "dropped" && !known[name] {
			c.name += " (not in the topology)"
		}
		if total > 0 {
			c.share = c.mean / float64(total)
		}
		cells = append(cells, *c)
	}
	sort.Slice(cells, func(i, j int) bool { return cells[i].name < cells[j].name })
	return cells
}

// check fails the test where a cell is more than 4.5 standard deviations
// off, or a cell of share 0 saw anything, and logs every cell.
func check(t *testing.T, phase string, parts []Part, target *Expectation) float64 {
	t.Helper()
	total := 0
	for _, pt := range parts {
		if len(pt.Got.Other) > 0 {
			t.Fatalf("%s: %d RPCs failed unexpectedly, first: %v", phase, len(pt.Got.Other), pt.Got.Other[0])
		}
		total += pt.Got.Total
	}
	var report strings.Builder
	worst := 0.0
	for _, c := range cellsOf(parts, target) {
		z := c.z()
		fmt.Fprintf(&report, "  %-28s expected %7.4f%%  observed %7.4f%% (%6d)  z=%+.2f\n", c.name, 100*c.share, 100*float64(c.observed)/float64(total), c.observed, z)
		switch {
		case c.mean == 0 && c.observed > 0:
			t.Errorf("%s: %s has share 0 but served %d RPCs", phase, c.name, c.observed)
		case math.Abs(z) > 4.5:
			t.Errorf("%s: %s is %.2f standard deviations from its computed share", phase, c.name, z)
		}
		worst = max(worst, math.Abs(z))
	}
	t.Logf("%s: %d RPCs, largest |z| = %.2f\n%s", phase, total, worst, report.String())
	return worst
}

// WarmFrom is Warm for a change of weights alone, which Warm cannot see
// (the same backends serve before and after): a client ACKs an update
// before its balancer has the new picker, so it also sends RPCs, 2,000 at
// a time for up to 20 s, until a batch is likelier under want's shares
// than under from's (the log-likelihood ratio of the batch, drops
// counted, is positive). Only then is the split measured, by a separate
// sample. When the two splits are the same there is nothing to wait for.
func WarmFrom(t *testing.T, conn *grpc.ClientConn, want, from Expectation) {
	t.Helper()
	Warm(t, conn, want)
	if maps.Equal(want.Share, from.Share) && want.Dropped == from.Dropped {
		return
	}
	const within = 20 * time.Second
	expired := time.NewTimer(within)
	defer expired.Stop()
	for {
		res := Send(conn, 2000)
		llr, decided := 0.0, false
		add := func(n int, p, q uint64) {
			switch {
			case n == 0 || p == 0 && q == 0:
			case p == 0:
				llr = math.Inf(-1) // only from's split serves it
			case q == 0:
				decided = true // only want's split serves it: the update is in
			default:
				llr += float64(n) * math.Log(float64(p)/float64(q))
			}
		}
		for addr, n := range res.By {
			add(n, want.Share[addr], from.Share[addr])
		}
		add(res.Dropped, want.Dropped, from.Dropped)
		if decided || llr > 0 {
			return
		}
		select {
		case <-expired.C:
			t.Fatalf("after %v the client still splits as before the change (log-likelihood ratio %.1f over 2,000 RPCs): %v, %d dropped", within, llr, res.By, res.Dropped)
		default:
		}
	}
}
