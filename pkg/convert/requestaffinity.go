package convert

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// MaxRewriteProgram is the most instructions a key rewrite's pattern may
// compile to (Go's RE2 compiler): Envoy refuses a route whose regular
// expression's RE2 program is larger than 100 by default, and the two
// compilers' counts are close but not equal, so Poise stays below.
const MaxRewriteProgram = 80

var (
	headerKeyName = regexp.MustCompile(`^:?[a-z0-9!#$%&'*+.^_|~-]+$`)
	cookieKeyName = regexp.MustCompile(`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`)
	cookieKeyPath = regexp.MustCompile(`^/[^;\x00-\x1f\x7f]*$`)
	queryKeyName  = regexp.MustCompile(`^[^&=#\s]+$`)
)

// requestAffinity validates spec.requestAffinity as its CRD schema and CEL
// rules do, and the rewrite patterns as the clients will compile them, and
// converts it; nil is none.
func requestAffinity(errs field.ErrorList, p *field.Path, s *v1alpha1.UpstreamSpec) (*topology.RequestAffinity, field.ErrorList) {
	ra := s.RequestAffinity
	if ra == nil {
		return nil, errs
	}
	if s.LoadBalancing != v1alpha1.LoadBalancingRingHash && s.LoadBalancing != v1alpha1.LoadBalancingMaglev {
		errs = append(errs, field.Invalid(p, "loadBalancing "+string(s.LoadBalancing), "requestAffinity needs loadBalancing RingHash or Maglev: the key is hashed onto their ring or table"))
	}
	kp := p.Child("keys")
	switch {
	case len(ra.Keys) == 0:
		errs = append(errs, field.Required(kp, "at least one key source"))
	case len(ra.Keys) > v1alpha1.MaxRequestKeys:
		errs = append(errs, field.TooMany(kp, len(ra.Keys), v1alpha1.MaxRequestKeys))
		return nil, errs
	}
	out := &topology.RequestAffinity{Keys: make([]topology.RequestKey, 0, len(ra.Keys))}
	for i, k := range ra.Keys {
		ip := kp.Index(i)
		n := 0
		for _, set := range []bool{k.Header != nil, k.Cookie != nil, k.SourceIP != nil, k.QueryParameter != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, field.Invalid(ip, n, "a key source names exactly one of header, cookie, sourceIP and queryParameter"))
			continue
		}
		var rk topology.RequestKey
		switch {
		case k.Header != nil:
			rk.Source, rk.Name = topology.KeyHeader, k.Header.Name
			errs = keyName(errs, ip.Child("header", "name"), k.Header.Name, headerKeyName, "a lower-case header name")
			if strings.HasSuffix(k.Header.Name, "-bin") {
				errs = append(errs, field.Invalid(ip.Child("header", "name"), k.Header.Name, "a -bin header carries binary gRPC metadata, which gRPC clients do not hash"))
			}
			if rw := k.Header.Rewrite; rw != nil {
				rk.RewritePattern, rk.RewriteSubstitution = rw.Pattern, rw.Substitution
				errs = keyRewrite(errs, ip.Child("header", "rewrite"), rw)
			}
		case k.Cookie != nil:
			c := k.Cookie
			rk.Source, rk.Name = topology.KeyCookie, c.Name
			errs = keyName(errs, ip.Child("cookie", "name"), c.Name, cookieKeyName, "a cookie name (an RFC 6265 token)")
			if c.TTL != nil {
				rk.CookieGenerate, rk.CookieTTL = true, c.TTL.Duration
				if d := c.TTL.Duration; d < 0 || d > v1alpha1.MaxCookieTTL*time.Second {
					errs = append(errs, field.Invalid(ip.Child("cookie", "ttl"), d.String(), "ttl must be between 0s and 8760h (one year)"))
				}
			}
			if c.Path != "" {
				rk.CookiePath = c.Path
				switch {
				case len(c.Path) > v1alpha1.MaxCookiePath:
					errs = append(errs, field.TooLong(ip.Child("cookie", "path"), c.Path, v1alpha1.MaxCookiePath))
				case !cookieKeyPath.MatchString(c.Path):
					errs = append(errs, field.Invalid(ip.Child("cookie", "path"), c.Path, "a path that starts with / and has no ; or control character"))
				}
				if c.TTL == nil {
					errs = append(errs, field.Invalid(ip.Child("cookie"), c.Path, "path is the path of the cookie Envoy generates, which needs ttl"))
				}
			}
		case k.SourceIP != nil:
			rk.Source = topology.KeySourceIP
		default:
			rk.Source, rk.Name = topology.KeyQueryParameter, k.QueryParameter.Name
			errs = keyName(errs, ip.Child("queryParameter", "name"), k.QueryParameter.Name, queryKeyName, "a query parameter name without &, =, # or space")
		}
		out.Keys = append(out.Keys, rk)
	}
	return out, errs
}

func keyName(errs field.ErrorList, p *field.Path, name string, re *regexp.Regexp, what string) field.ErrorList {
	switch {
	case name == "":
		return append(errs, field.Required(p, what))
	case len(name) > v1alpha1.MaxRequestKeyName:
		return append(errs, field.TooLong(p, name, v1alpha1.MaxRequestKeyName))
	case !re.MatchString(name):
		return append(errs, field.Invalid(p, name, "must be "+what))
	}
	return errs
}

// keyRewrite checks a rewrite the way both kinds of client will read it:
// the pattern must compile as RE2 within Envoy's program size, and the
// substitution must be literal, because Envoy expands \1 where grpc-go
// (Go's regexp) expands $1, so a reference to a group would give the two
// clients different keys.
func keyRewrite(errs field.ErrorList, p *field.Path, rw *v1alpha1.KeyRewrite) field.ErrorList {
	switch {
	case rw.Pattern == "":
		errs = append(errs, field.Required(p.Child("pattern"), "an RE2 regular expression"))
	case len(rw.Pattern) > v1alpha1.MaxKeyRewritePattern:
		errs = append(errs, field.TooLong(p.Child("pattern"), rw.Pattern, v1alpha1.MaxKeyRewritePattern))
	default:
		re, err := regexp.Compile(rw.Pattern)
		size := 0
		if err == nil {
			size, err = rewriteProgram(rw.Pattern)
		}
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("pattern"), rw.Pattern, "not an RE2 regular expression: "+err.Error()))
		} else if re.MatchString("") {
			errs = append(errs, field.Invalid(p.Child("pattern"), rw.Pattern,
				"matches the empty string, so it would rewrite between characters, where the clients' regular expression libraries differ"))
		} else if size > MaxRewriteProgram {
			errs = append(errs, field.Invalid(p.Child("pattern"), rw.Pattern,
				fmt.Sprintf("compiles to %d instructions, above %d: Envoy refuses a route whose regular expression is this large", size, MaxRewriteProgram)))
		}
	}
	switch {
	case len(rw.Substitution) > v1alpha1.MaxKeyRewritePattern:
		errs = append(errs, field.TooLong(p.Child("substitution"), rw.Substitution, v1alpha1.MaxKeyRewritePattern))
	case strings.ContainsAny(rw.Substitution, `\$`):
		errs = append(errs, field.Invalid(p.Child("substitution"), rw.Substitution,
			`must be literal (no \ or $): Envoy and gRPC clients expand references to groups differently`))
	}
	return errs
}

// rewriteProgram compiles pattern as RE2 (Perl classes, no backreferences:
// what Envoy's RE2 and Go's regexp both accept) and returns the size of its
// program.
func rewriteProgram(pattern string) (int, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}
