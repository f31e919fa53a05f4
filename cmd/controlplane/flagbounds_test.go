package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagBound is one numeric flag of one command: the values at its bounds,
// which pass the command's checks, values outside (zero, negative, over
// the cap, huge, where each applies), which are refused with exit 2 naming
// the flag, and the range as docs/cli.md gives it.
type flagBound struct {
	cmd, flag string
	in, out   []string
	doc       string
}

// flagBounds has a row for every integer, unsigned, duration and float
// flag of every command; TestEveryNumericFlagIsBounded fails on one
// without.
var flagBounds = []flagBound{
	{"serve", "debounce", []string{"0", "1m"}, []string{"-1ms", "1m1s", "1000000h"}, "0s to 1m0s"},
	{"serve", "debounce-max", []string{"0", "10m"}, []string{"-1ms", "10m1s", "1000000h"}, "0s (twice --debounce), else --debounce to 10m0s"},
	{"serve", "settle", []string{"0", "10m"}, []string{"-1s", "10m1s", "1000000h"}, "0s to 10m0s"},
	{"serve", "drain-period", []string{"0", "10m"}, []string{"-1s", "10m1s", "1000000h"}, "0s to 10m0s"},
	{"serve", "xds-max-streams", []string{"1", "1000000"}, []string{"0", "-1", "1000001", "99999999999"}, "1 to 1000000"},
	{"serve", "xds-max-streams-per-connection", []string{"1", "10000"}, []string{"0", "-1", "10001", "99999999999"}, "1 to 10000"},
	{"serve", "xds-max-streams-per-instance", []string{"0", "1", "10000"}, []string{"-1", "10001", "99999999999"}, "0 to 10000"},
	{"serve", "xds-token-review-interval", []string{"1s", "24h"}, []string{"0", "-1s", "999ms", "24h0m1s", "1000000h"}, "1s to 24h0m0s"},
	{"serve", "kube-api-qps", []string{"0.001", "100000"}, []string{"0", "-1", "100000.5", "NaN", "1e300"}, "above 0, at most 100000"},
	{"serve", "kube-api-burst", []string{"1", "100000"}, []string{"0", "-1", "100001", "99999999999"}, "1 to 100000"},
	{"serve", "status-write-share", []string{"0.001", "1"}, []string{"0", "-0.5", "1.5", "NaN"}, "above 0, at most 1"},
	{"serve", "status-writers", []string{"1", "1024"}, []string{"0", "-1", "1025", "99999999999"}, "1 to 1024"},
	{"serve", "max-client-classes", []string{"1", "4096"}, []string{"0", "-1", "4097", "99999999999"}, "1 to 4096"},
	{"serve", "metrics-max-upstreams", []string{"0", "100000"}, []string{"-1", "100001", "99999999999"}, "0 (none) to 100000"},
	{"serve", "load-report-max-cells", []string{"1", "100000000"}, []string{"0", "-1", "100000001", "99999999999"}, "1 to 100000000"},
	{"serve", "load-report-max-requests-per-instance", []string{"1000", "4294967295"}, []string{"0", "999", "4294967296", "99999999999"}, "1000 to 4294967295"},
	{"serve", "health-check-concurrency", []string{"1", "1024"}, []string{"0", "-1", "1025", "99999999999"}, "1 to 1024"},
	{"serve", "health-check-max-endpoints", []string{"1", "100000"}, []string{"0", "-1", "100001", "99999999999"}, "1 to 100000"},
	{"serve", "load-report-bucket", []string{"100ms", "10s"}, []string{"0", "-1s", "99ms", "10001ms", "1000000h"}, "100ms to 10s"},
	{"serve", "remote-stale-after", []string{"5s", "1h"}, []string{"0", "-1s", "4s", "61m", "1000000h"}, "5s to 1h0m0s"},
	{"explain", "simulate", []string{"0", "1000000000"}, []string{"-1", "1000000001", "99999999999999999999"}, "0 (none) to 1000000000"},
	{"explain", "seed", []string{"0", "18446744073709551615"}, []string{"-1", "18446744073709551616"}, "0 to 18446744073709551615"},
	{"explain", "grpc-ring-cap", []string{"0", "8388608"}, []string{"-1", "8388609"}, "0 (the gRPC clients' default, 4096) to 8388608"},
	{"status", "timeout", []string{"100ms", "10m"}, []string{"0", "-1s", "99ms", "10m1s", "1000000h"}, "100ms to 10m0s"},
	{"status", "admin-port", []string{"0", "65535"}, []string{"-1", "65536", "99999999999"}, "0 (the pod's --admin-address, else 19000) to 65535"},
	{"proxy-config", "timeout", []string{"100ms", "10m"}, []string{"0", "-1s", "99ms", "10m1s", "1000000h"}, "100ms to 10m0s"},
	{"proxy-config", "admin-port", []string{"0", "65535"}, []string{"-1", "65536", "99999999999"}, "0 (the pod's --admin-address, else 19000) to 65535"},
	{"create-remote-secret", "timeout", []string{"1ms", "10m"}, []string{"0", "-1s", "10m1s", "1000000h"}, "above 0s, at most 10m0s"},
	{"load", "envoy", []string{"0", "100000"}, []string{"-1", "100001", "99999999999"}, "0 to 100000"},
	{"load", "grpc", []string{"0", "100000"}, []string{"-1", "100001", "99999999999"}, "0 to 100000"},
	{"load", "delta-percent", []string{"0", "100"}, []string{"-1", "101", "99999999999"}, "0 to 100"},
	{"load", "hot", []string{"0", "62500"}, []string{"-1", "62501", "99999999999"}, "0 to 62500 (cut to the clusters there are)"},
	{"load", "skew", []string{"0", "10"}, []string{"-0.5", "10.5", "NaN", "1e300"}, "0 to 10"},
	{"load", "localities", []string{"1", "1000"}, []string{"0", "-1", "1001", "99999999999"}, "1 to 1000"},
	{"load", "streams-per-connection", []string{"1", "100"}, []string{"0", "-1", "101", "99999999999"}, "1 to 100"},
	{"load", "upstreams", []string{"1", "62500"}, []string{"0", "-1", "62501", "99999999999"}, "1 to 62500"},
	{"load", "pid", []string{"0", "4194304"}, []string{"-1", "4194305", "99999999999"}, "0 (none) to 4194304"},
	{"load", "rate", []string{"0.001", "100000"}, []string{"0", "-1", "100000.5", "NaN", "1e300"}, "above 0, at most 100000"},
	{"load", "duration", []string{"0", "24h"}, []string{"-1s", "24h0m1s", "1000000h"}, "0s to 24h0m0s"},
	{"load", "drain", []string{"0", "1h"}, []string{"-1s", "1h0m1s", "1000000h"}, "0s to 1h0m0s"},
	{"load", "idle", []string{"0", "1m"}, []string{"-1s", "1m1s", "1000000h"}, "0s to 1m0s"},
	{"load", "settle", []string{"0", "10m"}, []string{"-1s", "10m1s", "1000000h"}, "0s to 10m0s"},
	{"load", "sync-timeout", []string{"1s", "1h"}, []string{"0", "-1s", "999ms", "1h0m1s", "1000000h"}, "1s to 1h0m0s"},
	{"load", "procs", []string{"1", "64"}, []string{"0", "-1", "65", "99999999999"}, "1 to 64"},
	{"load", "seed", []string{"0", "18446744073709551615"}, []string{"-1", "18446744073709551616"}, "0 to 18446744073709551615"},
}

// numeric says whether a flag holds a number: an integer of any width, a
// float or a duration.
func numeric(f *pflag.Flag) bool {
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "duration":
		return true
	}
	return false
}

// TestEveryNumericFlagIsBounded: every numeric flag of every command has a
// row in flagBounds, and every row a flag.
func TestEveryNumericFlagIsBounded(t *testing.T) {
	t.Parallel()
	rows := map[string]bool{}
	for _, b := range flagBounds {
		rows[b.cmd+" --"+b.flag] = true
	}
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !numeric(f) {
				return
			}
			key := c.Name() + " --" + f.Name
			seen[key] = true
			if !rows[key] {
				t.Errorf("%s (%s) has no row in flagBounds: give it bounds, refuse values outside them, document them in docs/cli.md", key, f.Value.Type())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(nil, nil))
	for key := range rows {
		if !seen[key] {
			t.Errorf("flagBounds row %s names no numeric flag", key)
		}
	}
}

// TestFlagBounds: each numeric flag outside its range is refused, exit 2,
// naming the flag; at its bounds it passes the checks, and the command
// goes on to fail (exit 1) on an input that does not exist, or a cluster
// that does not answer.
func TestFlagBounds(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	dead := deadKubeconfig(t)
	base := func(b flagBound) []string {
		switch {
		case b.cmd == "serve":
			return []string{"serve", "-f", missing, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}
		case b.cmd == "explain":
			return []string{"explain", "-f", missing}
		case b.flag == "admin-port" && b.cmd == "proxy-config":
			return []string{"proxy-config", "envoy-1", "--kubeconfig", dead}
		case b.flag == "admin-port":
			return []string{b.cmd, "--kubeconfig", dead}
		case b.cmd == "proxy-config":
			return []string{"proxy-config", "envoy-1", "--admin-address", "127.0.0.1:1"}
		case b.cmd == "status":
			return []string{"status", "--admin-address", "127.0.0.1:1"}
		case b.cmd == "load":
			return []string{"load", "--xds-address", "127.0.0.1:1", "--sample", missing}
		case b.cmd == "create-remote-secret":
			return []string{"create-remote-secret", "--kubeconfig", dead, "--context", "dead", "--name", "east"}
		}
		t.Fatalf("no command line for %s", b.cmd)
		return nil
	}
	for _, b := range flagBounds {
		t.Run(b.cmd+"/"+b.flag, func(t *testing.T) {
			for _, v := range b.out {
				args := append(base(b), "--"+b.flag+"="+v)
				code, stdout, stderr := runCLI(args...)
				if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--"+b.flag) {
					t.Errorf("--%s=%s: exit %d, stderr:\n%s\nwant exit 2 naming --%s", b.flag, v, code, stderr, b.flag)
				}
			}
			for _, v := range b.in {
				args := append(base(b), "--"+b.flag+"="+v)
				if code, _, stderr := runCLI(args...); code != exitInvalid {
					t.Errorf("--%s=%s: exit %d, stderr:\n%s\nwant exit 1: the flag passes, the input fails", b.flag, v, code, stderr)
				}
			}
		})
	}
}

// TestFlagBoundsDocumented: docs/cli.md's table of bounds has a row for
// each numeric flag, with its default as the command has it and the range
// the command holds it to.
func TestFlagBoundsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| `--([a-z-]+)` \\| `([^`]*)` \\| (.+) \\|$")
	documented := map[string][]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]+" --"+m[2]] = []string{m[3], m[4]}
	}
	root := newRoot(nil, nil)
	for _, b := range flagBounds {
		key := b.cmd + " --" + b.flag
		c, _, err := root.Find([]string{b.cmd})
		if err != nil {
			t.Fatal(err)
		}
		f := c.Flags().Lookup(b.flag)
		d, ok := documented[key]
		switch {
		case !ok:
			t.Errorf("docs/cli.md has no row | `%s` | `--%s` | `%s` | %s |", b.cmd, b.flag, f.DefValue, b.doc)
		case d[0] != f.DefValue || d[1] != b.doc:
			t.Errorf("docs/cli.md: %s: default %q, range %q; the command's are %q and %q", key, d[0], d[1], f.DefValue, b.doc)
		}
		delete(documented, key)
	}
	for key := range documented {
		t.Errorf("docs/cli.md documents the bounds of %s, which is no numeric flag", key)
	}
}
