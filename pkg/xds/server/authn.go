package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/identity"
)

// Every RPC the server registers, stream or unary, passes through
// authStream or authUnary, which the server installs as gRPC interceptors:
// the client's identity is resolved there before any handler reads, sends
// or counts anything, so no method can be served without it. The node's
// claims are checked against the identity on every request that carries a
// node, in the same place (the stream's RecvMsg, the unary request).
//
// A stream's proof holds until its identity's Expires: a certificate's
// NotAfter, or for a token the end of its review (the verifier's review
// interval after TokenReview accepted it) or its exp, whichever is first.
// There the stream proves itself again with the credentials it was opened
// with (keepProving): a token whose review ended is reviewed again (one
// TokenReview per token, however many streams present it: the verifier's
// cache and its single flight), and the stream goes on while it is accepted;
// a token refused (its pod deleted), a token or certificate past its own
// expiry, or an apiserver that cannot be asked ends the stream with the
// refusal, counted and logged as any refusal is.

type identityKey struct{}

// proven is the identity of a call, as last proven: a stream's expiry moves
// on each time it proves itself again.
type proven struct {
	id      identity.Identity
	expires atomic.Int64 // Unix nanoseconds of id.Expires as renewed; 0 while not renewed
}

func newProven(id identity.Identity) *proven { return &proven{id: id} }

// identity is the identity with its current expiry.
func (p *proven) identity() identity.Identity {
	id := p.id
	if ns := p.expires.Load(); ns != 0 {
		id.Expires = time.Unix(0, ns)
	}
	return id
}

// renew moves the expiry to until.
func (p *proven) renew(until time.Time) { p.expires.Store(until.UnixNano()) }

// IdentityFrom is the identity the server proved for the client of the
// RPC of ctx (anonymous when the server authenticates no one), and whether
// ctx is that of one of its RPCs.
func IdentityFrom(ctx context.Context) (identity.Identity, bool) {
	p, ok := ctx.Value(identityKey{}).(*proven)
	if !ok {
		return identity.Identity{}, false
	}
	return p.identity(), true
}

// provenFrom is the proof of the RPC of ctx, or nil.
func provenFrom(ctx context.Context) *proven {
	p, _ := ctx.Value(identityKey{}).(*proven)
	return p
}

// errExpired is why a stream ends when its proof expires: it ends with
// Unauthenticated.
var errExpired = &identity.Error{Reason: identity.ReasonExpired, Detail: "credentials expired; reconnect with fresh ones"}

// authenticate is the identity of the client of the RPC of ctx, or the
// refusal, counted and logged.
func (x *xdsServer) authenticate(ctx context.Context, method string) (identity.Identity, error) {
	if x.authn == nil {
		return identity.Identity{Method: identity.MethodNone}, nil
	}
	id, err := x.authn.Authenticate(ctx)
	if err != nil {
		x.clients.refused(ctx, method, identity.Identity{}, err)
		return identity.Identity{}, refusal(err)
	}
	return id, nil
}

// refusal is the status an identity error ends an RPC with (its own: the
// cause stays in the log).
func refusal(err error) error {
	var e *identity.Error
	if errors.As(err, &e) {
		return e.GRPCStatus().Err()
	}
	return status.Error(codes.Unauthenticated, "identity: "+err.Error())
}

func (x *xdsServer) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, err := x.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	p := newProven(id)
	ctx, end := context.WithCancelCause(context.WithValue(ss.Context(), identityKey{}, p))
	defer end(nil)
	if !id.Expires.IsZero() {
		stop := x.keepProving(ss.Context(), info.FullMethod, p, end)
		defer stop()
	}
	label := x.clients.identityOpened(id)
	defer x.clients.identityClosed(label)
	err = handler(srv, &authedStream{ServerStream: ss, ctx: ctx, x: x, id: id, method: info.FullMethod})
	if cause := context.Cause(ctx); cause != nil && ss.Context().Err() == nil {
		return refusal(cause) // keepProving ended the stream
	}
	return err
}

// keepProving proves a stream's identity again each time its proof expires,
// from the credentials of the stream's call (callCtx), until stop: it renews
// p while the same identity is proven and not yet expired again, and ends
// the stream with the refusal otherwise, counted and logged under its reason.
// Between proofs it holds a timer, not a goroutine.
func (x *xdsServer) keepProving(callCtx context.Context, method string, p *proven, end context.CancelCauseFunc) (stop func()) {
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	prove := func() {
		if callCtx.Err() != nil {
			return // the client is gone
		}
		was := p.identity()
		id, err := x.authn.Authenticate(callCtx)
		now := time.Now()
		switch {
		case err == nil && (id.Principal() != was.Principal() || id.Instance != was.Instance):
			err = fmt.Errorf("%w: the credentials now prove %s (%s), not %s (%s)", errExpired, id.Principal(), id.Instance, was.Principal(), was.Instance)
		case err == nil && !id.Expires.After(now):
			err = fmt.Errorf("%w at %s", errExpired, id.Expires.UTC().Format(time.RFC3339))
		case identity.ReasonOf(err) == identity.ReasonExpired:
			err = fmt.Errorf("%w: %w", errExpired, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err != nil {
			x.clients.refused(callCtx, method, was, err)
			end(err)
			return
		}
		p.renew(id.Expires)
		timer.Reset(time.Until(id.Expires))
	}
	mu.Lock()
	timer = time.AfterFunc(time.Until(p.id.Expires), prove)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}

func (x *xdsServer) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, err := x.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if r, ok := req.(interface{ GetNode() *core.Node }); ok {
		if err := x.checkClaims(ctx, info.FullMethod, id, r.GetNode()); err != nil {
			return nil, err
		}
	}
	return handler(context.WithValue(ctx, identityKey{}, newProven(id)), req)
}

// checkClaims refuses a node whose claims its identity does not back.
func (x *xdsServer) checkClaims(ctx context.Context, method string, id identity.Identity, node *core.Node) error {
	if node == nil {
		return nil
	}
	if err := identity.CheckClaims(id, node); err != nil {
		x.clients.refused(ctx, method, id, err)
		return refusal(err)
	}
	return nil
}

// authedStream is a stream whose client has proven id: its context holds
// the identity and ends when the proof expires, and every request that
// carries a node has the node's claims checked.
type authedStream struct {
	grpc.ServerStream
	ctx    context.Context
	x      *xdsServer
	id     identity.Identity
	method string
	// lastNode is the encoded node of the last SotW request whose claims
	// were checked: a client repeating its node is not decoded again.
	lastNode []byte
}

func (s *authedStream) Context() context.Context { return s.ctx }

func (s *authedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.id.Anonymous() {
		return nil
	}
	var node *core.Node
	switch r := m.(type) {
	case *sotwRequest:
		if !r.hasNode || bytes.Equal(r.node, s.lastNode) {
			return nil
		}
		n, err := r.decodeNode()
		if err != nil {
			return nil // the handler refuses the request
		}
		s.lastNode = append(s.lastNode[:0], r.node...)
		node = n
	case interface{ GetNode() *core.Node }:
		node = r.GetNode()
	}
	return s.x.checkClaims(s.ServerStream.Context(), s.method, s.id, node)
}
