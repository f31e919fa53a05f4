package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"poise.dev/poise/pkg/identity"
)

// The xDS authentication modes (Config.XDSAuth).
const (
	AuthNone  = "none"
	AuthMTLS  = "mtls"
	AuthToken = "token"
)

// authModes is the authentication in force, decided here alone: XDSAuth
// as given, or, unset, mtls where a client CA is given and none elsewhere;
// and with a client CA, token is mtls,token. Whoever gives a client CA
// means its certificates to identify their clients: read as anonymous, one
// certificate could claim any demand weight and report load under as many
// node IDs as it opens streams. With a token the identity authenticator
// has always read a verified certificate too (a client may present either,
// or both naming one service account), so token with a client CA is said,
// and checked, as what it does.
func (c Config) authModes() []string {
	switch {
	case len(c.XDSAuth) == 0 && c.clientCA():
		return []string{AuthMTLS}
	case len(c.XDSAuth) == 0:
		return []string{AuthNone}
	case c.clientCA() && slices.Equal(c.XDSAuth, []string{AuthToken}):
		return []string{AuthMTLS, AuthToken}
	}
	return c.XDSAuth
}

// authFrom is why authModes are in force, as the banner says it.
func (c Config) authFrom() string {
	switch {
	case len(c.XDSAuth) == 0 && c.clientCA():
		return "default with --tls-client-ca"
	case len(c.XDSAuth) == 0:
		return "default"
	case !slices.Equal(c.authModes(), c.XDSAuth):
		return "--xds-auth=" + strings.Join(c.XDSAuth, ",") + " with --tls-client-ca"
	}
	return "explicit"
}

func (c Config) clientCA() bool { return c.TLS != nil && c.TLS.ClientCAFile != "" }

func (c Config) authenticates(mode string) bool { return slices.Contains(c.authModes(), mode) }

// anonymous reports whether xDS clients are served without authentication.
func (c Config) anonymous() bool { return c.authenticates(AuthNone) }

// validateAuth is Validate's part for the xDS authentication flags.
func (c Config) validateAuth() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.XDSAuth != nil && len(c.XDSAuth) == 0 {
		add(`--xds-auth "": want none, mtls, token, or mtls,token; leave it out for the default (mtls with --tls-client-ca, else none)`)
		return errs
	}
	given := c.XDSAuth
	for i, m := range given {
		switch {
		case m != AuthNone && m != AuthMTLS && m != AuthToken:
			add("--xds-auth %q: want none, mtls, token, or mtls,token", strings.Join(given, ","))
			return errs
		case slices.Index(given, m) != i || m == AuthNone && len(given) > 1:
			add("--xds-auth %q: none stands alone, and each of mtls and token once", strings.Join(given, ","))
			return errs
		}
	}
	files := c.TLS != nil && c.TLS.CertFile != "" && c.TLS.KeyFile != "" && c.TLS.ClientCAFile != ""
	switch {
	case !c.authenticates(AuthMTLS) || files:
	case !slices.Contains(given, AuthMTLS):
		add("--tls-client-ca needs --tls-cert and --tls-key: client certificates are verified in the TLS handshake, and identify their clients")
	default:
		add("--xds-auth=mtls needs --tls-cert, --tls-key and --tls-client-ca: the client certificates it reads are those the TLS handshake verifies")
	}
	if td := c.XDSTrustDomain; td != "" {
		if err := identity.CheckTrustDomain(td); err != nil {
			add("--xds-trust-domain %q: want a trust domain alone, as TRUST-DOMAIN in spiffe://TRUST-DOMAIN/ns/NS/sa/SA: %v", td, err)
		}
	}
	if c.authenticates(AuthToken) && c.XDSTokenAudience == "" {
		add("--xds-token-audience must not be empty with --xds-auth=token")
	}
	if c.XDSTokenReviewInterval < minTokenReviewInterval || c.XDSTokenReviewInterval > maxTokenReviewInterval {
		add("--xds-token-review-interval %v: want %v to %v", c.XDSTokenReviewInterval, minTokenReviewInterval, maxTokenReviewInterval)
	}
	if err := c.checkAnonymous(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkAnonymous refuses to serve xDS without authentication on an address
// that is not loopback unless the configuration says so explicitly.
func (c Config) checkAnonymous() error {
	if !c.anonymous() || c.XDSAllowAnonymousNonLoopback || identity.IsLoopback(c.XDSAddress) {
		return nil
	}
	return fmt.Errorf("--xds-auth=none on --xds-address %s, which is not a loopback address: any process that reaches it could read and steer the fleet's config; "+
		"set --xds-auth=mtls or token, or pass --xds-allow-anonymous-non-loopback to serve it so on purpose", c.XDSAddress)
}

// authNote is the xDS authentication of the banner, and why it is in
// force where the flags alone do not say: a default, or no authentication
// asked for.
func (c Config) authNote() string {
	var why []string
	if from := c.authFrom(); from != "explicit" || c.anonymous() {
		why = append(why, from)
	}
	if c.authenticates(AuthToken) {
		why = append(why, fmt.Sprintf("audience %q, reviewed every %v", c.tokenAudience(), c.tokenReviewInterval()))
	}
	note := "authentication: " + strings.Join(c.authModes(), ",")
	if len(why) > 0 {
		note += " (" + strings.Join(why, "; ") + ")"
	}
	return note
}

func (c Config) tokenReviewInterval() time.Duration {
	if c.XDSTokenReviewInterval == 0 {
		return identity.DefaultReviewInterval
	}
	return c.XDSTokenReviewInterval
}

func (c Config) tokenAudience() string {
	if c.XDSTokenAudience == "" {
		return identity.DefaultAudience
	}
	return c.XDSTokenAudience
}

// newAuthenticator is the xDS server's authenticator for the configuration
// (nil with none); token authentication reviews tokens with rc, the
// replica's client configuration in Kubernetes mode, else the one the
// kubeconfig flags find.
func newAuthenticator(cfg Config, td trustDomain, rc *rest.Config, p *parts) (*identity.Authenticator, error) {
	if cfg.anonymous() {
		return nil, nil
	}
	o := identity.Options{TrustDomain: td.name}
	if cfg.authenticates(AuthToken) {
		if rc == nil {
			kc, err := loadKubeClient(cfg.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("--xds-auth=token reviews tokens with the apiserver: %w", err)
			}
			p.log.Info("kubernetes client configuration for TokenReview", "from", kc.from, "server", kc.config.Host)
			rc = kc.config
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("--xds-auth=token: kubernetes client: %w", err)
		}
		o.Tokens = identity.NewTokenVerifier(identity.NewKube(cs), identity.TokenOptions{Audiences: []string{cfg.tokenAudience()},
			ReviewInterval: cfg.tokenReviewInterval()})
	}
	return identity.New(o), nil
}

// trustDomain is the SPIFFE trust domain a client certificate must be of
// ("" any the client CA signs) and where it comes from.
type trustDomain struct{ name, from string }

// Where a trustDomain comes from.
const (
	trustDomainFlag        = "--xds-trust-domain"
	trustDomainServingCert = "the SPIFFE ID of --tls-cert"
	trustDomainAny         = "any the client CA signs"
)

// clientTrustDomain is the trust domain in force with mtls, decided once
// at start: --xds-trust-domain, else that of the plane's own serving
// certificate's SPIFFE ID, else none. A CA that signs the plane's and its
// clients' certificates may sign other trust domains' workloads too, whose
// namespaces are not this cluster's: spiffe://evil.example/ns/tenant-b/sa/x
// must not be tenant-b. A serving certificate read again later (the TLS
// files are followed) does not move it: clients moving to another trust
// domain is a migration, which a restart makes deliberate.
func (c Config) clientTrustDomain() (trustDomain, error) {
	switch {
	case !c.authenticates(AuthMTLS) || c.TLS == nil:
		return trustDomain{}, nil
	case c.XDSTrustDomain != "":
		return trustDomain{name: c.XDSTrustDomain, from: trustDomainFlag}, nil
	}
	cert, err := readCertificate(c.TLS.CertFile)
	if err != nil {
		return trustDomain{}, fmt.Errorf("--tls-cert: %w", err)
	}
	td, err := identity.TrustDomainOf(cert)
	switch {
	case err != nil:
		return trustDomain{}, fmt.Errorf("--tls-cert %s: %w: set --xds-trust-domain to say which trust domain client certificates must be of", c.TLS.CertFile, err)
	case td == "":
		return trustDomain{from: trustDomainAny}, nil
	}
	return trustDomain{name: td, from: trustDomainServingCert}, nil
}

// readCertificate is the first certificate of a PEM file: the leaf, as
// crypto/tls reads a certificate chain.
func readCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return nil, fmt.Errorf("%s holds no PEM certificate", path)
		}
		if b.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return cert, nil
		}
	}
}

// refusalReasons are the label values of poise_xds_refused_total.
func refusalReasons() []string {
	var out []string
	for _, r := range identity.Reasons() {
		out = append(out, string(r))
	}
	return out
}
