package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/golden"
)

const keysDir = "testdata/keys"

func TestExplainKeysGolden(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys.txt")
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "user-%d\n", i)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"explain-key", []string{"--upstream", "keys/keyed-ring", "--key", "42", "--key", "Bearer 42", "--key", " Bearer 42"}},
		{"explain-key-request", []string{"--upstream", "keys/keyed-ring", "--header", "X-Tenant=acme-prod", "--cookie", "given=c1", "--source-ip", "::ffff:10.1.2.3"}},
		{"explain-key-generated-cookie", []string{"--upstream", "keys/keyed-ring", "--query", "user=9"}},
		{"explain-key-maglev", []string{"--upstream", "keys/keyed-maglev", "--key", "42"}},
		{"explain-key-capped", []string{"--upstream", "keys/keyed-ring", "--key", "42", "--grpc-ring-cap", "65536"}},
		{"explain-key-json", []string{"--upstream", "keys/keyed-ring", "--key", "42", "-o", "json"}},
		{"explain-keys-file", []string{"--upstream", "keys/keyed-ring", "--keys", file}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"explain", "-f", keysDir}, tc.args...)
			code, stdout, stderr := runCLI(args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			golden.Check(t, tc.name, stdout)
		})
	}
}

// TestExplainKeysRefusals: the key flags name what is wrong.
func TestExplainKeysRefusals(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", explain.MaxKeyLen+1)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--key", "42"}, exitUsage, "explain the requests of one --upstream"},
		{[]string{"--upstream", "keys/keyed-ring", "--key", "42", "--from", "r/a"}, exitUsage, "not with --from"},
		{[]string{"--upstream", "keys/plain-ring", "--key", "42"}, exitUsage, "no requestAffinity"},
		{[]string{"--upstream", "keys/keyed-ring", "--key", long}, exitUsage, "longer than 8192 bytes"},
		{[]string{"--upstream", "keys/keyed-ring", "--header", "x-user"}, exitUsage, "want NAME=VALUE"},
		{[]string{"--upstream", "keys/keyed-ring", "--source-ip", "10.0.0"}, exitUsage, `source-ip "10.0.0"`},
		{[]string{"--upstream", "keys/keyed-ring", "--key", "1", "--grpc-ring-cap", "8388609"}, exitUsage, "--grpc-ring-cap 8388609: at most 8388608"},
		{[]string{"--upstream", "keys/keyed-ring", "--keys", "/no/such/file"}, exitInvalid, "--keys: open /no/such/file"},
	} {
		code, _, stderr := runCLI(append([]string{"explain", "-f", keysDir}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d saying %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
