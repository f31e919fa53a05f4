package main

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/loadgen"
)

// fleet is the bench's ADS clients and what they share: the names they
// subscribe to, the clock, and the flip phase whose deliveries they record.
type fleet struct {
	n        int  // upstreams in the topology
	w0, w    int  // EDS subscription: upstreams w0 .. w0+w-1
	delta    bool // Delta xDS instead of SotW
	names    []byte
	epoch    time.Time
	seed     maphash.Seed
	phase    atomic.Pointer[phase]
	synced   atomic.Int64 // clients that hold every subscribed resource
	lastSync atomic.Int64
	clients  []*client

	errOnce sync.Once
	err     atomic.Pointer[error]
}

func newFleet(n, w0, w int, delta bool) *fleet {
	f := &fleet{n: n, w0: w0, w: w, delta: delta, epoch: time.Now(), seed: maphash.MakeSeed()}
	// SotW resource_names and Delta resource_names_subscribe are both field 3.
	for u := w0; u < w0+w; u++ {
		f.names = loadgen.AppendNames(f.names, loadgen.ClusterName(u))
	}
	return f
}

// now is the bench clock: nanoseconds since the fleet's epoch, never 0.
func (f *fleet) now() int64 { return int64(time.Since(f.epoch)) + 1 }

func (f *fleet) fail(err error) {
	f.errOnce.Do(func() { f.err.Store(&err) })
}

// Err is the first error of any client, or nil.
func (f *fleet) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// client is one raw ADS stream with its own node id.
type client struct {
	f    *fleet
	id   string
	conn *grpc.ClientConn

	hashes  []uint64 // per subscribed EDS name: a hash of the last content, 0 before any
	got     int      // subscribed EDS names received at least once
	cds     int      // clusters in the last SotW CDS response, or seen by Delta
	cdsSet  []bool   // Delta: which clusters were seen
	sotwCDS int      // SotW: clusters counted so far in the response being read
	synced  bool

	at      int64 // when the response being read arrived
	ph      *phase
	cursors []int32 // per subscribed name: flips of ph on it already credited

	// Totals since the stream opened, read by phases as differences.
	cdsResponses, cdsLosses, edsResponses, claUpdates, claResent, strays atomic.Int64
}

// counters is a sum over the fleet of the clients' totals.
type counters struct{ cdsResponses, cdsLosses, edsResponses, claUpdates, claResent, strays int64 }

func (f *fleet) counters() counters {
	var c counters
	for _, cl := range f.clients {
		c.cdsResponses += cl.cdsResponses.Load()
		c.cdsLosses += cl.cdsLosses.Load()
		c.edsResponses += cl.edsResponses.Load()
		c.claUpdates += cl.claUpdates.Load()
		c.claResent += cl.claResent.Load()
		c.strays += cl.strays.Load()
	}
	return c
}

func (c counters) sub(o counters) counters {
	return counters{c.cdsResponses - o.cdsResponses, c.cdsLosses - o.cdsLosses, c.edsResponses - o.edsResponses,
		c.claUpdates - o.claUpdates, c.claResent - o.claResent, c.strays - o.strays}
}

// connect opens count clients against addr; each runs until ctx is done.
func (f *fleet) connect(ctx context.Context, addr string, count int) error {
	for i := range count {
		conn, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: 20 * time.Second,
			}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(loadgen.RawCodec{})))
		if err != nil {
			return err
		}
		c := &client{f: f, id: fmt.Sprintf("bench-%04d", i), conn: conn, hashes: make([]uint64, f.w), cursors: make([]int32, f.w)}
		if f.delta {
			c.cdsSet = make([]bool, f.n)
		}
		f.clients = append(f.clients, c)
	}
	for _, c := range f.clients {
		go func() {
			if err := c.run(ctx); err != nil && ctx.Err() == nil {
				f.fail(fmt.Errorf("client %s: %w", c.id, err))
			}
		}()
	}
	return nil
}

func (f *fleet) close() {
	for _, c := range f.clients {
		c.conn.Close()
	}
}

func (c *client) node() []byte {
	b, err := proto.Marshal(&core.Node{Id: c.id, Cluster: "bench", UserAgentName: "envoy",
		ClientFeatures: []string{"envoy.lrs.supports_send_all_clusters"}})
	if err != nil {
		panic(err)
	}
	return b
}

func (c *client) run(ctx context.Context) error {
	method := loadgen.MethodSotW
	if c.f.delta {
		method = loadgen.MethodDelta
	}
	stream, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	// Wildcard CDS (with the node), then EDS for the subscribed names.
	first := loadgen.AppendFirst(nil, c.f.delta, c.node(), loadgen.TypeCDS)
	if err := stream.SendMsg(&loadgen.OutMsg{Head: first}); err != nil {
		return err
	}
	if err := stream.SendMsg(&loadgen.OutMsg{Head: c.ack(loadgen.Header{TypeURL: []byte(loadgen.TypeEDS)}), Tail: c.f.names}); err != nil {
		return err
	}
	var in loadgen.InMsg
	for {
		if err := stream.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("server ended the stream")
			}
			return err
		}
		at := c.f.now()
		h, err := c.handle(in.Buf, at)
		if err != nil {
			return err
		}
		msg := &loadgen.OutMsg{Head: c.ack(h)}
		if string(h.TypeURL) == loadgen.TypeEDS && !c.f.delta {
			msg.Tail = c.f.names // a SotW ACK repeats the subscription
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		if cap(in.Buf) > 1<<20 {
			in.Buf = nil // the initial responses are large; the rest are not
		}
	}
}

// ack is the head of a request that ACKs h (or, with no nonce, the first
// request of h's type).
func (c *client) ack(h loadgen.Header) []byte { return loadgen.AppendACK(nil, c.f.delta, h) }

// handle records one response received at time at.
func (c *client) handle(b []byte, at int64) (loadgen.Header, error) {
	var h loadgen.Header
	var err error
	c.at = at
	if c.f.delta {
		h, err = loadgen.ParseDelta(b, c.resource)
	} else {
		h, err = loadgen.ParseSotW(b, func(typeURL, value []byte) error {
			name, err := loadgen.ResourceName(value)
			if err != nil {
				return err
			}
			return c.resource(name, typeURL, value)
		})
	}
	if err != nil {
		return h, fmt.Errorf("response: %w", err)
	}
	switch string(h.TypeURL) {
	case loadgen.TypeCDS:
		c.cdsResponses.Add(1)
		if !c.f.delta {
			c.cds = c.sotwCDS
		}
		// Every upstream stays in every file: a response that lacks or
		// removes clusters after startup means the server lost some.
		if c.synced && (!c.f.delta && c.sotwCDS < c.f.n || h.Removed > 0) {
			c.cdsLosses.Add(1)
		}
		c.sotwCDS = 0
	case loadgen.TypeEDS:
		c.edsResponses.Add(1)
	default:
		return h, fmt.Errorf("response of unexpected type %q", h.TypeURL)
	}
	if !c.synced && c.got == c.f.w && c.cds >= c.f.n {
		c.synced = true
		c.f.synced.Add(1)
		for {
			last := c.f.lastSync.Load()
			if at <= last || c.f.lastSync.CompareAndSwap(last, at) {
				break
			}
		}
	}
	return h, nil
}

// resource records one resource of a response.
func (c *client) resource(name, typeURL, value []byte) error {
	switch string(typeURL) {
	case loadgen.TypeCDS:
		if !c.f.delta {
			c.sotwCDS++ // a SotW CDS response is the whole set
			return nil
		}
		if u := loadgen.ClusterIndex(name); u >= 0 && u < len(c.cdsSet) && !c.cdsSet[u] {
			c.cdsSet[u] = true
			c.cds++
		}
		return nil
	case loadgen.TypeEDS:
	default:
		return fmt.Errorf("resource of unexpected type %q", typeURL)
	}
	u := loadgen.ClusterIndex(name)
	if u < c.f.w0 || u >= c.f.w0+c.f.w {
		c.strays.Add(1)
		return nil
	}
	p := u - c.f.w0
	sum := maphash.Bytes(c.f.seed, value) | 1
	switch old := c.hashes[p]; {
	case old == sum:
		c.claResent.Add(1)
	case old == 0:
		c.hashes[p] = sum
		c.got++
	default:
		c.hashes[p] = sum
		c.claUpdates.Add(1)
		c.credit(p, c.at)
	}
	return nil
}
