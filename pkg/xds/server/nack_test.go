package server_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"poise.dev/poise/pkg/xds/server"
)

// lockedBuffer is a log sink the server writes to from its own goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A client cannot make the server count, keep or log what it never sent,
// nor fill the log: NACKs with nonces the server did not send last are
// ignored, a NACK's text is kept and logged only up to 1 KiB, and a
// stream's NACKs of one type are logged at most once per 10 s.
func TestHostileNACKs(t *testing.T) {
	var log lockedBuffer
	h := newHarnessWith(t, server.Config{}, slog.New(slog.NewJSONHandler(&log, nil)))
	publishV1(t, h)
	env := startEnvoy(t, h, "envoy-1")
	huge := strings.Repeat("é", 512<<10) // 1 MiB of text

	// forged and stale nonces
	for i := range 20 {
		if err := env.request(EDS, []string{"c1", "c2"}, "forged-version", fmt.Sprintf("forged-%d", i), huge); err != nil {
			t.Fatal(err)
		}
	}
	env.none(quiet)
	c := h.client("envoy-1")
	if ts := c.Types["EDS"]; ts.NACKs != 0 || ts.LastNACK != nil || ts.LastAckedVersion != "v1" {
		t.Fatalf("forged NACKs were recorded: %+v", ts)
	}
	if got := h.nacks("EDS"); got != 0 {
		t.Fatalf("NACK metric %v after forged NACKs, want 0", got)
	}
	if strings.Contains(log.String(), "NACK") {
		t.Fatalf("forged NACKs were logged: %d bytes", len(log.String()))
	}

	// a real NACK, repeated: counted each time, logged once, its text cut
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 0))))
	bad := env.expect(EDS, "v2", "c1")
	for range 20 {
		env.nack(bad, "forged-version", huge)
	}
	eventually(t, "20 NACKs counted", func() bool { return h.client("envoy-1").Types["EDS"].NACKs == 20 })
	ts := h.client("envoy-1").Types["EDS"]
	if n := ts.LastNACK; n == nil || n.Version != "v2" || len(n.Error) > 1100 || !strings.HasPrefix(huge, strings.SplitN(n.Error, "…", 2)[0]) {
		t.Fatalf("last NACK %+v: want version v2 and the text cut to about 1 KiB", n)
	}
	if ts.LastAckedVersion != "v1" {
		t.Fatalf("last acked version %q, want v1: the client's own version_info is not shown", ts.LastAckedVersion)
	}
	logged := log.String()
	if lines := strings.Count(logged, "rejected a response (NACK)"); lines != 1 || len(logged) > 4096 || strings.Contains(logged, "forged-version") {
		t.Fatalf("%d NACK log lines, %d bytes of log; want one line of at most a few KiB without the client's version", lines, len(logged))
	}
}
