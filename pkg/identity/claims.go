package identity

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The node metadata keys CheckClaims binds: those Istio's proxies send, and
// Poise's own.
const (
	ClaimIstioNamespace      = "NAMESPACE"
	ClaimIstioServiceAccount = "SERVICE_ACCOUNT"
	ClaimNamespace           = "poise.dev/namespace"
	ClaimServiceAccount      = "poise.dev/service-account"
)

// CheckClaims refuses a node whose metadata claims a namespace or service
// account other than its identity's: the keys NAMESPACE and
// SERVICE_ACCOUNT (as Istio's proxies send them) and poise.dev/namespace
// and poise.dev/service-account. Each present key must be a string equal to
// the identity's (an empty or non-string value is a mismatch); an absent
// key claims nothing. An anonymous identity has nothing to bind. A refusal
// is an *Error of ReasonClaimMismatch (PermissionDenied).
func CheckClaims(id Identity, node *corev3.Node) error {
	if id.Anonymous() {
		return nil
	}
	fields := node.GetMetadata().GetFields()
	for _, c := range []struct{ key, what, proven string }{
		{ClaimIstioNamespace, "namespace", id.Namespace},
		{ClaimNamespace, "namespace", id.Namespace},
		{ClaimIstioServiceAccount, "service account", id.ServiceAccount},
		{ClaimServiceAccount, "service account", id.ServiceAccount},
	} {
		v, ok := fields[c.key]
		if !ok {
			continue
		}
		s, isString := v.GetKind().(*structpb.Value_StringValue)
		switch {
		case !isString:
			return refuse(ReasonClaimMismatch, fmt.Sprintf("node metadata %s is not a string; the %s proves %s %s", c.key, id.Method, c.what, quote(c.proven)))
		case s.StringValue != c.proven:
			return refuse(ReasonClaimMismatch, fmt.Sprintf("node metadata %s claims %s %s; the %s proves %s", c.key, c.what, quote(s.StringValue), id.Method, quote(c.proven)))
		}
	}
	return nil
}
