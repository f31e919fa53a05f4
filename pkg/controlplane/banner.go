package controlplane

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"poise.dev/poise/pkg/xds/server"
)

// writeBanner says where the control plane listens and what it serves: a
// few aligned lines, or with Config.BannerFormat "json" one JSON record.
func writeBanner(out io.Writer, cfg Config, td trustDomain, a Addrs) {
	if cfg.BannerFormat == "json" {
		attrs := []any{"version", cfg.Version, "instance", a.Instance, "xds", a.XDS,
			"transport", strings.Trim(tlsNote(cfg.TLS), " ()"), "authentication", strings.Join(cfg.authModes(), ","),
			"authenticationFrom", cfg.authFrom()}
		if td.from != "" {
			attrs = append(attrs, "trustDomain", td.name, "trustDomainFrom", td.from)
		}
		attrs = append(attrs, "admin", a.Admin)
		if a.Metrics != "" {
			attrs = append(attrs, "metrics", a.Metrics)
		}
		if cfg.Source == "kubernetes" {
			attrs = append(attrs, "source", "kubernetes", "namespace", cfg.Namespace)
		} else {
			attrs = append(attrs, "source", "files", "watching", cfg.Paths)
		}
		slog.New(slog.NewJSONHandler(out, nil)).Info("poise control plane", attrs...)
		return
	}
	fmt.Fprintf(out, "poise control plane %s (instance %s)\n", cfg.Version, a.Instance)
	fmt.Fprintf(out, "  xDS (ADS, SotW and Delta): %s%s, %s\n", a.XDS, tlsNote(cfg.TLS), cfg.authNote())
	if td.from != "" {
		fmt.Fprintf(out, "  client trust domain:       %s\n", td)
	}
	fmt.Fprintf(out, "  admin:                     http://%s (/readyz /metrics /debug/explain /debug/clients /map)\n", a.Admin)
	if a.Metrics != "" {
		fmt.Fprintf(out, "  metrics:                   http://%s (/healthz /readyz /metrics)\n", a.Metrics)
	}
	if cfg.Source == "kubernetes" {
		fmt.Fprintf(out, "  source:                    kubernetes (namespace %q)\n", cfg.Namespace)
	} else {
		fmt.Fprintf(out, "  watching:                  %v\n", cfg.Paths)
	}
}

func tlsNote(t *server.TLS) string {
	switch {
	case t == nil:
		return " (plaintext)"
	case t.ClientCAFile != "":
		return " (mTLS)"
	}
	return " (TLS)"
}

// String is the trust domain as the banner says it, with where it comes
// from.
func (td trustDomain) String() string {
	if td.name == "" {
		return td.from + " (no --xds-trust-domain, and --tls-cert has no SPIFFE ID)"
	}
	return td.name + " (from " + td.from + ")"
}
