package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeFlags runs serve with each flag out of its range (zero,
// negative, over its cap, where the flag has them): exit 2 and exactly the
// problem, naming the flag, on stderr. Every row gives -f a file that does
// not exist, so a value the command wrongly lets through fails fast, in
// loading the manifests (exit 1), rather than serving.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	base := []string{"serve", "-f", missing, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}
	const (
		badCluster  = `cluster name %q must be a DNS label (lowercase letters, digits and '-', at most 63 characters)`
		statusShare = "--status-write-share %s: want a part of the client's budget, above 0 and at most 1"
		mtlsNeeds   = "--xds-auth=mtls needs --tls-cert, --tls-key and --tls-client-ca: the client certificates it reads are those the TLS handshake verifies"
	)
	anonymous := func(addr string) string {
		return "--xds-auth=none on --xds-address " + addr + ", which is not a loopback address: any process that reaches it could read and steer the fleet's config; " +
			"set --xds-auth=mtls or token, or pass --xds-allow-anonymous-non-loopback to serve it so on purpose"
	}
	for _, tc := range []struct {
		name string
		args []string // after base, unless they start with "serve"
		want []string // stderr's lines, each after "error: "
	}{
		{"debounce negative", []string{"--debounce", "-1ms"}, []string{"--debounce -1ms: want 0s to 1m0s"}},
		{"debounce huge", []string{"--debounce", "1000000h"}, []string{"--debounce 1000000h0m0s: want 0s to 1m0s"}},
		{"debounce-max negative", []string{"--debounce-max", "-1ms"}, []string{"--debounce-max -1ms: want 0s to 10m0s"}},
		{"debounce-max over", []string{"--debounce-max", "11m"}, []string{"--debounce-max 11m0s: want 0s to 10m0s"}},
		{"debounce-max below debounce", []string{"--debounce", "100ms", "--debounce-max", "50ms"},
			[]string{"--debounce-max 50ms is shorter than --debounce 100ms: a burst could never be applied on quiet"}},
		{"settle negative", []string{"--settle", "-1s"}, []string{"--settle -1s: want 0s to 10m0s"}},
		{"settle over", []string{"--settle", "11m"}, []string{"--settle 11m0s: want 0s to 10m0s"}},
		{"drain-period negative", []string{"--drain-period", "-1s"}, []string{"--drain-period -1s: want 0s to 10m0s"}},
		{"drain-period huge", []string{"--drain-period", "1000000h"}, []string{"--drain-period 1000000h0m0s: want 0s to 10m0s"}},
		{"xds-max-streams 0", []string{"--xds-max-streams", "0"}, []string{"--xds-max-streams 0: want 1 to 1000000"}},
		{"xds-max-streams negative", []string{"--xds-max-streams", "-1"}, []string{"--xds-max-streams -1: want 1 to 1000000"}},
		{"xds-max-streams huge", []string{"--xds-max-streams", "99999999999"}, []string{"--xds-max-streams 99999999999: want 1 to 1000000"}},
		{"xds-max-streams-per-connection 0", []string{"--xds-max-streams-per-connection", "0"}, []string{"--xds-max-streams-per-connection 0: want 1 to 10000"}},
		{"xds-max-streams-per-connection negative", []string{"--xds-max-streams-per-connection", "-1"},
			[]string{"--xds-max-streams-per-connection -1: want 1 to 10000"}},
		{"xds-max-streams-per-connection over", []string{"--xds-max-streams-per-connection", "2000000"},
			[]string{"--xds-max-streams-per-connection 2000000: want 1 to 10000"}},
		{"xds-max-streams-per-instance negative", []string{"--xds-max-streams-per-instance", "-1"},
			[]string{"--xds-max-streams-per-instance -1: want 0 to 10000"}},
		{"xds-max-streams-per-instance over", []string{"--xds-max-streams-per-instance", "10001"},
			[]string{"--xds-max-streams-per-instance 10001: want 0 to 10000"}},
		{"kube-api-qps 0", []string{"--kube-api-qps", "0"}, []string{"--kube-api-qps 0: want above 0 and at most 100000"}},
		{"kube-api-qps negative", []string{"--kube-api-qps", "-1"}, []string{"--kube-api-qps -1: want above 0 and at most 100000"}},
		{"kube-api-qps NaN", []string{"--kube-api-qps", "NaN"}, []string{"--kube-api-qps NaN: want above 0 and at most 100000"}},
		{"kube-api-qps over", []string{"--kube-api-qps", "100000.5"}, []string{"--kube-api-qps 100000.5: want above 0 and at most 100000"}},
		{"kube-api-burst 0", []string{"--kube-api-burst", "0"}, []string{"--kube-api-burst 0: want 1 to 100000"}},
		{"kube-api-burst negative", []string{"--kube-api-burst", "-1"}, []string{"--kube-api-burst -1: want 1 to 100000"}},
		{"remote-stale-after 0", []string{"--remote-stale-after", "0"}, []string{"--remote-stale-after 0s: want 5s to 1h0m0s"}},
		{"remote-stale-after negative", []string{"--remote-stale-after", "-1s"}, []string{"--remote-stale-after -1s: want 5s to 1h0m0s"}},
		{"remote-stale-after below", []string{"--remote-stale-after", "4s"}, []string{"--remote-stale-after 4s: want 5s to 1h0m0s"}},
		{"remote-stale-after over", []string{"--remote-stale-after", "61m"}, []string{"--remote-stale-after 1h1m0s: want 5s to 1h0m0s"}},
		{"cluster-name empty", []string{"--cluster-name", ""}, []string{"--cluster-name: " + fmt.Sprintf(badCluster, "")}},
		{"cluster-name not a label", []string{"--cluster-name", "Home_1"}, []string{"--cluster-name: " + fmt.Sprintf(badCluster, "Home_1")}},
		{"cluster-name too long", []string{"--cluster-name", strings.Repeat("a", 64)}, []string{"--cluster-name: " + fmt.Sprintf(badCluster, strings.Repeat("a", 64))}},
		{"max-client-classes 0", []string{"--max-client-classes", "0"}, []string{"--max-client-classes 0: want 1 to 4096"}},
		{"max-client-classes negative", []string{"--max-client-classes", "-1"}, []string{"--max-client-classes -1: want 1 to 4096"}},
		{"max-client-classes over", []string{"--max-client-classes", "4097"}, []string{"--max-client-classes 4097: want 1 to 4096"}},
		{"load-report-max-cells 0", []string{"--load-report-max-cells", "0"}, []string{"--load-report-max-cells 0: want 1 to 100000000"}},
		{"load-report-max-cells negative", []string{"--load-report-max-cells", "-1"}, []string{"--load-report-max-cells -1: want 1 to 100000000"}},
		{"load-report-max-cells over", []string{"--load-report-max-cells", "100000001"}, []string{"--load-report-max-cells 100000001: want 1 to 100000000"}},
		{"load-report-max-requests-per-instance 0", []string{"--load-report-max-requests-per-instance", "0"},
			[]string{"--load-report-max-requests-per-instance 0: want 1000 to 4294967295"}},
		{"load-report-max-requests-per-instance below", []string{"--load-report-max-requests-per-instance", "999"},
			[]string{"--load-report-max-requests-per-instance 999: want 1000 to 4294967295"}},
		{"load-report-max-requests-per-instance over", []string{"--load-report-max-requests-per-instance", "4294967296"},
			[]string{"--load-report-max-requests-per-instance 4294967296: want 1000 to 4294967295"}},
		{"health-check-concurrency 0", []string{"--health-check-concurrency", "0"}, []string{"--health-check-concurrency 0: want 1 to 1024"}},
		{"health-check-concurrency negative", []string{"--health-check-concurrency", "-1"}, []string{"--health-check-concurrency -1: want 1 to 1024"}},
		{"health-check-concurrency over", []string{"--health-check-concurrency", "1025"}, []string{"--health-check-concurrency 1025: want 1 to 1024"}},
		{"health-check-max-endpoints 0", []string{"--health-check-max-endpoints", "0"}, []string{"--health-check-max-endpoints 0: want 1 to 100000"}},
		{"health-check-max-endpoints negative", []string{"--health-check-max-endpoints", "-1"}, []string{"--health-check-max-endpoints -1: want 1 to 100000"}},
		{"health-check-max-endpoints over", []string{"--health-check-max-endpoints", "200000"}, []string{"--health-check-max-endpoints 200000: want 1 to 100000"}},
		{"load-report-bucket 0", []string{"--load-report-bucket", "0"}, []string{"--load-report-bucket 0s: want 100ms to 10s"}},
		{"load-report-bucket negative", []string{"--load-report-bucket", "-1s"}, []string{"--load-report-bucket -1s: want 100ms to 10s"}},
		{"load-report-bucket below", []string{"--load-report-bucket", "50ms"}, []string{"--load-report-bucket 50ms: want 100ms to 10s"}},
		{"load-report-bucket over", []string{"--load-report-bucket", "11s"}, []string{"--load-report-bucket 11s: want 100ms to 10s"}},
		{"metrics-max-upstreams negative", []string{"--metrics-max-upstreams", "-1"}, []string{"--metrics-max-upstreams -1: want 0 to 100000"}},
		{"status-writers 0", []string{"--status-writers", "0"}, []string{"--status-writers 0: want 1 to 1024"}},
		{"status-writers negative", []string{"--status-writers", "-1"}, []string{"--status-writers -1: want 1 to 1024"}},
		{"status-write-share 0", []string{"--status-write-share", "0"}, []string{fmt.Sprintf(statusShare, "0")}},
		{"status-write-share negative", []string{"--status-write-share", "-0.5"}, []string{fmt.Sprintf(statusShare, "-0.5")}},
		{"status-write-share over", []string{"--status-write-share", "1.5"}, []string{fmt.Sprintf(statusShare, "1.5")}},
		{"status-write-share NaN", []string{"--status-write-share", "NaN"}, []string{fmt.Sprintf(statusShare, "NaN")}},
		{"default-export-to empty", []string{"--default-export-to", ""},
			[]string{`--default-export-to "": Invalid value: []: must hold at least one item: leave it out for the control plane's default`}},
		{"default-export-to not a namespace", []string{"--default-export-to", "B_x"},
			[]string{`--default-export-to "B_x": Invalid value: "B_x": must be "*", "." or a namespace name (lowercase RFC 1123 label)`}},
		{"default-export-to twice", []string{"--default-export-to", "a,a"}, []string{`--default-export-to "a,a": Duplicate value: "a"`}},
		{"default-export-to star and more", []string{"--default-export-to", "*,a"},
			[]string{`--default-export-to "*,a": Invalid value: ["*","a"]: '*' (every namespace) stands alone: it already holds every other item`}},
		{"source unknown", []string{"--source", "etcd"}, []string{`--source "etcd": want files or kubernetes`}},
		{"no -f", []string{"serve", "--xds-address", "127.0.0.1:0"}, []string{"-f PATH is required (a manifest file or directory)"}},
		{"-f with kubernetes", []string{"--source", "kubernetes"},
			[]string{"-f is for --source=files; with --source=kubernetes the topology comes from the cluster"}},
		{"log-level", []string{"--log-level", "loud"}, []string{`--log-level "loud": want debug, info, warn or error`}},
		{"log-format", []string{"--log-format", "yaml"}, []string{`--log-format "yaml": want text or json`}},
		{"xds-auth unknown", []string{"--xds-auth", "password"}, []string{`--xds-auth "password": want none, mtls, token, or mtls,token`}},
		{"xds-auth none with another", []string{"--xds-auth", "none,token"}, []string{`--xds-auth "none,token": none stands alone, and each of mtls and token once`}},
		{"xds-auth twice", []string{"--xds-auth", "token,token"}, []string{`--xds-auth "token,token": none stands alone, and each of mtls and token once`}},
		{"xds-auth=mtls without TLS", []string{"--xds-auth", "mtls"}, []string{mtlsNeeds}},
		{"xds-auth=mtls without a client CA", []string{"--xds-auth", "mtls", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, []string{mtlsNeeds}},
		{"xds-auth empty", []string{"--xds-auth", ""},
			[]string{`--xds-auth "": want none, mtls, token, or mtls,token; leave it out for the default (mtls with --tls-client-ca, else none)`}},
		{"client CA without a certificate", []string{"--tls-client-ca", "ca.pem", "--tls-key", "k.pem"},
			[]string{"--tls-client-ca needs --tls-cert and --tls-key: client certificates are verified in the TLS handshake, and identify their clients"}},
		{"xds-trust-domain a SPIFFE ID", []string{"--xds-trust-domain", "spiffe://cluster.local"},
			[]string{`--xds-trust-domain "spiffe://cluster.local": want a trust domain alone, as TRUST-DOMAIN in spiffe://TRUST-DOMAIN/ns/NS/sa/SA: ` +
				`trust domain "spiffe://cluster.local" has a character other than [a-z0-9._-]`}},
		{"xds-demand-grant over", []string{"--xds-demand-grant", "team-a/pay=1000001"}, []string{`--xds-demand-grant "team-a/pay=1000001": want a weight 1 to 1000000`}},
		{"xds-demand-grant 0", []string{"--xds-demand-grant", "team-a/pay=0"}, []string{`--xds-demand-grant "team-a/pay=0": want a weight 1 to 1000000`}},
		{"xds-demand-grant no principal", []string{"--xds-demand-grant", "pay=5"}, []string{`--xds-demand-grant "pay=5": want NAMESPACE/SERVICE-ACCOUNT=N`}},
		{"xds-demand-grant twice", []string{"--xds-demand-grant", "team-a/pay=2", "--xds-demand-grant", "team-a/pay=3"},
			[]string{`--xds-demand-grant "team-a/pay=3": team-a/pay is granted twice`}},
		{"xds-token-review-interval 0", []string{"--xds-token-review-interval", "0"}, []string{"--xds-token-review-interval 0s: want 1s to 24h0m0s"}},
		{"xds-token-review-interval negative", []string{"--xds-token-review-interval", "-1s"}, []string{"--xds-token-review-interval -1s: want 1s to 24h0m0s"}},
		{"xds-token-review-interval below", []string{"--xds-token-review-interval", "999ms"}, []string{"--xds-token-review-interval 999ms: want 1s to 24h0m0s"}},
		{"xds-token-review-interval over", []string{"--xds-token-review-interval", "25h"}, []string{"--xds-token-review-interval 25h0m0s: want 1s to 24h0m0s"}},
		{"xds-token-audience empty", []string{"--xds-auth", "token", "--xds-token-audience", ""}, []string{"--xds-token-audience must not be empty with --xds-auth=token"}},
		{"anonymous on every interface", []string{"serve", "-f", missing, "--xds-address", "0.0.0.0:0", "--admin-address", "127.0.0.1:0"}, []string{anonymous("0.0.0.0:0")}},
		{"anonymous on a host name", []string{"serve", "-f", missing, "--xds-address", "poise.example:18000"}, []string{anonymous("poise.example:18000")}},
		{"anonymous on all, said explicitly", []string{"serve", "-f", missing, "--xds-address", ":0", "--xds-auth", "none"}, []string{anonymous(":0")}},
		{"spatial-listener no port", []string{"--spatial-listener", "0.0.0.0"}, []string{`--spatial-listener "0.0.0.0": address 0.0.0.0: missing port in address`}},
		{"spatial-listener port 0", []string{"--spatial-listener", "0.0.0.0:0"}, []string{`--spatial-listener "0.0.0.0:0": port "0": want 1..65535`}},
		{"spatial-listener port over", []string{"--spatial-listener", "0.0.0.0:65536"}, []string{`--spatial-listener "0.0.0.0:65536": port "65536": want 1..65535`}},
		{"spatial-listener host name", []string{"--spatial-listener", "envoy:10080"}, []string{`--spatial-listener "envoy:10080": host "envoy": want an IP address`}},
		{"several at once", []string{"--log-level", "loud", "--debounce", "-1s", "--xds-max-streams", "0",
			"--health-check-max-endpoints", "0", "--load-report-bucket", "11s", "--status-writers", "0", "--source", "etcd",
			"--spatial-listener", "envoy:10080"}, []string{
			`--log-level "loud": want debug, info, warn or error`,
			"--debounce -1s: want 0s to 1m0s",
			"--xds-max-streams 0: want 1 to 1000000",
			"--health-check-max-endpoints 0: want 1 to 100000",
			"--load-report-bucket 11s: want 100ms to 10s",
			"--status-writers 0: want 1 to 1024",
			`--source "etcd": want files or kubernetes`,
			`--spatial-listener "envoy:10080": host "envoy": want an IP address`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if len(args) == 0 || args[0] != "serve" {
				args = append(append([]string{}, base...), args...)
			}
			code, stdout, stderr := runCLI(args...)
			want := "error: " + strings.Join(tc.want, "\nerror: ") + "\nRun 'controlplane serve --help' for usage.\n"
			if code != exitUsage || stderr != want || stdout != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant exit %d, stderr:\n%s", args[1:], code, stdout, stderr, exitUsage, want)
			}
		})
	}
}

// TestServeFlagsAtTheirBounds: each flag at the ends of its range passes
// the checks, so serve goes on to load the manifests (and fails there, on
// a file that does not exist).
func TestServeFlagsAtTheirBounds(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, flags := range [][]string{
		{"--debounce", "0", "--debounce-max", "0", "--settle", "0", "--drain-period", "0"},
		{"--debounce", "1m", "--debounce-max", "10m", "--settle", "10m", "--drain-period", "10m"},
		{"--xds-max-streams", "1000000", "--xds-max-streams-per-connection", "10000", "--xds-max-streams-per-instance", "10000", "--kube-api-qps", "100000", "--kube-api-burst", "100000",
			"--status-writers", "1024", "--metrics-max-upstreams", "100000"},
		{"--debounce", "1s", "--debounce-max", "1s"},
		{"--xds-max-streams", "1", "--xds-max-streams-per-connection", "1", "--xds-max-streams-per-instance", "0"},
		{"--kube-api-qps", "0.001", "--kube-api-burst", "1", "--status-writers", "1", "--status-write-share", "1"},
		{"--status-write-share", "0.001"},
		{"--remote-stale-after", "5s", "--cluster-name", "a"},
		{"--remote-stale-after", "1h", "--cluster-name", strings.Repeat("a", 63)},
		{"--max-client-classes", "1", "--load-report-max-cells", "1", "--health-check-concurrency", "1", "--health-check-max-endpoints", "1"},
		{"--max-client-classes", "4096", "--load-report-max-cells", "100000000", "--health-check-concurrency", "1024", "--health-check-max-endpoints", "100000"},
		{"--load-report-bucket", "100ms", "--metrics-max-upstreams", "0", "--default-export-to", "*"},
		{"--load-report-max-requests-per-instance", "1000"},
		{"--load-report-max-requests-per-instance", "4294967295"},
		{"--default-export-to", ".,team-a"},
		{"--load-report-bucket", "10s", "--spatial-listener", "[::1]:65535", "--log-level", "error", "--log-format", "json"},
		{"--xds-auth", "none", "--xds-address", "0.0.0.0:0", "--xds-allow-anonymous-non-loopback"},
		{"--xds-auth", "token", "--xds-address", "0.0.0.0:0", "--xds-token-audience", "mesh", "--xds-trust-domain", "example.org", "--xds-token-review-interval", "1s"},
		{"--xds-auth", "token", "--xds-address", "0.0.0.0:0", "--xds-token-review-interval", "24h"},
		{"--xds-auth", "mtls,token", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--xds-address", "[::]:0"},
		// a client CA without --xds-auth is mtls: no anonymous client to
		// keep to loopback
		{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--xds-address", "[::]:0", "--xds-trust-domain", "cluster.local"},
		{"--xds-auth", "none", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem"},
		{"--xds-address", "localhost:0"},
	} {
		args := append([]string{"serve", "-f", missing, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, flags...)
		code, _, stderr := runCLI(args...)
		if code != exitInvalid || !strings.HasPrefix(stderr, "error: initial manifests are invalid; nothing to serve") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d, the manifests refused", flags, code, stderr, exitInvalid)
		}
	}
}
