package identity

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// SPIFFEID is a Kubernetes workload's SPIFFE ID,
// spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICE-ACCOUNT, the form Istio and
// gRPC's mTLS SPIFFE support give workload certificates.
type SPIFFEID struct {
	TrustDomain, Namespace, ServiceAccount string
}

func (id SPIFFEID) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// maxSPIFFEIDLen is the SPIFFE specification's bound on a SPIFFE ID.
const maxSPIFFEIDLen = 2048

// ParseSPIFFEID parses a SPIFFE ID of the Kubernetes form strictly: a
// lowercase scheme, a trust domain of [a-z0-9._-] with no port or user, and
// exactly the path /ns/NAMESPACE/sa/SERVICE-ACCOUNT with a namespace and a
// service account that are valid Kubernetes names; no query, fragment or
// percent-encoding.
func ParseSPIFFEID(s string) (SPIFFEID, error) {
	td, path, err := splitSPIFFEID(s)
	if err != nil {
		return SPIFFEID{}, err
	}
	seg := strings.Split(path, "/")
	if len(seg) != 4 || seg[0] != "ns" || seg[2] != "sa" {
		return SPIFFEID{}, errors.New("path is not /ns/NAMESPACE/sa/SERVICE-ACCOUNT")
	}
	if errs := validation.IsDNS1123Label(seg[1]); len(errs) > 0 {
		return SPIFFEID{}, fmt.Errorf("namespace %s: %s", quote(seg[1]), errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(seg[3]); len(errs) > 0 {
		return SPIFFEID{}, fmt.Errorf("service account %s: %s", quote(seg[3]), errs[0])
	}
	return SPIFFEID{TrustDomain: td, Namespace: seg[1], ServiceAccount: seg[3]}, nil
}

// splitSPIFFEID is a SPIFFE ID's trust domain, checked, and its path
// after the slash, not checked.
func splitSPIFFEID(s string) (td, path string, err error) {
	if len(s) > maxSPIFFEIDLen {
		return "", "", fmt.Errorf("longer than %d bytes", maxSPIFFEIDLen)
	}
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return "", "", errors.New(`does not start with "spiffe://"`)
	}
	td, path, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", errors.New("has no path")
	}
	if err := CheckTrustDomain(td); err != nil {
		return "", "", err
	}
	return td, path, nil
}

// CheckTrustDomain reports why td is not a trust domain ParseSPIFFEID
// accepts: 1 to 255 bytes of [a-z0-9._-], with no scheme, port or path.
func CheckTrustDomain(td string) error {
	if td == "" {
		return errors.New("trust domain is empty")
	}
	if len(td) > 255 {
		return errors.New("trust domain is longer than 255 bytes")
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("trust domain %s has a character other than [a-z0-9._-]", quote(td))
		}
	}
	return nil
}

// fromCertificate is the identity a verified chain proves: its leaf must
// carry exactly one spiffe URI SAN, of the allowed trust domain when one is
// set, and every certificate of the chain must be valid at now.
func fromCertificate(chain []*x509.Certificate, trustDomain string, now time.Time) (Identity, error) {
	leaf := chain[0]
	uris := spiffeURIs(leaf)
	switch len(uris) {
	case 0:
		return Identity{}, refuse(ReasonNoSPIFFEID, "the client certificate has no spiffe:// URI SAN")
	case 1:
	default:
		return Identity{}, refuse(ReasonSeveralSPIFFEIDs, fmt.Sprintf("the client certificate has %d spiffe:// URI SANs, not one", len(uris)))
	}
	sid, err := ParseSPIFFEID(uris[0])
	if err != nil {
		return Identity{}, &Error{Reason: ReasonBadSPIFFEID, Detail: fmt.Sprintf("SPIFFE ID %s: %v", quote(uris[0]), err)}
	}
	if trustDomain != "" && sid.TrustDomain != trustDomain {
		return Identity{}, refuse(ReasonUntrustedDomain, fmt.Sprintf("SPIFFE ID %s is not of trust domain %s", quote(uris[0]), quote(trustDomain)))
	}
	expires := leaf.NotAfter
	for _, c := range chain {
		if now.Before(c.NotBefore) {
			return Identity{}, refuse(ReasonExpired, fmt.Sprintf("certificate %s is not valid before %s", quote(c.Subject.CommonName), c.NotBefore.UTC().Format(time.RFC3339)))
		}
		if now.After(c.NotAfter) {
			return Identity{}, refuse(ReasonExpired, fmt.Sprintf("certificate %s expired at %s", quote(c.Subject.CommonName), c.NotAfter.UTC().Format(time.RFC3339)))
		}
		if c.NotAfter.Before(expires) {
			expires = c.NotAfter
		}
	}
	sum := sha256.Sum256(leaf.Raw)
	return Identity{
		Method:         MethodCertificate,
		SPIFFEID:       sid.String(),
		TrustDomain:    sid.TrustDomain,
		Namespace:      sid.Namespace,
		ServiceAccount: sid.ServiceAccount,
		Instance:       "cert:" + hex.EncodeToString(sum[:16]),
		Expires:        expires,
	}, nil
}

// spiffeURIs are the URI SANs of cert of the spiffe scheme, in any case,
// so that a malformed one is refused rather than passed over.
func spiffeURIs(cert *x509.Certificate) []string {
	var out []string
	for _, u := range cert.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			out = append(out, u.String())
		}
	}
	return out
}

// TrustDomainOf is the trust domain of cert's SPIFFE IDs, "" when it has
// none. Their paths are not read: a server's own SPIFFE ID need not have
// a workload's /ns/NS/sa/SA form. SPIFFE IDs of two trust domains, or one
// that is malformed, are an error: the domain cert is of would be a guess.
func TrustDomainOf(cert *x509.Certificate) (string, error) {
	var td string
	for _, u := range spiffeURIs(cert) {
		d, _, err := splitSPIFFEID(u)
		if err != nil {
			return "", fmt.Errorf("SPIFFE ID %s: %w", quote(u), err)
		}
		if td != "" && d != td {
			return "", fmt.Errorf("SPIFFE IDs of two trust domains, %s and %s", quote(td), quote(d))
		}
		td = d
	}
	return td, nil
}
