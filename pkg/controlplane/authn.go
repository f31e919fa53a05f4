package controlplane

import (
	"fmt"
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

// authModes is Config.XDSAuth with its zero read as none.
func (c Config) authModes() []string {
	if len(c.XDSAuth) == 0 {
		return []string{AuthNone}
	}
	return c.XDSAuth
}

func (c Config) authenticates(mode string) bool { return slices.Contains(c.authModes(), mode) }

// anonymous reports whether xDS clients are served without authentication.
func (c Config) anonymous() bool { return c.authenticates(AuthNone) }

// validateAuth is Validate's part for the xDS authentication flags.
func (c Config) validateAuth() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	modes := c.authModes()
	for i, m := range modes {
		switch {
		case m != AuthNone && m != AuthMTLS && m != AuthToken:
			add("--xds-auth %q: want none, mtls, token, or mtls,token", strings.Join(modes, ","))
			return errs
		case slices.Index(modes, m) != i || m == AuthNone && len(modes) > 1:
			add("--xds-auth %q: none stands alone, and each of mtls and token once", strings.Join(modes, ","))
			return errs
		}
	}
	if c.authenticates(AuthMTLS) && (c.TLS == nil || c.TLS.CertFile == "" || c.TLS.KeyFile == "" || c.TLS.ClientCAFile == "") {
		add("--xds-auth=mtls needs --tls-cert, --tls-key and --tls-client-ca: the client certificates it reads are those the TLS handshake verifies")
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

// authNote is the xDS authentication of the banner.
func (c Config) authNote() string {
	if c.anonymous() {
		return "authentication: none"
	}
	note := "authentication: " + strings.Join(c.authModes(), ",")
	if c.authenticates(AuthToken) {
		note += fmt.Sprintf(" (audience %q, reviewed every %v)", c.tokenAudience(), c.tokenReviewInterval())
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
func newAuthenticator(cfg Config, rc *rest.Config, p *parts) (*identity.Authenticator, error) {
	if cfg.anonymous() {
		return nil, nil
	}
	o := identity.Options{TrustDomain: cfg.XDSTrustDomain}
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

// refusalReasons are the label values of poise_xds_refused_total.
func refusalReasons() []string {
	var out []string
	for _, r := range identity.Reasons() {
		out = append(out, string(r))
	}
	return out
}
