package identity_test

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/identity"
)

// TestTrustDomainOf: the trust domain a serving certificate's SPIFFE IDs
// share, whatever their paths; none without a SPIFFE ID; an error, never
// a guess, for two trust domains or a malformed one.
func TestTrustDomainOf(t *testing.T) {
	t.Parallel()
	authority := newCA(t, "poise test CA")
	for _, tc := range []struct {
		name  string
		uris  []string
		want  string
		error string // a part of the error; "" for none
	}{
		{name: "none"},
		{name: "not spiffe", uris: []string{"https://poise.example/x"}},
		{name: "workload form", uris: []string{"spiffe://cluster.local/ns/poise-system/sa/poise"}, want: "cluster.local"},
		{name: "another path", uris: []string{"spiffe://prod.example.org/poise/controlplane"}, want: "prod.example.org"},
		{name: "two of one domain", uris: []string{"spiffe://td/a", "spiffe://td/ns/x/sa/y"}, want: "td"},
		{name: "two domains", uris: []string{"spiffe://a.example/x", "spiffe://b.example/x"}, error: `two trust domains, "a.example" and "b.example"`},
		{name: "upper case", uris: []string{"spiffe://Cluster.Local/x"}, error: "has a character other than [a-z0-9._-]"},
		{name: "no path", uris: []string{"spiffe://cluster.local"}, error: "has no path"},
		// crypto/x509 parses the scheme lowercase, as it does a client's
		{name: "scheme in another case", uris: []string{"SPIFFE://cluster.local/x"}, want: "cluster.local"},
		{name: "port", uris: []string{"spiffe://cluster.local:8443/x"}, error: "has a character other than [a-z0-9._-]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := authority.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour), tc.uris...)
			got, err := identity.TrustDomainOf(cert.Leaf)
			switch {
			case tc.error == "" && (err != nil || got != tc.want):
				t.Errorf("TrustDomainOf(%v) = %q, %v; want %q", tc.uris, got, err, tc.want)
			case tc.error != "" && (err == nil || !strings.Contains(err.Error(), tc.error) || got != ""):
				t.Errorf("TrustDomainOf(%v) = %q, %v; want an error saying %s", tc.uris, got, err, tc.error)
			}
		})
	}
}
