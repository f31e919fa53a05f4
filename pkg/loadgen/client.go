package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Kind is what a simulated client imitates.
type Kind uint8

const (
	// Envoy: CDS as a wildcard, EDS by name, the weighted rendering.
	Envoy Kind = iota
	// GRPC: grpc-go's node, LDS, RDS, CDS and EDS by name for its few
	// targets; the plane renders it per endpoint.
	GRPC
)

func (k Kind) String() string {
	if k == GRPC {
		return "grpc"
	}
	return "envoy"
}

// Spec is one simulated client: its node, protocol, subscription and
// credentials.
type Spec struct {
	Node  NodeShape
	Delta bool
	// Subscribe are the clusters it subscribes to, as indices into the
	// fleet's cluster names, ascending and without repeats.
	Subscribe []int32
	// Denied are clusters it subscribes to by name as well and must not be
	// served (another audience's): they are not awaited, and each one
	// received counts as a leak. Ascending, none in Subscribe.
	Denied []int32
	// Conn groups streams: specs with the same Conn share one connection
	// (a pod with two channels); each distinct Conn is one connection.
	Conn int
	// TLS, when set, is the connection's TLS (and client certificate);
	// Token, when set, is sent as a bearer token on every stream.
	TLS   *tls.Config
	Token string
}

// connBuffer is the read and write buffer of a connection.
const connBuffer = 8 << 10

// envoyWindow is Envoy's default HTTP/2 stream and connection window.
const envoyWindow = 256 << 20

// maxRecvMsg bounds one response a client reads.
const maxRecvMsg = 256 << 20

// maxStrayNames bounds the names of strays a fleet keeps.
const maxStrayNames = 16

// maxEndReasons bounds the reasons a fleet counts streams' ends by; ends of
// any further reason are counted under otherEndReason. maxEndReasonLen
// bounds one reason, in bytes.
const (
	maxEndReasons   = 8
	maxEndReasonLen = 160
	otherEndReason  = "other"
)

// Fleet is a set of simulated clients of one plane and what they record:
// each subscribed resource's content hash and when it last changed, and for
// each change the flip log holds, when each subscriber received it.
type Fleet struct {
	addr     string
	clusters []string
	index    map[string]int32
	// listenerIndex names each cluster's API listener (ListenerName),
	// which a gRPC client subscribes to first.
	listenerIndex map[string]int32
	specs         []Spec
	flips         *FlipLog
	log           *slog.Logger

	conns   []*grpc.ClientConn
	clients []*client

	// Conv counts, per delivery (a flip reaching one subscriber), the time
	// from the flip's write to the receipt.
	Conv      Histogram
	synced    atomic.Int64
	syncedCh  chan struct{}
	delivered atomic.Int64
	changed   chan struct{} // signalled on each delivery, capacity 1

	strays, leaks, cdsLosses, resent, updates, listeners, routes atomic.Int64
	// Reconnect, set before Start, has a client whose stream ends open
	// another, as real clients do (a Delta one telling the plane what it
	// holds, initial_resource_versions); unset, a stream's end fails the run.
	Reconnect bool
	// Resumed counts, per reconnect, the time from the stream's end to
	// the first response on the next one.
	Resumed                                                 Histogram
	reconnects, resentAfterResume, sotwResentAfterReconnect atomic.Int64
	strayMu                                                 sync.Mutex
	strayNames, leakNames                                   []string
	// streamEnds counts, by reason, the streams that ended and were
	// opened again (under strayMu).
	streamEnds map[string]int64

	errOnce sync.Once
	err     atomic.Pointer[error]
	failed  chan struct{} // closed at the first error
}

// NewFleet is a fleet of specs against addr; clusters are the names
// Spec.Subscribe indexes. Its flip log (Log) credits the receipts.
func NewFleet(addr string, clusters []string, specs []Spec, log *slog.Logger) (*Fleet, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{addr: addr, clusters: clusters, index: make(map[string]int32, len(clusters)), specs: specs,
		log: log, syncedCh: make(chan struct{}), changed: make(chan struct{}, 1), failed: make(chan struct{})}
	f.listenerIndex = make(map[string]int32, len(clusters))
	for i, c := range clusters {
		f.index[c] = int32(i)
		if l, ok := ListenerName(c); ok {
			f.listenerIndex[l] = int32(i)
		}
	}
	for i, s := range specs {
		for _, list := range [][]int32{s.Subscribe, s.Denied} {
			for j, c := range list {
				if c < 0 || int(c) >= len(clusters) || j > 0 && list[j-1] >= c {
					return nil, fmt.Errorf("client %d (%s): subscription %v, denied %v: want ascending indices below %d",
						i, s.Node.ID, s.Subscribe, s.Denied, len(clusters))
				}
			}
		}
	}
	f.flips = NewFlipLog(len(clusters), f.Subscribers(), &f.Conv, f.deliver)
	if len(specs) == 0 {
		close(f.syncedCh)
	}
	return f, nil
}

// Log is the fleet's flip log: a flip logged before it is written is
// credited to each subscriber when new content arrives.
func (f *Fleet) Log() *FlipLog { return f.flips }

// Clients is how many clients the fleet holds.
func (f *Fleet) Clients() int { return len(f.specs) }

// Connections is how many connections the fleet opens.
func (f *Fleet) Connections() int {
	seen := map[int]bool{}
	for _, s := range f.specs {
		seen[s.Conn] = true
	}
	return len(seen)
}

// Subscribers counts, per cluster, the fleet's clients subscribed to it.
func (f *Fleet) Subscribers() []int32 {
	n := make([]int32, len(f.clusters))
	for _, s := range f.specs {
		for _, c := range s.Subscribe {
			n[c]++
		}
	}
	return n
}

func (f *Fleet) fail(err error) {
	f.errOnce.Do(func() {
		f.err.Store(&err)
		close(f.failed)
	})
}

// Failed is closed once a client failed (Err says how).
func (f *Fleet) Failed() <-chan struct{} { return f.failed }

// Err is the first error of any client, or nil.
func (f *Fleet) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Synced is closed once every client holds every resource it subscribed
// to (and, with a CDS wildcard, a CDS response).
func (f *Fleet) Synced() <-chan struct{} { return f.syncedCh }

// SyncedCount is how many clients hold everything they subscribed to.
func (f *Fleet) SyncedCount() int64 { return f.synced.Load() }

// Delivered is how many deliveries of logged flips the clients received.
func (f *Fleet) Delivered() int64 { return f.delivered.Load() }

// Changed is signalled (capacity 1) after deliveries: a waiter reads
// Delivered again.
func (f *Fleet) Changed() <-chan struct{} { return f.changed }

// Counters are what the clients saw besides deliveries.
type Counters struct {
	// Strays are resources a client received and did not subscribe to (a
	// CDS wildcard subscribes to every cluster); StrayNames the first of them.
	Strays     int64    `json:"strays"`
	StrayNames []string `json:"strayNames,omitempty"`
	// Leaks are resources of a Spec.Denied cluster a client received;
	// LeakNames the first of them.
	Leaks     int64    `json:"leaks"`
	LeakNames []string `json:"leakNames,omitempty"`
	// Unattributed are receipts of new content no logged flip explains.
	Unattributed int64 `json:"unattributed"`
	// CDSLosses are CDS responses that dropped a cluster a client had.
	CDSLosses int64 `json:"cdsLosses"`
	// Updates are resources received with new content, Resent with the
	// content the client held.
	Updates int64 `json:"updates"`
	Resent  int64 `json:"resent"`
	// Listeners and Routes are LDS and RDS resources gRPC clients received.
	Listeners int64 `json:"listeners"`
	Routes    int64 `json:"routes"`
	// Reconnects are streams opened again after one ended.
	// ResentAfterResume are resources a Delta client was sent again at the
	// version it said it held when it reconnected (none is due);
	// SotWResentAfterReconnect are SotW resources sent again with the
	// content the client held (SotW names no versions per resource: due).
	Reconnects               int64 `json:"reconnects,omitempty"`
	ResentAfterResume        int64 `json:"resentAfterResume,omitempty"`
	SotWResentAfterReconnect int64 `json:"sotwResentAfterReconnect,omitempty"`
	// StreamEnds counts the reconnects by why the stream before each
	// ended (the gRPC status, numbers in it written N so that addresses
	// and ports do not make every end a reason of its own): at most
	// maxEndReasons reasons, the rest under "other".
	StreamEnds map[string]int64 `json:"streamEnds,omitempty"`
}

// addEnds counts n ends of reason in ends, within maxEndReasons reasons
// besides otherEndReason.
func addEnds(ends map[string]int64, reason string, n int64) {
	if _, ok := ends[reason]; !ok && reason != otherEndReason {
		named := len(ends)
		if _, ok := ends[otherEndReason]; ok {
			named--
		}
		if named >= maxEndReasons {
			reason = otherEndReason
		}
	}
	ends[reason] += n
}

// endReason is why a stream ended, as StreamEnds counts it.
func endReason(err error) string {
	if err == nil {
		return "no error"
	}
	msg := err.Error()
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		msg = st.Code().String() + ": " + st.Message()
	}
	var b strings.Builder
	digits := false
	for _, r := range msg {
		switch {
		case r >= '0' && r <= '9':
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		case r < ' ' || r == utf8.RuneError:
			r = ' '
		}
		digits = false
		if b.Len()+utf8.RuneLen(r) > maxEndReasonLen {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Counters is the fleet's counters now.
func (f *Fleet) Counters() Counters {
	f.strayMu.Lock()
	names, leaks := slices.Clone(f.strayNames), slices.Clone(f.leakNames)
	ends := maps.Clone(f.streamEnds)
	f.strayMu.Unlock()
	return Counters{StreamEnds: ends, Strays: f.strays.Load(), StrayNames: names, Leaks: f.leaks.Load(), LeakNames: leaks, Unattributed: f.flips.Pending(),
		CDSLosses: f.cdsLosses.Load(), Updates: f.updates.Load(), Resent: f.resent.Load(), Listeners: f.listeners.Load(), Routes: f.routes.Load(),
		Reconnects: f.reconnects.Load(), ResentAfterResume: f.resentAfterResume.Load(), SotWResentAfterReconnect: f.sotwResentAfterReconnect.Load()}
}

// ended counts a stream's end by its reason.
func (f *Fleet) ended(err error) {
	reason := endReason(err)
	f.strayMu.Lock()
	if f.streamEnds == nil {
		f.streamEnds = map[string]int64{}
	}
	addEnds(f.streamEnds, reason, 1)
	f.strayMu.Unlock()
}

func (f *Fleet) stray(name []byte, typeURL string) { f.note(&f.strays, &f.strayNames, name, typeURL) }

func (f *Fleet) leak(name []byte, typeURL string) { f.note(&f.leaks, &f.leakNames, name, typeURL) }

// note counts a resource received in n and keeps its name in names, up to
// maxStrayNames of them.
func (f *Fleet) note(n *atomic.Int64, names *[]string, name []byte, typeURL string) {
	n.Add(1)
	f.strayMu.Lock()
	if len(*names) < maxStrayNames {
		*names = append(*names, string(name)+" ("+shortType(typeURL)+")")
	}
	f.strayMu.Unlock()
}

func shortType(typeURL string) string {
	switch typeURL {
	case TypeLDS:
		return "LDS"
	case TypeRDS:
		return "RDS"
	case TypeCDS:
		return "CDS"
	case TypeEDS:
		return "EDS"
	}
	return typeURL
}

// Start opens the fleet's connections and streams; each runs until ctx is
// done or it fails (Err). Close ends the connections.
func (f *Fleet) Start(ctx context.Context) error {
	byConn := map[int]*grpc.ClientConn{}
	for i := range f.specs {
		s := &f.specs[i]
		conn := byConn[s.Conn]
		if conn == nil {
			var err error
			if conn, err = f.dial(s); err != nil {
				return fmt.Errorf("client %s: %w", s.Node.ID, err)
			}
			byConn[s.Conn] = conn
			f.conns = append(f.conns, conn)
		}
		node, err := s.Node.Marshal()
		if err != nil {
			return err
		}
		c := &client{f: f, spec: s, conn: conn, node: node, delta: s.Delta,
			hashes: make([]uint64, len(s.Subscribe)), recvAt: make([]int64, len(s.Subscribe)), cursors: make([]int32, len(s.Subscribe))}
		if f.Reconnect && s.Delta {
			c.cdsVer, c.edsVer = map[int32]string{}, map[int32]string{}
		}
		if s.Node.Kind == Envoy {
			c.cds = make([]uint64, (len(f.clusters)+63)/64)
		} else {
			c.cdsHeld = make([]bool, len(s.Subscribe))
		}
		for _, u := range slices.Concat(s.Subscribe, s.Denied) {
			c.names = AppendNames(c.names, f.clusters[u])
			if l, ok := ListenerName(f.clusters[u]); ok && s.Node.Kind == GRPC {
				c.ldsNames = AppendNames(c.ldsNames, l)
			}
		}
		f.clients = append(f.clients, c)
	}
	for _, c := range f.clients {
		go func() {
			if err := c.run(ctx); err != nil && ctx.Err() == nil {
				f.fail(fmt.Errorf("client %s: %w", c.spec.Node.ID, err))
			}
		}()
	}
	return nil
}

// Close ends the fleet's connections.
func (f *Fleet) Close() {
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *Fleet) dial(s *Spec) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsg), grpc.ForceCodecV2(RawCodec{})),
		// A simulated client is mostly idle: small buffers, the write
		// buffer given back between writes, keep the generator's memory
		// per connection low so that one process holds thousands.
		grpc.WithReadBufferSize(connBuffer), grpc.WithWriteBufferSize(connBuffer), grpc.WithSharedWriteBuffer(true),
	}
	if s.Node.Kind == Envoy {
		// Envoy's HTTP/2 windows (256 MiB a stream and a connection, its
		// defaults): it never pings to size them as grpc-go does.
		opts = append(opts, grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
	}
	if s.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(s.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if s.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: s.Token, secure: s.TLS != nil}))
	}
	return grpc.NewClient(f.addr, opts...)
}

// bearer sends a token as "authorization: Bearer TOKEN" on every RPC.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity: a token goes in clear only when the fleet was
// given no TLS (a plane on loopback).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// client is one ADS stream.
type client struct {
	f     *Fleet
	spec  *Spec
	conn  *grpc.ClientConn
	node  []byte
	delta bool
	names []byte // the subscription, encoded once: CDS, EDS and (gRPC) RDS names
	// ldsNames are a gRPC client's listeners, one per target.
	ldsNames []byte

	hashes  []uint64 // per subscribed cluster: the FNV-1a of its EDS content, 0 before any
	recvAt  []int64  // per subscribed cluster: when its EDS content last changed (Unix ns)
	cursors []int32  // per subscribed cluster: flips credited
	got     int      // subscribed clusters whose EDS arrived
	cds     []uint64 // Envoy: the clusters CDS gave it, a bit per fleet cluster
	cdsHeld []bool   // gRPC: per subscribed cluster, whether CDS gave it
	cdsN    int      // clusters held by CDS (gRPC: of its subscription)
	cdsSeen bool     // a CDS response arrived
	synced  bool
	at      int64      // when the response being read arrived (Unix ns)
	mu      sync.Mutex // held while a response is read, and by Holdings

	// With Fleet.Reconnect, a Delta client's resource versions by cluster
	// index (CDS and EDS; nil otherwise), for initial_resource_versions; told are those
	// it told the plane it held when it last reconnected.
	cdsVer, edsVer   map[int32]string
	told             map[[2]int32]string // {0 CDS / 1 EDS, cluster}
	reconnected      bool                // a stream was opened again
	brokeAt          int64               // when the last stream ended (Unix ns), 0 once resumed
	lastCDS, lastEDS []byte              // SotW: the versions last ACKed
}

// pos is where cluster u is in the client's subscription, or -1.
func (c *client) pos(u int32) int {
	i, ok := slices.BinarySearch(c.spec.Subscribe, u)
	if !ok {
		return -1
	}
	return i
}

func (c *client) run(ctx context.Context) error {
	for {
		err := c.stream(ctx)
		if ctx.Err() != nil || !c.f.Reconnect {
			return err
		}
		c.mu.Lock()
		c.reconnected, c.brokeAt = true, time.Now().UnixNano()
		c.mu.Unlock()
		c.f.reconnects.Add(1)
		c.f.ended(err)
		// Envoy's and gRPC's back-off begins near a second and is
		// jittered; a short one here makes the storm as sharp as it gets
		t := time.NewTimer(time.Duration(50+rand.IntN(100)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream runs one ADS stream until it ends.
func (c *client) stream(ctx context.Context) error {
	method := MethodSotW
	if c.delta {
		method = MethodDelta
	}
	stream, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	// An Envoy: CDS as a wildcard with the node, then EDS by name. A gRPC
	// client: its targets' listeners with the node, then their routes,
	// clusters and endpoints by name (grpc-go asks for each as the one
	// before names it; the names here are the plane's, known up front).
	var reqs []*OutMsg
	if c.spec.Node.Kind == GRPC {
		reqs = []*OutMsg{{Head: AppendFirst(nil, c.delta, c.node, TypeLDS), Tail: c.ldsNames},
			{Head: AppendACK(nil, c.delta, Header{TypeURL: []byte(TypeRDS)}), Tail: c.names},
			{Head: AppendACK(nil, c.delta, Header{TypeURL: []byte(TypeCDS)}), Tail: c.names}}
	} else {
		reqs = []*OutMsg{{Head: AppendFirst(nil, c.delta, c.node, TypeCDS)}}
	}
	reqs = append(reqs, &OutMsg{Head: AppendACK(nil, c.delta, Header{TypeURL: []byte(TypeEDS)}), Tail: c.names})
	if c.reconnected {
		c.resume(reqs)
	}
	for _, r := range reqs {
		if err := stream.SendMsg(r); err != nil {
			return err
		}
	}
	var in InMsg
	for {
		if err := stream.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the plane ended the stream")
			}
			return err
		}
		h, err := c.handle(in.Buf, time.Now().UnixNano())
		if err != nil {
			return err
		}
		msg := &OutMsg{Head: AppendACK(nil, c.delta, h)}
		// A SotW ACK repeats the subscription of a type subscribed by name.
		switch {
		case c.delta:
		case string(h.TypeURL) == TypeLDS:
			msg.Tail = c.ldsNames
		case string(h.TypeURL) == TypeEDS || c.spec.Node.Kind == GRPC:
			msg.Tail = c.names
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		if cap(in.Buf) > 1<<20 {
			in.Buf = nil // the initial responses are large; the rest are not
		}
	}
}

// handle records one response received at time at.
func (c *client) handle(b []byte, at int64) (Header, error) {
	var h Header
	var err error
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
	sotwCDS := false
	held := c.cdsN
	if c.brokeAt != 0 {
		c.f.Resumed.Record(at - c.brokeAt)
		c.brokeAt = 0
	}
	if c.delta {
		h, err = ParseDeltaVersions(b, c.deltaResource)
	} else {
		h, err = ParseSotW(b, func(typeURL, value []byte) error {
			name, err := ResourceName(value)
			if err != nil {
				return err
			}
			if string(typeURL) == TypeCDS && !sotwCDS {
				sotwCDS = true // a SotW CDS response is the whole set: start it again
				c.clearCDS()
			}
			return c.resource(name, typeURL, value)
		})
	}
	if err != nil {
		return h, fmt.Errorf("response: %w", err)
	}
	if !c.delta && c.f.Reconnect {
		switch string(h.TypeURL) {
		case TypeCDS:
			c.lastCDS = append(c.lastCDS[:0], h.Version...)
		case TypeEDS:
			c.lastEDS = append(c.lastEDS[:0], h.Version...)
		}
	}
	switch string(h.TypeURL) {
	case TypeCDS:
		c.cdsSeen = true
		if !c.delta && !sotwCDS {
			c.clearCDS() // an empty SotW CDS response: no clusters
		}
		if !c.delta && c.synced && c.cdsN < held {
			c.f.cdsLosses.Add(int64(held - c.cdsN))
		}
		for _, name := range h.RemovedNames {
			c.dropCDS(name)
		}
	case TypeLDS, TypeRDS:
	case TypeEDS:
		for _, name := range h.RemovedNames {
			if u, ok := c.f.index[string(name)]; ok {
				if p := c.pos(u); p >= 0 && c.hashes[p] != 0 {
					c.hashes[p] = 0
					c.got--
				}
			}
		}
	default:
		return h, fmt.Errorf("response of unexpected type %q", h.TypeURL)
	}
	if !c.synced && c.cdsSeen && c.got == len(c.hashes) {
		c.synced = true
		if c.f.synced.Add(1) == int64(len(c.f.specs)) {
			close(c.f.syncedCh)
		}
	}
	return h, nil
}

func (c *client) clearCDS() {
	clear(c.cds)
	clear(c.cdsHeld)
	c.cdsN = 0
}

func (c *client) dropCDS(name []byte) {
	u, ok := c.f.index[string(name)]
	if !ok {
		return
	}
	if c.cds != nil && c.cds[u/64]&(1<<(u%64)) != 0 {
		c.cds[u/64] &^= 1 << (u % 64)
		c.cdsN--
	} else if p := c.pos(u); p >= 0 && c.cdsHeld != nil && c.cdsHeld[p] {
		c.cdsHeld[p] = false
		c.cdsN--
	}
	if c.synced {
		c.f.cdsLosses.Add(1)
	}
}

// resource records one resource of a response.
func (c *client) resource(name, typeURL, value []byte) error {
	index := c.f.index
	if string(typeURL) == TypeLDS {
		index = c.f.listenerIndex
	}
	u, known := index[string(name)]
	if _, denied := slices.BinarySearch(c.spec.Denied, u); known && denied {
		c.f.leak(name, string(typeURL))
		return nil
	}
	p := -1 // its place in the subscription
	if known {
		p = c.pos(u)
	}
	switch string(typeURL) {
	case TypeCDS:
		switch {
		case c.cds != nil: // a wildcard: any cluster is the client's
			if known && c.cds[u/64]&(1<<(u%64)) == 0 {
				c.cds[u/64] |= 1 << (u % 64)
				c.cdsN++
			}
		default:
			if p < 0 {
				c.f.stray(name, TypeCDS)
				return nil
			}
			if !c.cdsHeld[p] {
				c.cdsHeld[p] = true
				c.cdsN++
			}
		}
		return nil
	case TypeLDS, TypeRDS:
		if c.cds != nil || p < 0 {
			c.f.stray(name, string(typeURL))
		} else if string(typeURL) == TypeLDS {
			c.f.listeners.Add(1)
		} else {
			c.f.routes.Add(1)
		}
		return nil
	case TypeEDS:
	default:
		return fmt.Errorf("resource %s of unexpected type %q", name, typeURL)
	}
	if p < 0 {
		c.f.stray(name, TypeEDS)
		return nil
	}
	sum := hashOf(value)
	switch old := c.hashes[p]; {
	case old == sum && c.reconnected && !c.delta:
		c.f.sotwResentAfterReconnect.Add(1)
	case old == sum:
		c.f.resent.Add(1)
	case old == 0:
		c.hashes[p], c.recvAt[p] = sum, c.at
		c.got++
		c.f.flips.first(u, &c.cursors[p], c.at)
	default:
		c.hashes[p], c.recvAt[p] = sum, c.at
		c.f.updates.Add(1)
		c.credit(u, p)
	}
	return nil
}

// hashOf is the FNV-1a of a resource's serialized message, never 0.
func hashOf(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64() | 1
}

// credit records that the client received new content for cluster u
// (position p) at c.at: every flip of u written before then that it has
// not credited yet is delivered (the content reflects it, or a later state).
func (c *client) credit(u int32, p int) { c.f.flips.credit(u, &c.cursors[p], c.at) }

// deliver counts n deliveries and wakes a waiter.
func (f *Fleet) deliver(n int) {
	f.delivered.Add(int64(n))
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Holding is what one client holds of one subscribed cluster.
type Holding struct {
	Cluster string
	// Hash is the FNV-1a of its ClusterLoadAssignment's serialized
	// message (with the lowest bit set), 0 when none arrived.
	Hash uint64
	// Received is when that content arrived.
	Received time.Time
	// CDS says whether the client holds the cluster's Cluster.
	CDS bool
}

// Holdings is, per client in spec order, what it holds of each cluster it
// subscribed to.
func (f *Fleet) Holdings() [][]Holding {
	out := make([][]Holding, len(f.clients))
	for i, c := range f.clients {
		c.mu.Lock()
		for p, u := range c.spec.Subscribe {
			h := Holding{Cluster: f.clusters[u], Hash: c.hashes[p], Received: time.Unix(0, c.recvAt[p])}
			if c.cds != nil {
				h.CDS = c.cds[u/64]&(1<<(u%64)) != 0
			} else {
				h.CDS = c.cdsHeld[p]
			}
			out[i] = append(out[i], h)
		}
		c.mu.Unlock()
	}
	return out
}

// HashOf is the content hash Holding.Hash holds for a resource's
// serialized message, for comparing with an independent fetch.
func HashOf(b []byte) uint64 { return hashOf(b) }

// ListenerName is the API listener a gRPC client dials for cluster
// NAMESPACE/NAME: xds:///NAME.NAMESPACE; false for a name of another form.
func ListenerName(cluster string) (string, bool) {
	ns, name, ok := strings.Cut(cluster, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name + "." + ns, true
}

// deltaResource records one resource of a Delta response, with its
// version: kept for the next reconnect's initial_resource_versions, and a
// resource sent again at the version the client said it held when it
// reconnected is counted (the plane owes it nothing).
func (c *client) deltaResource(name, version, typeURL, value []byte) error {
	vers := c.edsVer
	kind := int32(1)
	switch string(typeURL) {
	case TypeCDS:
		vers, kind = c.cdsVer, 0
	case TypeEDS:
	default:
		vers = nil // a listener or route: no versions kept
	}
	if u, ok := c.f.index[string(name)]; ok && vers != nil {
		if told, ok := c.told[[2]int32{kind, u}]; ok {
			delete(c.told, [2]int32{kind, u})
			if told == string(version) {
				c.f.resentAfterResume.Add(1)
				return nil
			}
		}
		vers[u] = string(version)
	}
	return c.resource(name, typeURL, value)
}

// resume makes reqs, a stream's first requests, those of a client that
// reconnects: a Delta client tells the plane the version of each resource
// it holds (initial_resource_versions), a SotW one the version it last
// ACKed of each type, as Envoy does.
func (c *client) resume(reqs []*OutMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cds, eds := reqs[len(reqs)-2], reqs[len(reqs)-1] // a gRPC client's CDS request is its third, an Envoy's its first
	if !c.delta {
		if len(c.lastCDS) > 0 {
			cds.Head = AppendBytesField(slices.Clone(cds.Head), reqVersionInfo, c.lastCDS)
		}
		if len(c.lastEDS) > 0 {
			eds.Head = AppendBytesField(slices.Clone(eds.Head), reqVersionInfo, c.lastEDS)
		}
		return
	}
	c.told = map[[2]int32]string{}
	initial := func(tail []byte, kind int32, vers map[int32]string) []byte {
		out := slices.Clone(tail)
		for _, u := range slices.Sorted(maps.Keys(vers)) {
			out = AppendInitialVersion(out, c.f.clusters[u], vers[u])
			c.told[[2]int32{kind, u}] = vers[u]
		}
		return out
	}
	cds.Tail = initial(cds.Tail, 0, c.cdsVer)
	eds.Tail = initial(eds.Tail, 1, c.edsVer)
}
