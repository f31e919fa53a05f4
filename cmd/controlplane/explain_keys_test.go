package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// TestExplainKeysFileJSONIsStreamed: `--keys FILE -o json` writes each
// answer as it is found, and the document is byte for byte what the whole
// report encodes to (writeReport's JSON): the --key flags' answers, then
// the file's, each with the picks the same key asked by --key gets; an
// empty file gives an empty list.
func TestExplainKeysFileJSONIsStreamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		keys       []string
	}{
		{"file and flags", "user-1\nuser-2\n<&>\n", []string{"42", "Bearer 42"}},
		{"file only", "user-1\n", nil},
		{"empty file", "", nil},
		{"empty file and a flag", "", []string{"7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"explain", "-f", keysDir, "--upstream", "keys/keyed-ring", "--keys", file, "-o", "json"}
			asked := slices.Clone(tc.keys)
			if tc.file != "" {
				asked = append(asked, strings.Split(strings.TrimSuffix(tc.file, "\n"), "\n")...)
			}
			for _, k := range tc.keys {
				args = append(args, "--key", k)
			}
			code, streamed, stderr := runCLI(args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			var rep explain.KeyReport
			if err := json.Unmarshal([]byte(streamed), &rep); err != nil {
				t.Fatal(err)
			}
			var whole strings.Builder
			if code := writeReport("json", &whole, io.Discard, rep, nil); code != exitOK || whole.String() != streamed {
				t.Errorf("streamed:\n%s\nwant, as the whole report encodes:\n%s", streamed, whole.String())
			}
			if len(rep.Requests) != len(asked) {
				t.Fatalf("%d answers, want %d", len(rep.Requests), len(asked))
			}
			for i, k := range asked {
				code, one, stderr := runCLI("explain", "-f", keysDir, "--upstream", "keys/keyed-ring", "-o", "json", "--key", k)
				if code != exitOK {
					t.Fatalf("--key %q: exit %d, stderr:\n%s", k, code, stderr)
				}
				var want explain.KeyReport
				if err := json.Unmarshal([]byte(one), &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(rep.Requests[i].Picks, want.Requests[0].Picks) {
					t.Errorf("key %q: picks %+v, want --key's %+v", k, rep.Requests[i].Picks, want.Requests[0].Picks)
				}
			}
		})
	}
}
