package server

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// xdsServer serves the xDS services from the cache. Each stream has two
// goroutines: one reads requests and feeds them to the stream's watches,
// the other sends whatever the cache says is ready, in type order.
type xdsServer struct {
	cache   *xdscache.Cache
	clients *Clients
	names   *nameBlocks
	// streams counts the open streams, at most maxStreams.
	streams    atomic.Int64
	maxStreams int64
	// perInstance counts the open streams of each workload instance a
	// pod-bound token or a certificate proves, at most maxPerInstance (0:
	// not counted); an instance has an entry only while it holds streams.
	// Guarded by mu.
	perInstance    map[string]int
	maxPerInstance int
	// leaving holds each open stream's end, called when the server
	// drains; draining is closed once it has begun (no new stream stays).
	mu       sync.Mutex
	leaving  map[*leaver]struct{}
	draining chan struct{}
	// large is the budget of large responses in flight (see send).
	large *semaphore.Weighted
	// bodies are the encoded resources of recent large SotW responses,
	// shared by every client they are sent to (see encodedSotw).
	bodies *bodyCache
	// SotW and Delta streams are numbered independently, each from 1.
	sotwIDs, deltaIDs atomic.Int64
	// loads receives LRS reports (nil: LRS is not served), asked for every loadInterval.
	loads        LoadReports
	loadInterval time.Duration
	// authn resolves each RPC's client identity (nil: all are anonymous).
	authn *identity.Authenticator
	// audience resolves a call's audience (nil: anonymous).
	audience func(context.Context) (Audience, error)
	// demandGrant is the demand weight a proven identity may claim (nil: 1).
	demandGrant func(identity.Identity) uint64
}

// audienceOf is the audience of the client of a call, or the status that
// refuses it.
func (x *xdsServer) audienceOf(ctx context.Context) (Audience, error) {
	if x.audience == nil {
		// the identity the interceptors proved decides: its namespace, or
		// anonymous when there is none
		if id, ok := IdentityFrom(ctx); ok && !id.Anonymous() && id.Namespace != "" {
			return Audience{Namespace: id.Namespace}, nil
		}
		return xdscache.Anonymous, nil
	}
	a, err := x.audience(ctx)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return xdscache.Anonymous, err
		}
		return xdscache.Anonymous, status.Errorf(codes.PermissionDenied, "who the client is is unknown: %v", err)
	}
	return a, nil
}

// register adds ADS and each type's own service (xdstype) to g. It reuses
// the generated service descriptions (names, methods, metadata) with this
// server's handlers, so the services are the standard ones on the wire.
func (x *xdsServer) register(g *grpc.Server) {
	type service struct {
		desc    *grpc.ServiceDesc
		typeURL string // "" for ADS: any type on one stream
	}
	services := []service{{&discovery.AggregatedDiscoveryService_ServiceDesc, ""}}
	for _, t := range xdstype.All() {
		services = append(services, service{t.Service, t.URL})
	}
	for _, svc := range services {
		desc := *svc.desc
		desc.HandlerType = (*any)(nil)
		desc.Streams = nil
		for _, sd := range svc.desc.Streams {
			only := svc.typeURL
			switch {
			case strings.HasPrefix(sd.StreamName, "Delta"):
				sd.Handler = func(_ any, ss grpc.ServerStream) error { return x.delta(ss, only) }
			default:
				sd.Handler = func(_ any, ss grpc.ServerStream) error { return x.sotw(ss, only) }
			}
			desc.Streams = append(desc.Streams, sd)
		}
		desc.Methods = nil
		for _, md := range svc.desc.Methods {
			only := svc.typeURL
			info := &grpc.UnaryServerInfo{FullMethod: "/" + desc.ServiceName + "/" + md.MethodName}
			// as generated handlers do: decode, then the interceptors (the
			// identity check) around the handler
			md.Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				req := &discovery.DiscoveryRequest{}
				if err := dec(req); err != nil {
					return nil, err
				}
				fetch := func(ctx context.Context, req any) (any, error) {
					return x.fetch(ctx, req.(*discovery.DiscoveryRequest), only)
				}
				if interceptor == nil {
					return fetch(ctx, req)
				}
				info := *info
				info.Server = srv
				return interceptor(ctx, req, &info, fetch)
			}
			desc.Methods = append(desc.Methods, md)
		}
		g.RegisterService(&desc, x)
	}
	if x.loads != nil {
		x.registerLoadStats(g)
	}
}

// typeFor checks a request's type URL against the service's.
func typeFor(got, only string) (string, error) {
	if only == "" {
		return got, nil
	}
	if got != "" && got != only {
		return "", status.Errorf(codes.InvalidArgument, "type %q on the %s service", got, xdstype.Short(only))
	}
	return only, nil
}

func unknownType(typeURL string) error {
	return status.Errorf(codes.InvalidArgument, "type %q is not served (served: %s)", typeURL, strings.Join(xdstype.Shorts(), ", "))
}

// requestError is the status a stream ends with when the cache refuses a request.
func requestError(typeURL string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, xdscache.ErrTooManyNames):
		return status.Errorf(codes.ResourceExhausted, "%s: %v", xdstype.Short(typeURL), err)
	}
	return unknownType(typeURL)
}

// Large responses (a starting client's whole state: 12 MB of clusters at a
// million endpoints) sit in the transport until the client has read them;
// a hundred clients starting at once would hold a hundred of them. A
// response of at least largeResponse bytes therefore takes its size from a
// budget of maxLargeInFlight bytes shared by all streams, and gives it back
// when the client shows it has read it (its next request, of any type), when
// the stream ends, or after largeHoldMax at the latest, so a client that
// never answers cannot keep the budget. Smaller responses (every change
// after the first) never wait.
const (
	largeResponse    = 1 << 20
	maxLargeInFlight = 256 << 20
	largeHoldMax     = 2 * time.Second
)

// largeHold is what one stream holds of the budget.
type largeHold struct {
	x     *xdsServer
	max   time.Duration // largeHoldMax
	mu    sync.Mutex
	w     int64
	timer *time.Timer
}

// release gives back what the stream holds.
func (h *largeHold) release() {
	h.mu.Lock()
	w := h.w
	h.w = 0
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.mu.Unlock()
	if w > 0 {
		h.x.large.Release(w)
	}
}

func (h *largeHold) add(w int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w += w
	if h.timer == nil {
		h.timer = time.AfterFunc(h.max, h.release)
	}
}

func (x *xdsServer) send(ss grpc.ServerStream, hold *largeHold, r xdscache.Response, envelope func(xdscache.Response) any) error {
	if r.Bytes >= largeResponse {
		w := int64(min(r.Bytes, maxLargeInFlight))
		if err := x.large.Acquire(ss.Context(), w); err != nil {
			return err
		}
		hold.add(w)
	}
	return ss.SendMsg(envelope(r))
}

// errShuttingDown ends a stream when the server drains: the client
// reconnects, to another replica behind the same Service.
var errShuttingDown = status.Error(codes.Unavailable, "this xDS server is shutting down; reconnect")

// leaver ends one open stream when the server drains.
type leaver struct{ end context.CancelCauseFunc }

// stay registers a new stream, which end ends when the server drains; it
// is false once the server drains.
func (x *xdsServer) stay(end context.CancelCauseFunc) (*leaver, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	select {
	case <-x.draining:
		return nil, false
	default:
	}
	l := &leaver{end: end}
	x.leaving[l] = struct{}{}
	return l, true
}

func (x *xdsServer) left(l *leaver) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.leaving, l)
}

// drain ends the open streams one at a time, spread evenly over period, so
// their clients do not all reconnect at once; it returns when the last has
// been told to leave, or at once when ctx is done.
func (x *xdsServer) drain(ctx context.Context, period time.Duration) {
	x.mu.Lock()
	close(x.draining)
	open := make([]*leaver, 0, len(x.leaving))
	for l := range x.leaving {
		open = append(open, l)
	}
	x.mu.Unlock()
	if len(open) == 0 {
		return
	}
	every := period / time.Duration(len(open))
	tick := time.NewTicker(max(every, time.Microsecond))
	defer tick.Stop()
	for i, l := range open {
		if i > 0 && every > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				every = 0
			}
		}
		l.end(errShuttingDown)
	}
}

// admit counts a new stream of ctx's client against the server's limit
// and its workload instance's, and registers it for draining. The stream's
// context sctx ends when ctx does, when the server drains (cause
// errShuttingDown) or when end is called; whyEnded says which. done
// undoes all three.
func (x *xdsServer) admit(ctx context.Context) (sctx context.Context, end context.CancelCauseFunc, done func(), err error) {
	if n := x.streams.Add(1); n > x.maxStreams {
		x.streams.Add(-1)
		return nil, nil, nil, status.Errorf(codes.ResourceExhausted,
			"this xDS server holds its limit of %d streams; retry later or on another replica (the limit is --xds-max-streams)", x.maxStreams)
	}
	var instance string
	if x.maxPerInstance > 0 {
		instance = limitedInstance(ctx)
	}
	if instance != "" {
		x.mu.Lock()
		if x.perInstance[instance] >= x.maxPerInstance {
			x.mu.Unlock()
			x.streams.Add(-1)
			return nil, nil, nil, status.Errorf(codes.ResourceExhausted,
				"this workload instance holds its limit of %d streams on this xDS server (the limit is --xds-max-streams-per-instance)", x.maxPerInstance)
		}
		x.perInstance[instance]++
		x.mu.Unlock()
	}
	sctx, end = context.WithCancelCause(ctx)
	l, ok := x.stay(end)
	if !ok {
		end(nil)
		x.instanceLeft(instance)
		x.streams.Add(-1)
		return nil, nil, nil, errShuttingDown
	}
	return sctx, end, func() { end(nil); x.left(l); x.instanceLeft(instance); x.streams.Add(-1) }, nil
}

// recvEnded is the cause of a stream's end when reading its requests
// ended (err: why).
type recvEnded struct{ err error }

func (r recvEnded) Error() string {
	return fmt.Sprintf("reading the stream's requests ended: %v", r.err)
}

// whyEnded is the handler's result for a stream whose context (admit's)
// ended: the client left (nil), the server drains, or reading failed.
func whyEnded(sctx context.Context) error {
	cause := context.Cause(sctx)
	var r recvEnded
	switch {
	case errors.Is(cause, errShuttingDown):
		return errShuttingDown
	case errors.As(cause, &r):
		return streamEnd(r.err)
	}
	return nil
}

// limitedInstance is the workload instance whose streams are counted
// against --xds-max-streams-per-instance: one pod (its bound token) or one
// client certificate. Anonymous clients and tokens bound to no pod (every
// pod of a service account then shares one instance) are not limited.
func limitedInstance(ctx context.Context) string {
	id, ok := IdentityFrom(ctx)
	if !ok || !(id.Method == identity.MethodCertificate || id.Pod.UID != "") {
		return ""
	}
	return id.Instance
}

func (x *xdsServer) instanceLeft(instance string) {
	if instance == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.perInstance[instance]--; x.perInstance[instance] <= 0 {
		delete(x.perInstance, instance)
	}
}

// streamEnd turns a stream's end into the handler's result.
func streamEnd(err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (x *xdsServer) sotw(ss grpc.ServerStream, only string) error {
	return x.serve(ss, "sotw", func(st *xdscache.Stream, key streamKey, hold *largeHold) error {
		return x.recvSotw(ss, st, key, hold, only)
	},
		func(r xdscache.Response) any { return x.encodeSotw(r) })
}

func (x *xdsServer) delta(ss grpc.ServerStream, only string) error {
	return x.serve(ss, "delta", func(st *xdscache.Stream, key streamKey, hold *largeHold) error {
		return x.recvDelta(ss, st, key, hold, only)
	},
		func(r xdscache.Response) any { return x.encodeDelta(r) })
}

// serve runs one stream: recv reads and handles its requests on another
// goroutine while this one sends what the cache says is ready.
func (x *xdsServer) serve(ss grpc.ServerStream, protocol string, recv func(*xdscache.Stream, streamKey, *largeHold) error,
	envelope func(xdscache.Response) any) error {
	aud, err := x.audienceOf(ss.Context())
	if err != nil {
		return err
	}
	sctx, end, done, err := x.admit(ss.Context())
	if err != nil {
		return err
	}
	defer done()
	ids := &x.sotwIDs
	if protocol == "delta" {
		ids = &x.deltaIDs
	}
	key := streamKey{protocol, ids.Add(1)}
	st := x.cache.NewStreamFor(protocol == "delta", aud)
	defer st.Close()
	if addr := peerAddr(ss.Context()); addr != "" {
		st.SetConnection(maphash.String(x.cache.Seed(), addr))
	}
	capped, instance := x.demandCap(ss.Context())
	st.WeighDemand(weighDemand(capped), instance)
	if p := placementOf(ss.Context()); p.proven {
		st.Place(p.class(nil))
	}
	x.clients.open(key, st)
	x.clients.capDemand(key, capped)
	defer x.clients.closed(key)
	x.clients.setIdentity(key, provenFrom(ss.Context()))

	hold := &largeHold{x: x, max: largeHoldMax}
	defer hold.release()
	// One context for the client leaving, the server draining and reading
	// failing; its end wakes the sender too, which therefore waits on one
	// channel: a plain receive is the cheapest wait per response (a select
	// of two locks both channels and queues on both).
	go func() { end(recvEnded{recv(st, key, hold)}) }()
	defer context.AfterFunc(sctx, st.Interrupt)()
	var out []xdscache.Response
	for {
		<-st.Wake()
		if sctx.Err() != nil {
			return whyEnded(sctx)
		}
		woke := time.Now()
		out = st.Next(out[:0])
		for _, r := range out {
			published, _ := x.cache.PublishedAt(r.Version)
			// Recorded before sending, so an ACK can never arrive before its nonce is known.
			x.clients.response(key, r.TypeURL, r.Version, r.Nonce, r.Entries, r.Removed, published)
			sending := time.Now()
			if err := x.send(ss, hold, r, envelope); err != nil {
				return streamEnd(err)
			}
			done := time.Now()
			x.clients.sent(r.TypeURL, done.Sub(woke), done.Sub(sending))
		}
	}
}

func (x *xdsServer) recvSotw(ss grpc.ServerStream, st *xdscache.Stream, key streamKey, hold *largeHold, only string) error {
	req := &sotwRequest{seed: x.cache.Seed(), blocks: x.names}
	defer req.forget()
	defer req.release()
	for {
		if err := ss.RecvMsg(req); err != nil {
			if errors.Is(err, errMalformed) {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			return err
		}
		hold.release() // the client has read what it was sent
		err := x.handleSotw(st, key, only, req)
		req.release()
		if err != nil {
			return err
		}
	}
}

// handleSotw feeds one request to the stream's watches and the registry.
func (x *xdsServer) handleSotw(st *xdscache.Stream, key streamKey, only string, req *sotwRequest) error {
	typeURL, err := typeFor(req.typeURLString(), only)
	if err != nil {
		return err
	}
	t := xdstype.Index(typeURL)
	if t < 0 {
		return unknownType(typeURL)
	}
	node, err := req.decodeNode()
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	detail, err := req.decodeError()
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	st.SetNode(node)
	req.remember(t)
	nonce := string(req.nonce)
	version := x.clients.sotwRequest(key, node, typeURL, req.version, nonce, detail.GetMessage(), detail != nil)
	return requestError(typeURL, st.Sotw(xdscache.SotwRequest{TypeURL: typeURL, Version: version, Nonce: nonce, NACK: detail != nil,
		NamesHash: req.namesHash, Names: req.resourceNames}))
}

func (x *xdsServer) recvDelta(ss grpc.ServerStream, st *xdscache.Stream, key streamKey, hold *largeHold, only string) error {
	for {
		req := &discovery.DeltaDiscoveryRequest{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		hold.release() // the client has read what it was sent
		if err := x.handleDelta(st, key, only, req); err != nil {
			return err
		}
	}
}

func (x *xdsServer) handleDelta(st *xdscache.Stream, key streamKey, only string, req *discovery.DeltaDiscoveryRequest) error {
	typeURL, err := typeFor(req.GetTypeUrl(), only)
	if err != nil {
		return err
	}
	if xdstype.Index(typeURL) < 0 {
		return unknownType(typeURL)
	}
	st.SetNode(req.GetNode())
	x.clients.deltaRequest(key, req.GetNode(), typeURL, req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
	return requestError(typeURL, st.Delta(xdscache.DeltaRequest{TypeURL: typeURL, Nonce: req.GetResponseNonce(), NACK: req.GetErrorDetail() != nil,
		Subscribe: req.GetResourceNamesSubscribe(), Unsubscribe: req.GetResourceNamesUnsubscribe(),
		Initial: req.GetInitialResourceVersions()}))
}

// fetch answers the unary Fetch* methods with the current resources.
func (x *xdsServer) fetch(ctx context.Context, req *discovery.DiscoveryRequest, only string) (any, error) {
	typeURL, err := typeFor(req.GetTypeUrl(), only)
	if err != nil {
		return nil, err
	}
	aud, err := x.audienceOf(ctx)
	if err != nil {
		return nil, err
	}
	node := req.GetNode()
	entries, version, ok, err := x.cache.Fetch(ctx, aud, placementOf(ctx).class(node), node, typeURL, req.GetVersionInfo(), req.GetResourceNames())
	switch {
	case err != nil:
		return nil, unknownType(typeURL)
	case version == "":
		return nil, status.Error(codes.Unavailable, "nothing published yet")
	case !ok:
		return nil, status.Errorf(codes.NotFound, "the client holds the current version %s", version)
	}
	resp := &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: typeURL, Resources: make([]*anypb.Any, len(entries))}
	for i, e := range entries {
		resp.Resources[i] = e.Any
	}
	return resp, nil
}
