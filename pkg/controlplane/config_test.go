package controlplane_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/xds/server"
)

// complete is a Config as serve fills it from its flags' defaults.
func complete() controlplane.Config {
	return controlplane.Config{
		Source: "files", Paths: []string{"examples"},
		Debounce: 200 * time.Millisecond, Settle: time.Second, DrainPeriod: 5 * time.Second,
		MaxStreams: 10000, MaxStreamsPerConnection: 100, MaxStreamsPerInstance: 0, KubeQPS: 1000, KubeBurst: 2000,
		RemoteStaleAfter: time.Minute, ClusterName: "home", MaxClientClasses: 64,
		LoadReportMaxCells: 1 << 20, HealthCheckConcurrency: 64, HealthCheckMaxEndpoints: 10000,
		LoadReportMaxRequests: 30_000_000,
		LoadReportBucket:      10 * time.Second, MetricsMaxUpstreams: 1000, StatusWriters: 16, StatusShare: 0.8,
		XDSAddress: "127.0.0.1:18000", XDSTokenAudience: "poise", XDSTokenReviewInterval: time.Hour,
	}
}

// TestValidateBounds: each field at the ends of its range is accepted,
// and one step beyond is refused with a problem naming its flag.
func TestValidateBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   func(*controlplane.Config)
		bad  func(*controlplane.Config)
		flag string
	}{
		{"debounce low", func(c *controlplane.Config) { c.Debounce = 0 }, func(c *controlplane.Config) { c.Debounce = -1 }, "--debounce"},
		{"debounce high", func(c *controlplane.Config) { c.Debounce = time.Minute }, func(c *controlplane.Config) { c.Debounce = time.Minute + 1 }, "--debounce"},
		{"debounce-max", func(c *controlplane.Config) { c.DebounceMax = c.Debounce }, func(c *controlplane.Config) { c.DebounceMax = c.Debounce - 1 }, "--debounce-max"},
		{"debounce-max negative", func(c *controlplane.Config) { c.DebounceMax = 0 }, func(c *controlplane.Config) { c.DebounceMax = -1 }, "--debounce-max"},
		{"debounce-max high", func(c *controlplane.Config) { c.DebounceMax = 10 * time.Minute },
			func(c *controlplane.Config) { c.DebounceMax = 10*time.Minute + 1 }, "--debounce-max"},
		{"settle low", func(c *controlplane.Config) { c.Settle = 0 }, func(c *controlplane.Config) { c.Settle = -1 }, "--settle"},
		{"settle high", func(c *controlplane.Config) { c.Settle = 10 * time.Minute }, func(c *controlplane.Config) { c.Settle = 10*time.Minute + 1 }, "--settle"},
		{"drain-period low", func(c *controlplane.Config) { c.DrainPeriod = 0 }, func(c *controlplane.Config) { c.DrainPeriod = -1 }, "--drain-period"},
		{"drain-period high", func(c *controlplane.Config) { c.DrainPeriod = 10 * time.Minute },
			func(c *controlplane.Config) { c.DrainPeriod = 10*time.Minute + 1 }, "--drain-period"},
		{"xds-max-streams low", func(c *controlplane.Config) { c.MaxStreams = 1 }, func(c *controlplane.Config) { c.MaxStreams = 0 }, "--xds-max-streams"},
		{"xds-max-streams high", func(c *controlplane.Config) { c.MaxStreams = 1_000_000 }, func(c *controlplane.Config) { c.MaxStreams = 1_000_001 }, "--xds-max-streams"},
		{"xds-max-streams-per-connection low", func(c *controlplane.Config) { c.MaxStreamsPerConnection = 1 },
			func(c *controlplane.Config) { c.MaxStreamsPerConnection = 0 }, "--xds-max-streams-per-connection"},
		{"xds-max-streams-per-connection high", func(c *controlplane.Config) { c.MaxStreamsPerConnection = 10_000 },
			func(c *controlplane.Config) { c.MaxStreamsPerConnection = 10_001 }, "--xds-max-streams-per-connection"},
		{"xds-max-streams-per-instance low", func(c *controlplane.Config) { c.MaxStreamsPerInstance = 0 },
			func(c *controlplane.Config) { c.MaxStreamsPerInstance = -1 }, "--xds-max-streams-per-instance"},
		{"xds-max-streams-per-instance high", func(c *controlplane.Config) { c.MaxStreamsPerInstance = 10_000 },
			func(c *controlplane.Config) { c.MaxStreamsPerInstance = 10_001 }, "--xds-max-streams-per-instance"},
		{"kube-api-qps low", func(c *controlplane.Config) { c.KubeQPS = 0.001 }, func(c *controlplane.Config) { c.KubeQPS = 0 }, "--kube-api-qps"},
		{"kube-api-qps high", func(c *controlplane.Config) { c.KubeQPS = 100_000 }, func(c *controlplane.Config) { c.KubeQPS = 100_000.5 }, "--kube-api-qps"},
		{"kube-api-burst low", func(c *controlplane.Config) { c.KubeBurst = 1 }, func(c *controlplane.Config) { c.KubeBurst = 0 }, "--kube-api-burst"},
		{"kube-api-burst high", func(c *controlplane.Config) { c.KubeBurst = 100_000 }, func(c *controlplane.Config) { c.KubeBurst = 100_001 }, "--kube-api-burst"},
		{"remote-stale-after low", func(c *controlplane.Config) { c.RemoteStaleAfter = 5 * time.Second },
			func(c *controlplane.Config) { c.RemoteStaleAfter = 5*time.Second - 1 }, "--remote-stale-after"},
		{"remote-stale-after high", func(c *controlplane.Config) { c.RemoteStaleAfter = time.Hour },
			func(c *controlplane.Config) { c.RemoteStaleAfter = time.Hour + 1 }, "--remote-stale-after"},
		{"cluster-name", func(c *controlplane.Config) { c.ClusterName = strings.Repeat("a", 63) },
			func(c *controlplane.Config) { c.ClusterName = strings.Repeat("a", 64) }, "--cluster-name"},
		{"max-client-classes low", func(c *controlplane.Config) { c.MaxClientClasses = 1 }, func(c *controlplane.Config) { c.MaxClientClasses = 0 }, "--max-client-classes"},
		{"max-client-classes high", func(c *controlplane.Config) { c.MaxClientClasses = 4096 }, func(c *controlplane.Config) { c.MaxClientClasses = 4097 }, "--max-client-classes"},
		{"load-report-max-cells low", func(c *controlplane.Config) { c.LoadReportMaxCells = 1 }, func(c *controlplane.Config) { c.LoadReportMaxCells = 0 }, "--load-report-max-cells"},
		{"load-report-max-cells high", func(c *controlplane.Config) { c.LoadReportMaxCells = 100_000_000 },
			func(c *controlplane.Config) { c.LoadReportMaxCells = 100_000_001 }, "--load-report-max-cells"},
		{"load-report-max-requests-per-instance low", func(c *controlplane.Config) { c.LoadReportMaxRequests = 1000 },
			func(c *controlplane.Config) { c.LoadReportMaxRequests = 999 }, "--load-report-max-requests-per-instance"},
		{"load-report-max-requests-per-instance high", func(c *controlplane.Config) { c.LoadReportMaxRequests = 1<<32 - 1 },
			func(c *controlplane.Config) { c.LoadReportMaxRequests = 1 << 32 }, "--load-report-max-requests-per-instance"},
		{"health-check-concurrency low", func(c *controlplane.Config) { c.HealthCheckConcurrency = 1 },
			func(c *controlplane.Config) { c.HealthCheckConcurrency = 0 }, "--health-check-concurrency"},
		{"health-check-concurrency high", func(c *controlplane.Config) { c.HealthCheckConcurrency = 1024 },
			func(c *controlplane.Config) { c.HealthCheckConcurrency = 1025 }, "--health-check-concurrency"},
		{"health-check-max-endpoints low", func(c *controlplane.Config) { c.HealthCheckMaxEndpoints = 1 },
			func(c *controlplane.Config) { c.HealthCheckMaxEndpoints = 0 }, "--health-check-max-endpoints"},
		{"health-check-max-endpoints high", func(c *controlplane.Config) { c.HealthCheckMaxEndpoints = 100_000 },
			func(c *controlplane.Config) { c.HealthCheckMaxEndpoints = 100_001 }, "--health-check-max-endpoints"},
		{"load-report-bucket low", func(c *controlplane.Config) { c.LoadReportBucket = 100 * time.Millisecond },
			func(c *controlplane.Config) { c.LoadReportBucket = 100*time.Millisecond - 1 }, "--load-report-bucket"},
		{"load-report-bucket high", func(c *controlplane.Config) { c.LoadReportBucket = 10 * time.Second },
			func(c *controlplane.Config) { c.LoadReportBucket = 10*time.Second + 1 }, "--load-report-bucket"},
		{"metrics-max-upstreams low", func(c *controlplane.Config) { c.MetricsMaxUpstreams = 0 }, func(c *controlplane.Config) { c.MetricsMaxUpstreams = -1 }, "--metrics-max-upstreams"},
		{"metrics-max-upstreams high", func(c *controlplane.Config) { c.MetricsMaxUpstreams = 100_000 },
			func(c *controlplane.Config) { c.MetricsMaxUpstreams = 100_001 }, "--metrics-max-upstreams"},
		{"status-writers low", func(c *controlplane.Config) { c.StatusWriters = 1 }, func(c *controlplane.Config) { c.StatusWriters = 0 }, "--status-writers"},
		{"status-writers high", func(c *controlplane.Config) { c.StatusWriters = 1024 }, func(c *controlplane.Config) { c.StatusWriters = 1025 }, "--status-writers"},
		{"status-write-share low", func(c *controlplane.Config) { c.StatusShare = 0.001 }, func(c *controlplane.Config) { c.StatusShare = 0 }, "--status-write-share"},
		{"status-write-share high", func(c *controlplane.Config) { c.StatusShare = 1 }, func(c *controlplane.Config) { c.StatusShare = 1.001 }, "--status-write-share"},
		{"default-export-to", func(c *controlplane.Config) { c.DefaultExportTo = []string{".", "team-a"} },
			func(c *controlplane.Config) { c.DefaultExportTo = []string{} }, "--default-export-to"},
		{"source", func(c *controlplane.Config) { c.Source, c.Paths = "kubernetes", nil }, func(c *controlplane.Config) { c.Source = "" }, "--source"},
		{"paths with kubernetes", func(c *controlplane.Config) { c.Source, c.Paths = "kubernetes", nil }, func(c *controlplane.Config) { c.Source = "kubernetes" }, "-f"},
		{"paths with files", func(c *controlplane.Config) { c.Paths = []string{"a", "b"} }, func(c *controlplane.Config) { c.Paths = nil }, "-f"},
		{"xds-auth", func(c *controlplane.Config) {
			c.XDSAuth = []string{"token", "mtls"}
			c.TLS = &server.TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
		},
			func(c *controlplane.Config) { c.XDSAuth = []string{"token", "none"} }, "--xds-auth"},
		{"xds-auth=mtls without a client CA", func(c *controlplane.Config) {
			c.XDSAuth = []string{"mtls"}
			c.TLS = &server.TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
		},
			func(c *controlplane.Config) {
				c.XDSAuth = []string{"mtls"}
				c.TLS = &server.TLS{CertFile: "c", KeyFile: "k"}
			}, "--tls-client-ca"},
		{"xds-auth empty", func(c *controlplane.Config) { c.XDSAuth = nil }, func(c *controlplane.Config) { c.XDSAuth = []string{} }, "--xds-auth"},
		{"xds-auth left out with a client CA is mtls", func(c *controlplane.Config) {
			c.TLS = &server.TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
			c.XDSAddress = "0.0.0.0:18000"
		},
			func(c *controlplane.Config) { c.XDSAddress = "0.0.0.0:18000" }, "--xds-allow-anonymous-non-loopback"},
		{"client CA without a certificate", func(c *controlplane.Config) { c.TLS = &server.TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"} },
			func(c *controlplane.Config) { c.TLS = &server.TLS{ClientCAFile: "ca"} }, "--tls-client-ca"},
		{"xds-trust-domain", func(c *controlplane.Config) { c.XDSTrustDomain = "prod.example-1_a" },
			func(c *controlplane.Config) { c.XDSTrustDomain = "Cluster.Local" }, "--xds-trust-domain"},
		{"xds-token-audience", func(c *controlplane.Config) { c.XDSAuth = []string{"token"} },
			func(c *controlplane.Config) { c.XDSAuth, c.XDSTokenAudience = []string{"token"}, "" }, "--xds-token-audience"},
		{"xds-token-review-interval low", func(c *controlplane.Config) { c.XDSTokenReviewInterval = time.Second },
			func(c *controlplane.Config) { c.XDSTokenReviewInterval = time.Second - 1 }, "--xds-token-review-interval"},
		{"xds-token-review-interval high", func(c *controlplane.Config) { c.XDSTokenReviewInterval = 24 * time.Hour },
			func(c *controlplane.Config) { c.XDSTokenReviewInterval = 24*time.Hour + 1 }, "--xds-token-review-interval"},
		{"xds-demand-grant", func(c *controlplane.Config) { c.XDSDemandGrant = []string{"a/pay=1", "b/pay=1000000"} },
			func(c *controlplane.Config) { c.XDSDemandGrant = []string{"a/pay=-1"} }, "--xds-demand-grant"},
		{"anonymous on loopback only", func(c *controlplane.Config) { c.XDSAddress = "[::1]:18000" },
			func(c *controlplane.Config) { c.XDSAddress = "0.0.0.0:18000" }, "--xds-allow-anonymous-non-loopback"},
		{"anonymous elsewhere on purpose", func(c *controlplane.Config) { c.XDSAddress, c.XDSAllowAnonymousNonLoopback = ":18000", true },
			func(c *controlplane.Config) { c.XDSAddress = ":18000" }, "--xds-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, bad := complete(), complete()
			tc.ok(&ok)
			tc.bad(&bad)
			if err := ok.Validate(); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			err := bad.Validate()
			if err == nil || !strings.Contains(err.Error()+" ", tc.flag+" ") && !strings.Contains(err.Error(), tc.flag+":") ||
				strings.Contains(err.Error(), "\n") {
				t.Errorf("beyond the bound: %v; want one problem naming %s", err, tc.flag)
			}
		})
	}
}

// TestValidateAll: every problem at once, one by field rule, in a fixed
// order; and a zero Config, which Run reads as all defaults, is refused
// by Validate, which reads its zeros as values.
func TestValidateAll(t *testing.T) {
	t.Parallel()
	c := complete()
	c.MaxStreams, c.HealthCheckMaxEndpoints, c.StatusShare, c.Source = 0, 0, 2, "etcd"
	err := c.Validate()
	want := []string{
		"--xds-max-streams 0: want 1 to 1000000",
		"--health-check-max-endpoints 0: want 1 to 100000",
		"--status-write-share 2: want a part of the client's budget, above 0 and at most 1",
		`--source "etcd": want files or kubernetes`,
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(want) || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	if err := (controlplane.Config{}).Validate(); err == nil || len(strings.Split(err.Error(), "\n")) < 10 {
		t.Errorf("a zero Config: %v", err)
	}
	if err := complete().Validate(); err != nil {
		t.Errorf("the flags' defaults: %v", err)
	}
}
