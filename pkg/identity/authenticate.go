package identity

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Options configure an Authenticator.
type Options struct {
	// TrustDomain, when set, is the only trust domain a client
	// certificate's SPIFFE ID may be of.
	TrustDomain string
	// Tokens verifies bearer tokens; nil means tokens are not accepted and
	// the authorization metadata is ignored.
	Tokens *TokenVerifier
	// AllowAnonymous lets a client that presents nothing in as MethodNone
	// (see CheckAnonymous for where that is safe).
	AllowAnonymous bool
	// Now is the clock certificates are checked against (default time.Now).
	Now func() time.Time
}

// Authenticator resolves the identity of the client of an RPC.
type Authenticator struct {
	o Options
}

// New is an Authenticator with the options.
func New(o Options) *Authenticator {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Authenticator{o: o}
}

// AllowsAnonymous reports whether clients that present nothing are let in.
func (a *Authenticator) AllowsAnonymous() bool { return a.o.AllowAnonymous }

// CheckListener is CheckAnonymous for the address the server listens on
// when the authenticator lets anonymous clients in, and nil otherwise.
func (a *Authenticator) CheckListener(addr string, allowNonLoopback bool) error {
	if !a.o.AllowAnonymous {
		return nil
	}
	return CheckAnonymous(addr, allowNonLoopback)
}

// Authenticate is the identity of the client of the RPC of ctx, from the
// verified TLS peer certificate and the "authorization: Bearer TOKEN"
// metadata; the node message plays no part. With a token, the token decides
// (it names the pod); a certificate sent with it must then name the same
// service account, or neither counts. Without either, the client is
// anonymous if that is allowed. A refusal is an *Error, which a gRPC
// handler may return as it is.
func (a *Authenticator) Authenticate(ctx context.Context) (Identity, error) {
	cert, hasCert, certErr := a.certificate(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	token, hasToken, err := bearerToken(md)
	if err != nil {
		return Identity{}, err
	}
	if hasToken && a.o.Tokens != nil {
		id, err := a.o.Tokens.Verify(ctx, token)
		if err != nil {
			return Identity{}, err
		}
		if hasCert && certErr == nil {
			if cert.Namespace != id.Namespace || cert.ServiceAccount != id.ServiceAccount {
				return Identity{}, refuse(ReasonConflictingCredentials, fmt.Sprintf(
					"the certificate proves %s but the token %s", cert.Principal(), id.Principal()))
			}
			id.SPIFFEID, id.TrustDomain = cert.SPIFFEID, cert.TrustDomain
			if cert.Expires.Before(id.Expires) {
				id.Expires = cert.Expires
			}
		}
		return id, nil
	}
	if hasCert {
		return cert, certErr
	}
	if a.o.AllowAnonymous {
		return Identity{Method: MethodNone}, nil
	}
	return Identity{}, refuse(ReasonNoCredentials, "the client sent neither a client certificate nor a bearer token")
}

// certificate is what the TLS peer's certificate proves, and whether there
// is one.
func (a *Authenticator) certificate(ctx context.Context) (Identity, bool, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Identity{}, false, nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return Identity{}, false, nil
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Identity{}, true, refuse(ReasonUnverifiedCertificate, "the client certificate was not verified by the TLS handshake")
	}
	id, err := fromCertificate(info.State.VerifiedChains[0], a.o.TrustDomain, a.o.Now())
	return id, true, err
}

// bearerToken is the token of the one authorization metadata value, and
// whether there is one.
func bearerToken(md metadata.MD) (string, bool, error) {
	vals := md.Get("authorization")
	switch {
	case len(vals) == 0:
		return "", false, nil
	case len(vals) > 1:
		return "", true, refuse(ReasonMalformedCredentials, fmt.Sprintf("%d authorization values, not one", len(vals)))
	}
	v := vals[0]
	if len(v) > len("Bearer ")+MaxTokenBytes {
		return "", true, refuse(ReasonMalformedCredentials, fmt.Sprintf("the authorization value is longer than %d bytes", len("Bearer ")+MaxTokenBytes))
	}
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true, refuse(ReasonMalformedCredentials, `the authorization value is not "Bearer TOKEN"`)
	}
	token = strings.Trim(token, " ")
	if token == "" {
		return "", true, refuse(ReasonMalformedCredentials, "the bearer token is empty")
	}
	for i := 0; i < len(token); i++ {
		if !isToken68(token[i]) {
			return "", true, refuse(ReasonMalformedCredentials, "the bearer token has a character other than [A-Za-z0-9-._~+/=]")
		}
	}
	return token, true, nil
}

func isToken68(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '='
}
