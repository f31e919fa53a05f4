package xdsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"poise.dev/poise/test/history"
)

// Proxy forwards the ADS streams its clients open to one replica.
type Proxy struct {
	name    string // the replica, as histories name it
	rec     *Recorder
	lis     net.Listener
	srv     *grpc.Server
	replica string

	mu       sync.Mutex
	cut      bool
	cutAfter int           // responses still forwarded before a cut; -1: none planned
	tripped  chan struct{} // closed when the planned cut happens
	held     bool
	release  chan struct{} // closed when held responses may go
	streams  map[*stream]struct{}
}

type stream struct{ cancel context.CancelFunc }

// Start proxies replica (a plaintext xDS address) on a loopback port, as
// name, recording into rec. Stop ends it.
func Start(name, replica string, rec *Recorder) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{name: name, rec: rec, lis: lis, replica: replica, cutAfter: -1, release: make(chan struct{}), streams: map[*stream]struct{}{}}
	close(p.release)
	p.srv = grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(p.srv, ads{p})
	go p.srv.Serve(lis)
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Stop ends every stream and the listener.
func (p *Proxy) Stop() { p.srv.Stop() }

// Cut ends every stream now, as a partition would (the clients see
// UNAVAILABLE), and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.endStreams()
}

// CutAfter forwards n more responses, over all streams, then cuts: a
// partition in the middle of a push. The channel is closed when it cuts.
func (p *Proxy) CutAfter(n int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAfter, p.tripped = n, make(chan struct{})
	if n == 0 {
		p.trip()
	}
	return p.tripped
}

// trip carries out the planned cut; p.mu is held.
func (p *Proxy) trip() {
	p.cut, p.cutAfter = true, -1
	p.endStreams()
	close(p.tripped)
}

// Restore lets streams in again after a cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.cutAfter = false, -1
}

// Hold keeps responses from the clients until Release: a slow link.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		p.held, p.release = true, make(chan struct{})
	}
}

// Release sends what Hold kept back, in order, and what comes after.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.release)
	}
}

func (p *Proxy) endStreams() {
	for s := range p.streams {
		s.cancel()
	}
}

// open registers a stream, or refuses it during a cut.
func (p *Proxy) open(cancel context.CancelFunc) (*stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil, status.Error(codes.Unavailable, "xdsproxy: cut")
	}
	s := &stream{cancel: cancel}
	p.streams[s] = struct{}{}
	return s, nil
}

func (p *Proxy) close(s *stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.streams, s)
}

// mayForward waits while responses are held, then says whether one more
// may go (false: the stream is cut, now or by a planned cut).
func (p *Proxy) mayForward(ctx context.Context) bool {
	p.mu.Lock()
	release := p.release
	p.mu.Unlock()
	select {
	case <-release:
	case <-ctx.Done():
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	if p.cutAfter == 0 {
		p.trip()
		return false
	}
	if p.cutAfter > 0 {
		p.cutAfter--
	}
	return true
}

type ads struct{ p *Proxy }

func (a ads) StreamAggregatedResources(down discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return forward(a.p, down, func(ctx context.Context, up *grpc.ClientConn) (grpc.ClientStream, error) {
		return discovery.NewAggregatedDiscoveryServiceClient(up).StreamAggregatedResources(ctx)
	}, false)
}

func (a ads) DeltaAggregatedResources(down discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return forward(a.p, down, func(ctx context.Context, up *grpc.ClientConn) (grpc.ClientStream, error) {
		return discovery.NewAggregatedDiscoveryServiceClient(up).DeltaAggregatedResources(ctx)
	}, true)
}

// forward copies one stream both ways: requests up, recorded as ACKs and
// NACKs; responses down, recorded as received, unless held or cut. Each
// stream goes up on a connection of its own, as each client has its own:
// the replica's limits per connection see what they would without the
// proxy.
func forward(p *Proxy, down grpc.ServerStream, open func(context.Context, *grpc.ClientConn) (grpc.ClientStream, error), delta bool) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	s, err := p.open(cancel)
	if err != nil {
		return err
	}
	defer p.close(s)
	if md, ok := metadata.FromIncomingContext(down.Context()); ok {
		// a token travels on; the transport's own headers do not
		md = md.Copy()
		for _, k := range []string{":authority", "content-type", "user-agent", "te", "grpc-timeout"} {
			delete(md, k)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	conn, err := grpc.NewClient(p.replica, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return status.Errorf(codes.Unavailable, "xdsproxy: replica %s: %v", p.name, err)
	}
	defer conn.Close()
	up, err := open(ctx, conn)
	if err != nil {
		return status.Errorf(codes.Unavailable, "xdsproxy: replica %s: %v", p.name, err)
	}
	view := p.rec.stream(p.name, delta)
	errc := make(chan error, 2)
	go func() { // client → replica
		for {
			req := newRequest(delta)
			if err := down.RecvMsg(req); err != nil {
				errc <- err
				return
			}
			view.request(req)
			if err := up.SendMsg(req); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() { // replica → client
		for {
			resp := newResponse(delta)
			if err := up.RecvMsg(resp); err != nil {
				errc <- err
				return
			}
			if !p.mayForward(ctx) {
				errc <- errCut
				return
			}
			view.response(resp)
			if err := down.SendMsg(resp); err != nil {
				errc <- err
				return
			}
		}
	}()
	err = <-errc
	// cut by the proxy: a planned cut, or Cut ending the stream's context
	// while the client's own is alive (read before cancel ends it too)
	cut := errors.Is(err, errCut) || ctx.Err() != nil && down.Context().Err() == nil
	cancel()
	if cut {
		return status.Error(codes.Unavailable, "xdsproxy: cut")
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return nil
}

var errCut = errors.New("xdsproxy: cut")

func newRequest(delta bool) any {
	if delta {
		return &discovery.DeltaDiscoveryRequest{}
	}
	return &discovery.DiscoveryRequest{}
}

func newResponse(delta bool) any {
	if delta {
		return &discovery.DeltaDiscoveryResponse{}
	}
	return &discovery.DiscoveryResponse{}
}

// Recorder gathers the events of every stream of every proxy, in the
// order they happened, as a history's events.
type Recorder struct {
	mu      sync.Mutex
	events  []history.Event
	now     func() time.Time
	changed chan struct{} // closed at the next event
}

// NewRecorder starts an empty record.
func NewRecorder() *Recorder { return &Recorder{now: time.Now, changed: make(chan struct{})} }

// WaitFor waits until the events so far satisfy ok, looking again at each
// new event; it gives up when ctx ends.
func (r *Recorder) WaitFor(ctx context.Context, ok func([]history.Event) bool) error {
	for {
		r.mu.Lock()
		events, changed := r.events[:len(r.events):len(r.events)], r.changed
		r.mu.Unlock()
		if ok(events) { // outside the lock: ok may read the record itself
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Events are the events so far, in order.
func (r *Recorder) Events() []history.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]history.Event(nil), r.events...)
}

// Settled records that the harness waited for what it did to reach the
// clients (history.Settled).
func (r *Recorder) Settled() { r.add(history.Event{Kind: history.Settled}) }

func (r *Recorder) add(e history.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.At = r.now()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Recorder) stream(replica string, delta bool) *streamView {
	return &streamView{r: r, replica: replica, delta: delta, wildcard: map[string]bool{}}
}

// streamView is what one stream has said: the node, and per type whether
// the client asked for every resource.
type streamView struct {
	r        *Recorder
	replica  string
	delta    bool
	mu       sync.Mutex
	node     string
	wildcard map[string]bool
}

func (v *streamView) request(m any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch req := m.(type) {
	case *discovery.DiscoveryRequest:
		if id := req.GetNode().GetId(); id != "" {
			v.node = id
		}
		names := req.GetResourceNames()
		wildcard := len(names) == 0 || names[0] == "*"
		v.wildcard[req.GetTypeUrl()] = wildcard
		e := history.Event{Client: v.node, Replica: v.replica, Kind: history.Subscribe, Type: req.GetTypeUrl(), Nonce: req.GetResponseNonce()}
		if !wildcard {
			e.Names = slices.Clone(names)
		}
		if e.Nonce != "" {
			e.Kind = answer(req.GetErrorDetail() != nil)
		}
		v.r.add(e)
	case *discovery.DeltaDiscoveryRequest:
		if id := req.GetNode().GetId(); id != "" {
			v.node = id
		}
		subs, unsubs := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
		if _, seen := v.wildcard[req.GetTypeUrl()]; !seen {
			v.wildcard[req.GetTypeUrl()] = len(subs) == 0 || subs[0] == "*"
		}
		if len(subs) > 0 || len(unsubs) > 0 {
			v.r.add(history.Event{Client: v.node, Replica: v.replica, Kind: history.Subscribe, Delta: true, Type: req.GetTypeUrl(),
				Names: slices.Clone(subs), Removed: slices.Clone(unsubs)})
		}
		if req.GetResponseNonce() != "" {
			v.r.add(history.Event{Client: v.node, Replica: v.replica, Kind: answer(req.GetErrorDetail() != nil), Delta: true, Type: req.GetTypeUrl(), Nonce: req.GetResponseNonce()})
		}
	}
}

func answer(nack bool) history.Kind {
	if nack {
		return history.NACK
	}
	return history.ACK
}

func (v *streamView) response(m any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := history.Event{Client: v.node, Replica: v.replica, Kind: history.Response, Resources: history.Contents{}}
	switch resp := m.(type) {
	case *discovery.DiscoveryResponse:
		e.Type, e.Version, e.Nonce = resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce()
		for _, a := range resp.GetResources() {
			name, err := ResourceName(a)
			if err != nil {
				name = fmt.Sprintf("undecodable: %v", err)
			}
			e.Resources[name] = history.HashOf(a.GetValue())
		}
	case *discovery.DeltaDiscoveryResponse:
		e.Type, e.Version, e.Nonce, e.Delta = resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), true
		for _, r := range resp.GetResources() {
			e.Resources[r.GetName()] = history.HashOf(r.GetResource().GetValue())
		}
		e.Removed = resp.GetRemovedResources()
	}
	e.Wildcard = v.wildcard[e.Type]
	v.r.add(e)
}
