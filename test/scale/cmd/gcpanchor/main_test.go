package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--mirror", "127.0.0.1:18000"}, io.Discard)
	if err != nil || o.mirror != "127.0.0.1:18000" || o.maxMsgBytes != 256<<20 || o.logFormat != "text" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--mirror is required"},
		{[]string{"--mirror", "a:1", "extra"}, "unexpected arguments"},
		{[]string{"--mirror", "a:1", "--max-msg-bytes", "10"}, "--max-msg-bytes 10"},
		{[]string{"--mirror", "a:1", "--max-streams", "0"}, "--max-streams 0"},
		{[]string{"--mirror", "a:1", "--sync-timeout", "0s"}, "--sync-timeout 0s"},
		{[]string{"--mirror", "a:1", "--node-id", ""}, "--node-id"},
		{[]string{"--mirror", "a:1", "--log-format", "xml"}, `--log-format "xml"`},
	} {
		if _, err := parseFlags(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
