package controlplane

import (
	"bytes"
	"crypto/x509"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/golden"
	"poise.dev/poise/test/testkit"
)

// jsonTime is the clock's reading in a JSON log record.
var jsonTime = regexp.MustCompile(`"time":"[^"]*"`)

// TestBannerSaysTheAuthentication: the banner names the authentication in
// force and why — a default, the client CA's default, or none asked for —
// and, with mtls, the client trust domain and where it comes from, as Run
// resolves it from the flags and the serving certificate. Each case's
// text and JSON banners are testdata/banner-CASE.golden (go test -update).
func TestBannerSaysTheAuthentication(t *testing.T) {
	t.Parallel()
	ca := testkit.NewCA(t, "poise test CA")
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir)
	serving := func(name string, uris ...string) *server.TLS {
		cert, key := testkit.WriteFiles(t, dir, name, ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour), uris...))
		return &server.TLS{CertFile: cert, KeyFile: key, ClientCAFile: caFile}
	}
	spiffe := serving("spiffe", "spiffe://cluster.local/ns/poise-system/sa/poise")
	plain := serving("plain")
	tlsOnly := &server.TLS{CertFile: plain.CertFile, KeyFile: plain.KeyFile}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"plaintext", Config{}},
		{"tls", Config{TLS: tlsOnly}},
		{"client-ca", Config{TLS: spiffe}},
		{"client-ca-no-spiffe-id", Config{TLS: plain}},
		{"client-ca-explicit-none", Config{TLS: spiffe, XDSAuth: []string{AuthNone}}},
		{"client-ca-explicit-mtls-trust-domain", Config{TLS: spiffe, XDSAuth: []string{AuthMTLS}, XDSTrustDomain: "example.org"}},
		{"client-ca-explicit-token", Config{TLS: spiffe, XDSAuth: []string{AuthToken}}},
		{"client-ca-explicit-mtls-token", Config{TLS: plain, XDSAuth: []string{AuthMTLS, AuthToken}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			td, err := tc.cfg.clientTrustDomain()
			if err != nil {
				t.Fatal(err)
			}
			a := Addrs{XDS: "127.0.0.1:18000", Admin: "127.0.0.1:19000", Instance: "i-1"}
			cfg := tc.cfg
			cfg.Version, cfg.Paths = "v1.2.3", []string{"examples"}
			var out bytes.Buffer
			writeBanner(&out, cfg, td, a)
			cfg.BannerFormat = "json"
			writeBanner(&out, cfg, td, a)
			golden.Check(t, "banner-"+tc.name, jsonTime.ReplaceAllString(out.String(), `"time":"TIME"`))
		})
	}
}

// TestTrustDomainRefusesAGuess: a serving certificate whose SPIFFE IDs are
// of two trust domains, one that cannot be read, or one of a malformed
// SPIFFE ID stops the start, naming --tls-cert and, where setting it is
// the way out, --xds-trust-domain; with --xds-trust-domain the certificate
// is not read.
func TestTrustDomainRefusesAGuess(t *testing.T) {
	t.Parallel()
	ca := testkit.NewCA(t, "poise test CA")
	dir := t.TempDir()
	cert, key := testkit.WriteFiles(t, dir, "two", ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour),
		"spiffe://a.example/poise", "spiffe://b.example/poise"))
	bad, _ := testkit.WriteFiles(t, dir, "bad", ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour), "spiffe://A.example/poise"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		certFile string
		want     []string
	}{
		{cert, []string{"--tls-cert " + cert, `two trust domains, "a.example" and "b.example"`, "set --xds-trust-domain"}},
		{bad, []string{"--tls-cert " + bad, "[a-z0-9._-]", "set --xds-trust-domain"}},
		{missing, []string{"--tls-cert: open " + missing}},
	} {
		cfg := Config{TLS: &server.TLS{CertFile: tc.certFile, KeyFile: key, ClientCAFile: "ca.pem"}}
		td, err := cfg.clientTrustDomain()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: trust domain %+v, error %v; want one saying %s", tc.certFile, td, err, w)
			}
		}
		cfg.XDSTrustDomain = "cluster.local"
		if td, err := cfg.clientTrustDomain(); err != nil || td != (trustDomain{name: "cluster.local", from: trustDomainFlag}) {
			t.Errorf("%s with --xds-trust-domain: %+v, %v", tc.certFile, td, err)
		}
	}
}
