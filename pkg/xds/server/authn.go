package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

type identityKey struct{}

// IdentityFrom is the identity the server proved for the client of the
// RPC of ctx (anonymous when the server authenticates no one), and whether
// ctx is that of one of its RPCs.
func IdentityFrom(ctx context.Context) (identity.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(identity.Identity)
	return id, ok
}

// errExpired is the cause of a stream's context when its identity's proof
// expires: the stream then ends with Unauthenticated.
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
	ctx := context.WithValue(ss.Context(), identityKey{}, id)
	if !id.Expires.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, id.Expires, errExpired)
		defer cancel()
	}
	label := x.clients.identityOpened(id)
	defer x.clients.identityClosed(label)
	err = handler(srv, &authedStream{ServerStream: ss, ctx: ctx, x: x, id: id, method: info.FullMethod})
	if context.Cause(ctx) == errExpired && ss.Context().Err() == nil {
		x.clients.refused(ss.Context(), info.FullMethod, id, fmt.Errorf("%w at %s", errExpired, id.Expires.UTC().Format(time.RFC3339)))
		return refusal(errExpired)
	}
	return err
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
	return handler(context.WithValue(ctx, identityKey{}, id), req)
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
