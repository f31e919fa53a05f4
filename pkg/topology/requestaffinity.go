package topology

import (
	"slices"
	"time"
)

// KeySource is where a request's key is taken from.
type KeySource uint8

const (
	// KeyHeader is a request header (gRPC: request metadata).
	KeyHeader KeySource = iota + 1
	// KeyCookie is a cookie, which Envoy may generate.
	KeyCookie
	// KeySourceIP is the request's source address.
	KeySourceIP
	// KeyQueryParameter is a query parameter of the request's path.
	KeyQueryParameter
)

func (s KeySource) String() string {
	switch s {
	case KeyHeader:
		return "header"
	case KeyCookie:
		return "cookie"
	case KeySourceIP:
		return "sourceIP"
	case KeyQueryParameter:
		return "queryParameter"
	}
	return "unknown"
}

// RequestKey is one source of a request's key, validated.
type RequestKey struct {
	Source KeySource
	// Name is the header, cookie or query parameter; "" for KeySourceIP.
	Name string
	// RewritePattern and RewriteSubstitution put a header's value in its
	// canonical form (an RE2 regex_rewrite); "" pattern is none.
	RewritePattern, RewriteSubstitution string
	// CookieGenerate: Envoy generates the cookie, with CookieTTL (0 is a
	// session cookie) and CookiePath ("" is none), when the request has none.
	CookieGenerate bool
	CookieTTL      time.Duration
	CookiePath     string
}

// RequestAffinity is an upstream's spec.requestAffinity: the sources of a
// request's key, in order; the first the request carries gives the key.
type RequestAffinity struct {
	Keys []RequestKey
}

// Equal reports whether r and o are the same affinity; nil is none.
func (r *RequestAffinity) Equal(o *RequestAffinity) bool {
	if r == nil || o == nil {
		return r == o
	}
	return slices.Equal(r.Keys, o.Keys)
}
