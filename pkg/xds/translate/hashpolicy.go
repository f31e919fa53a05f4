package translate

import (
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/topology"
)

// hashPolicies is the route's hash_policy for spec.requestAffinity, one
// policy per key source in order, each terminal: the first source a
// request carries gives its hash, as the API says, in Envoy and in the
// gRPC clients alike (both stop at a terminal policy that produced a hash).
// gRPC clients use the header policies only and skip the others (gRFC
// A42). nil without request affinity, so the route is what it was.
func hashPolicies(ra *topology.RequestAffinity) []*route.RouteAction_HashPolicy {
	if ra == nil {
		return nil
	}
	out := make([]*route.RouteAction_HashPolicy, 0, len(ra.Keys))
	for _, k := range ra.Keys {
		hp := &route.RouteAction_HashPolicy{Terminal: true}
		switch k.Source {
		case topology.KeyHeader:
			h := &route.RouteAction_HashPolicy_Header{HeaderName: k.Name}
			if k.RewritePattern != "" {
				h.RegexRewrite = &matcher.RegexMatchAndSubstitute{
					Pattern:      &matcher.RegexMatcher{Regex: k.RewritePattern},
					Substitution: k.RewriteSubstitution,
				}
			}
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{Header: h}
		case topology.KeyCookie:
			c := &route.RouteAction_HashPolicy_Cookie{Name: k.Name, Path: k.CookiePath}
			if k.CookieGenerate {
				c.Ttl = durationpb.New(k.CookieTTL)
			}
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: c}
		case topology.KeySourceIP:
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{
				ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
		case topology.KeyQueryParameter:
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{
				QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: k.Name}}
		}
		out = append(out, hp)
	}
	return out
}
