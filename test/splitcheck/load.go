package splitcheck

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"poise.dev/poise/pkg/grpctraffic"
)

// Load is a client sending RPCs over two workers without pause until
// halted, counting OK RPCs per backend and failed ones.
type Load struct {
	Node   string
	Conn   *grpc.ClientConn
	mu     sync.Mutex
	ok     map[string]int
	failed int
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// StartLoad starts sending on conn (node names it), each RPC with the given
// headers (key, value, ...): with PoisonHeader every backend refuses it. It
// halts at the test's end.
func StartLoad(t *testing.T, conn *grpc.ClientConn, node string, headers ...string) *Load {
	t.Helper()
	c := &Load{Node: node, Conn: conn, ok: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	if len(headers) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, headers...)
	}
	client := healthpb.NewHealthClient(conn)
	for range 2 {
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				backend, err := grpctraffic.Call(rctx, client)
				rcancel()
				c.mu.Lock()
				if err == nil {
					c.ok[backend]++
				} else if ctx.Err() == nil {
					c.failed++
				}
				c.mu.Unlock()
				// sleep: a pace, not a wait: two workers per client sending
				// without pause would take the CPU from the plane and the
				// backends they measure
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(c.Halt)
	return c
}

// Halt stops sending and waits for the RPCs in flight.
func (c *Load) Halt() {
	c.stop()
	c.done.Wait()
}

// Take returns the counts since the last Take and starts anew.
func (c *Load) Take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok, failed := c.ok, c.failed
	c.ok, c.failed = map[string]int{}, 0
	return ok, failed
}
