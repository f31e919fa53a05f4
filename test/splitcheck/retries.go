package splitcheck

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// randomFailures fails each RPC with probability perMille/1000, drawn
// from a seeded source so a run can be replayed.
type randomFailures struct {
	mu       sync.Mutex
	rng      *rand.Rand
	perMille uint64
}

// SetUnavailable makes each RPC that reaches the backend fail with
// UNAVAILABLE, before any response header (a trailers-only response, the
// kind a gRPC client may retry), independently with probability
// perMille/1000; 0 turns it off. The draws come from a PCG seeded with
// seed. It counts in Attempts like every RPC.
func (b *Backend) SetUnavailable(perMille, seed uint64) {
	if perMille == 0 {
		b.unavailable.Store(nil)
		return
	}
	b.unavailable.Store(&randomFailures{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), perMille: perMille})
}

// failsUnavailable draws whether this RPC fails (SetUnavailable).
func (b *Backend) failsUnavailable() bool {
	f := b.unavailable.Load()
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Uint64N(1000) < f.perMille
}

// Attempts is how many RPCs have reached the backend (every attempt of a
// retried call is one); ResetAttempts starts the count again.
func (b *Backend) Attempts() int64 { return b.attempts.Load() }

// ResetAttempts sets the Attempts count to 0.
func (b *Backend) ResetAttempts() { b.attempts.Store(0) }

// Outcomes is what a batch of calls observed, failures included.
type Outcomes struct {
	Total int
	OK    int
	By    map[string]int       // backend address → calls it answered with OK
	Codes map[codes.Code]int   // status code → calls that ended with it
	First map[codes.Code]error // the first error of each code
}

// SendOutcomes makes n calls over workers goroutines, each call with a
// deadline of 10 s, and counts how each ended. Unlike Send it expects
// failures: a call that fails is counted by its status code.
func SendOutcomes(conn *grpc.ClientConn, n, workers int) Outcomes {
	client := healthpb.NewHealthClient(conn)
	res := Outcomes{Total: n, By: map[string]int{}, Codes: map[codes.Code]int{}, First: map[codes.Code]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		count := n / workers
		if w == workers-1 {
			count = n - (workers-1)*(n/workers)
		}
		wg.Go(func() {
			for range count {
				var md metadata.MD
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
				cancel()
				mu.Lock()
				if err == nil && len(md.Get("x-backend")) == 1 {
					res.OK++
					res.By[md.Get("x-backend")[0]]++
				} else {
					c := status.Code(err)
					res.Codes[c]++
					if res.First[c] == nil {
						res.First[c] = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

// RetryModel is what calls through a retry policy show, per call, when
// each attempt is an independent pick of a backend by its share (grpc-go
// under Poise's per-endpoint rendering: a weighted random pick among
// localities of one endpoint each, with no previous-host exclusion) and
// fails independently with the backend's failure probability: the mean
// and variance of whether the call succeeds, of the attempts each backend
// receives, and of the attempts in all. They are exact: every sequence of
// at most MaxAttempts attempts is enumerated with its probability.
type RetryModel struct {
	MaxAttempts int
	Cells       []RetryCell
}

// RetryCell is one count of the model: its mean and variance per call.
type RetryCell struct {
	Name           string
	Mean, Variance float64
}

// Names of the model's cells besides each backend's attempts.
const (
	CellOK       = "calls that succeed"
	CellAttempts = "attempts in all"
)

// CellAt names the attempts a backend receives.
func CellAt(addr string) string { return "attempts at " + addr }

// NewRetryModel derives the model: shares in millionths by backend
// address, each backend's failure probability in per mille (absent: 0),
// and the most attempts a call makes (1 + numRetries when the client
// retries on the failure, 1 when it does not).
func NewRetryModel(shares map[string]uint64, failPerMille map[string]uint64, maxAttempts int) RetryModel {
	addrs := make([]string, 0, len(shares))
	var total uint64
	for a, s := range shares {
		addrs = append(addrs, a)
		total += s
	}
	sort.Strings(addrs)
	n := len(addrs) + 2 // ok, each backend, all attempts
	sum, sumSq := make([]float64, n), make([]float64, n)
	x := make([]float64, n)
	var walk func(prob float64, attempt int)
	walk = func(prob float64, attempt int) {
		for i, a := range addrs {
			s := float64(shares[a]) / float64(total)
			f := float64(failPerMille[a]) / 1000
			x[1+i]++
			x[n-1]++
			// the attempt succeeds: the call ends well
			if p := prob * s * (1 - f); p > 0 {
				x[0] = 1
				for c := range x {
					sum[c] += p * x[c]
					sumSq[c] += p * x[c] * x[c]
				}
				x[0] = 0
			}
			// it fails: the call goes on, or ends in failure
			if p := prob * s * f; p > 0 {
				if attempt < maxAttempts {
					walk(p, attempt+1)
				} else {
					for c := range x {
						sum[c] += p * x[c]
						sumSq[c] += p * x[c] * x[c]
					}
				}
			}
			x[1+i]--
			x[n-1]--
		}
	}
	walk(1, 1)
	m := RetryModel{MaxAttempts: maxAttempts}
	name := func(c int) string {
		switch c {
		case 0:
			return CellOK
		case n - 1:
			return CellAttempts
		}
		return CellAt(addrs[c-1])
	}
	for c := range n {
		m.Cells = append(m.Cells, RetryCell{Name: name(c), Mean: sum[c], Variance: max(sumSq[c]-sum[c]*sum[c], 0)})
	}
	return m
}

// CheckRetries requires every count of calls (those that succeeded, the
// attempts each backend received, the attempts in all) within 4.5
// standard deviations of the model's mean, n·mean ± 4.5·√(n·variance); a
// count of variance 0 must be exact. It returns the largest |z|.
func CheckRetries(t *testing.T, phase string, calls Outcomes, attempts map[string]int64, m RetryModel) float64 {
	t.Helper()
	worst, report := retryDeviation(calls, attempts, m, func(name string, z float64) {
		t.Errorf("%s: %s is %.2f standard deviations from the policy's expectation", phase, name, z)
	})
	t.Logf("%s: %d calls, at most %d attempts each, largest |z| = %.2f\n%s", phase, calls.Total, m.MaxAttempts, worst, report)
	return worst
}

// RetryDeviation is the largest |z| of the counts from what model m
// expects (+Inf where a count of variance 0 is off): with another policy
// as m it says how far the observations are from what that policy would
// have produced, so a test shows its check tells the policies apart.
func RetryDeviation(calls Outcomes, attempts map[string]int64, m RetryModel) float64 {
	worst, _ := retryDeviation(calls, attempts, m, func(string, float64) {})
	return worst
}

func retryDeviation(calls Outcomes, attempts map[string]int64, m RetryModel, off func(string, float64)) (float64, string) {
	n := float64(calls.Total)
	var all int64
	for _, v := range attempts {
		all += v
	}
	observed := func(name string) float64 {
		switch name {
		case CellOK:
			return float64(calls.OK)
		case CellAttempts:
			return float64(all)
		}
		for a, v := range attempts {
			if CellAt(a) == name {
				return float64(v)
			}
		}
		return 0
	}
	var report strings.Builder
	worst := 0.0
	for _, c := range m.Cells {
		got, mean, sd := observed(c.Name), n*c.Mean, math.Sqrt(n*c.Variance)
		z := 0.0
		switch {
		case sd > 0:
			z = (got - mean) / sd
		case math.Abs(got-mean) >= 0.5:
			z = math.Copysign(math.Inf(1), got-mean)
		}
		fmt.Fprintf(&report, "  %-36s expected %10.1f ± %6.1f  observed %8.0f  z=%+.2f\n", c.Name, mean, sd, got, z)
		if math.Abs(z) > 4.5 {
			off(c.Name, z)
		}
		worst = max(worst, math.Abs(z))
	}
	return worst, report.String()
}
