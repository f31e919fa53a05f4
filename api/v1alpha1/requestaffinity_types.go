package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Bounds of spec.requestAffinity. The kubebuilder markers must repeat them.
const (
	// MaxRequestKeys is the most key sources one Upstream lists.
	MaxRequestKeys = 8
	// MaxRequestKeyName is the longest header, cookie or query parameter name.
	MaxRequestKeyName = 256
	// MaxKeyRewritePattern is the longest rewrite pattern or substitution.
	MaxKeyRewritePattern = 512
	// MaxCookiePath is the longest path of a generated cookie.
	MaxCookiePath = 1024
	// MaxCookieTTL is the longest lifetime of a generated cookie.
	MaxCookieTTL = 365 * 24 * 3600 // seconds
)

// RequestAffinity keys each request, so that requests with the same key go to
// the same endpoint for as long as the endpoints stay the same
// (docs/affinity-keys.md). It needs loadBalancing RingHash or Maglev: the key
// is hashed onto the ring or the table those policies build.
type RequestAffinity struct {
	// keys are where a request's key is taken from, in order: the first source
	// the request carries gives the key, and a request that carries none is
	// placed at random. 1 to 8.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Keys []RequestKey `json:"keys"`
}

// RequestKey is one source of a request's key: exactly one of its fields.
// +kubebuilder:validation:XValidation:rule="(has(self.header) ? 1 : 0) + (has(self.cookie) ? 1 : 0) + (has(self.sourceIP) ? 1 : 0) + (has(self.queryParameter) ? 1 : 0) == 1",message="a key source names exactly one of header, cookie, sourceIP and queryParameter"
type RequestKey struct {
	// header takes the key from a request header; for gRPC, from the request
	// metadata of that name.
	// +optional
	Header *HeaderKey `json:"header,omitempty"`
	// cookie takes the key from a cookie, which Envoy can generate when the
	// request has none. gRPC clients have no cookies and skip this source.
	// +optional
	Cookie *CookieKey `json:"cookie,omitempty"`
	// sourceIP takes the key from the address the request comes from (Envoy's
	// downstream address). gRPC clients skip this source.
	// +optional
	SourceIP *SourceIPKey `json:"sourceIP,omitempty"`
	// queryParameter takes the key from a query parameter of the request's
	// path. gRPC clients skip this source.
	// +optional
	QueryParameter *QueryParameterKey `json:"queryParameter,omitempty"`
}

// HeaderKey takes a request's key from a header.
type HeaderKey struct {
	// name is the header's name, in lower case (HTTP/2 and gRPC metadata keys
	// are lower case). A name ending in -bin (binary gRPC metadata) is refused:
	// gRPC clients do not hash binary values.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^:?[a-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-bin')",message="a -bin header carries binary gRPC metadata, which gRPC clients do not hash"
	Name string `json:"name"`
	// rewrite puts the value in its canonical form before it is hashed, so
	// that equivalent values (a prefix, surrounding space) are one key.
	// +optional
	Rewrite *KeyRewrite `json:"rewrite,omitempty"`
}

// KeyRewrite replaces every match of a regular expression in a key's value.
// Envoy and gRPC clients apply it themselves (hash_policy regex_rewrite);
// what a regular expression cannot do, such as folding case, no client does.
type KeyRewrite struct {
	// pattern is an RE2 regular expression (the syntax Envoy and gRPC use),
	// at most 512 bytes and small enough for Envoy's default program size
	// limit (docs/affinity-keys.md).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Pattern string `json:"pattern"`
	// substitution replaces each match; \1 to \9 stand for the match's groups.
	// Empty removes the matches.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Substitution string `json:"substitution,omitempty"`
}

// CookieKey takes a request's key from a cookie.
// +kubebuilder:validation:XValidation:rule="!has(self.path) || has(self.ttl)",message="path is the path of the cookie Envoy generates, which needs ttl"
type CookieKey struct {
	// name is the cookie's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`
	// ttl, when set, has Envoy generate the cookie for a request that has
	// none, with this lifetime ("0s" makes it a session cookie), and key the
	// request by it; the client's next requests carry it. Without ttl, a
	// request without the cookie takes its key from the next source.
	// At most one year.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('8760h')",message="ttl must be between 0s and 8760h (one year)"
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// path is the Path attribute of the generated cookie; without it the
	// cookie has none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[^;\x00-\x1f\x7f]*$`
	Path string `json:"path,omitempty"`
}

// SourceIPKey takes a request's key from its source address. It has no
// fields: `sourceIP: {}`.
type SourceIPKey struct{}

// QueryParameterKey takes a request's key from a query parameter.
type QueryParameterKey struct {
	// name is the query parameter's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^&=#\s]+$`
	Name string `json:"name"`
}
