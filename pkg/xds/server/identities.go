package server

import (
	"context"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/metrics"
)

// ClientIdentity is who a stream's client proved to be, as /debug/clients
// shows it.
type ClientIdentity struct {
	// Principal is "NAMESPACE/SERVICE-ACCOUNT"; Method how it was proven
	// (certificate or token).
	Principal string `json:"principal"`
	Method    string `json:"method"`
	// Instance tells the workload instances of one principal apart: a pod
	// (from its token) or a client certificate.
	Instance string `json:"instance,omitempty"`
	SPIFFEID string `json:"spiffeId,omitempty"`
	// Pod is the pod a token is bound to, Node the node it runs on.
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
	// Expires is when the proof ends unless the stream proves itself
	// again: a certificate's NotAfter, or the end of a token's review (or
	// its expiry, when sooner), moved on at each review that accepts it.
	Expires time.Time `json:"expires,omitzero"`
	// ClaimedNamespace is the namespace the node claims (node metadata
	// NAMESPACE or poise.dev/namespace) when it is not the proven one.
	ClaimedNamespace string `json:"claimedNamespace,omitempty"`
	namespace        string // the proven one
}

// refusalLogEvery bounds the refusal log: of the refusals of one reason,
// at most one line per period is written, the others counted on the next
// line, so no client can fill the log however often it reconnects.
const refusalLogEvery = nackLogEvery

type refusalLog struct {
	last     time.Time
	unlogged int
}

// refused counts a refusal by its reason and logs it within the bound.
func (c *Clients) refused(ctx context.Context, method string, id identity.Identity, err error) {
	reason := identity.ReasonOf(err)
	if reason == "" {
		reason = identity.ReasonNoCredentials
	}
	if c.metrics != nil {
		c.metrics.Refused.WithLabelValues(string(reason)).Inc()
	}
	addr := peerAddr(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	l := c.refusals[reason]
	if l == nil {
		l = &refusalLog{}
		c.refusals[reason] = l
	}
	if !l.last.IsZero() && now.Sub(l.last) < refusalLogEvery {
		l.unlogged++
		return
	}
	c.log.Warn("xDS client refused for its identity", "reason", string(reason), "method", method, "peer", addr,
		"identity", id.String(), "error", truncate(err.Error(), maxNACKDetail), "refusalsNotLoggedSinceLastLine", l.unlogged)
	l.last, l.unlogged = now, 0
}

// identityOpened counts an open stream under its principal's label,
// returning the label for identityClosed: a principal has a series of its
// own while it has streams and fewer than metrics.MaxPrincipals others do.
func (c *Clients) identityOpened(id identity.Identity) string {
	if c.metrics == nil {
		return ""
	}
	label := id.Principal()
	c.mu.Lock()
	switch {
	case label == "":
		label = metrics.AnonymousPrincipal
	case c.principals[label] > 0 || len(c.principals) < metrics.MaxPrincipals:
		c.principals[label]++
	default:
		label = metrics.OtherPrincipal
	}
	c.mu.Unlock()
	c.metrics.IdentityStreams.WithLabelValues(label).Inc()
	return label
}

func (c *Clients) identityClosed(label string) {
	if c.metrics == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if label == metrics.AnonymousPrincipal || label == metrics.OtherPrincipal {
		c.metrics.IdentityStreams.WithLabelValues(label).Dec()
		return
	}
	if c.principals[label]--; c.principals[label] > 0 {
		c.metrics.IdentityStreams.WithLabelValues(label).Dec()
		return
	}
	delete(c.principals, label)
	c.metrics.IdentityStreams.DeleteLabelValues(label)
}

// setIdentity records who stream k's client proved to be (p, whose expiry
// moves on as the stream proves itself again), and where that places it; an
// anonymous client shows none.
func (c *Clients) setIdentity(k streamKey, p *proven) {
	if p == nil || p.id.Anonymous() {
		return
	}
	id := p.identity()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.streams[k]; cl != nil {
		ci := &ClientIdentity{Principal: truncate(id.Principal(), maxNodeField), Method: string(id.Method),
			Instance: truncate(id.Instance, maxNodeField), SPIFFEID: truncate(id.SPIFFEID, maxNodeField), Expires: id.Expires,
			namespace: id.Namespace}
		if id.Pod.Name != "" {
			ci.Pod = truncate(id.Pod.Namespace+"/"+id.Pod.Name, maxNodeField)
		}
		ci.Node = truncate(id.Node, maxNodeField)
		cl.Identity = ci
		cl.proof, cl.placement = p, placed(id)
	}
}

// claimedNamespace is the namespace a node's metadata claims, or "".
func claimedNamespace(n *core.Node) string {
	f := n.GetMetadata().GetFields()
	for _, k := range []string{identity.ClaimNamespace, identity.ClaimIstioNamespace} {
		if s, ok := f[k].GetKind().(*structpb.Value_StringValue); ok {
			return s.StringValue
		}
	}
	return ""
}

// peerAddr is the transport address of the client of ctx, or "".
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
