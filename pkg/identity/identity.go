package identity

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Method is how an identity was proven.
type Method string

const (
	// MethodNone is an anonymous client: nothing was proven.
	MethodNone Method = "none"
	// MethodCertificate is a verified client certificate with a SPIFFE ID.
	MethodCertificate Method = "certificate"
	// MethodToken is a Kubernetes service-account token accepted by
	// TokenReview.
	MethodToken Method = "token"
)

// Identity is who a client is, as far as its credentials prove it.
type Identity struct {
	Method Method
	// SPIFFEID and TrustDomain come from a client certificate; a token
	// alone leaves them empty.
	SPIFFEID    string
	TrustDomain string
	// Namespace and ServiceAccount are set for every proven identity.
	Namespace      string
	ServiceAccount string
	// Instance tells workload instances apart where several share a
	// service account: "pod:UID" for a pod-bound token, "cert:HASH" for a
	// client certificate (a hash of the leaf), "sa:NS/SA" for a token bound
	// to no pod (all of them count as one instance). Empty when anonymous.
	Instance string
	// Pod and Node are set when a token names them.
	Pod  PodRef
	Node string
	// Locality is the node's region and zone labels, when known.
	Locality Locality
	// Expires is when the proof stops holding: the certificate chain's
	// first NotAfter, or the token's expiry capped by the verifier's
	// maximum lifetime. Zero for an anonymous identity.
	Expires time.Time
}

// PodRef names the pod a token is bound to.
type PodRef struct {
	Namespace, Name, UID string
}

// Locality is where a client runs, from its node's
// topology.kubernetes.io/region and topology.kubernetes.io/zone labels.
type Locality struct {
	Region, Zone string
}

// Known reports whether any of the locality is known.
func (l Locality) Known() bool { return l.Region != "" || l.Zone != "" }

// Anonymous reports whether nothing was proven.
func (id Identity) Anonymous() bool { return id.Method == "" || id.Method == MethodNone }

// Principal is "NAMESPACE/SERVICE-ACCOUNT", or "" when anonymous: the
// unit a grant or a per-identity limit names.
func (id Identity) Principal() string {
	if id.Anonymous() {
		return ""
	}
	return id.Namespace + "/" + id.ServiceAccount
}

// maxStringLen bounds String, so an identity always fits a log line.
const maxStringLen = 512

// String describes the identity for logs in at most 512 bytes; it never
// contains a credential.
func (id Identity) String() string {
	if id.Anonymous() {
		return "none"
	}
	var b strings.Builder
	b.WriteString(string(id.Method))
	field := func(k, v string) {
		if v != "" {
			b.WriteString(" " + k + "=" + clip(v, 96))
		}
	}
	field("id", id.SPIFFEID)
	field("ns", id.Namespace)
	field("sa", id.ServiceAccount)
	if id.Pod.Name != "" {
		field("pod", id.Pod.Namespace+"/"+id.Pod.Name)
	}
	field("instance", id.Instance)
	field("node", id.Node)
	if id.Locality.Known() {
		field("locality", id.Locality.Region+"/"+id.Locality.Zone)
	}
	if !id.Expires.IsZero() {
		field("expires", id.Expires.UTC().Format(time.RFC3339))
	}
	return clip(b.String(), maxStringLen)
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
