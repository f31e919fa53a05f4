package server_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/testkit"
)

// lockedBuffer is a log sink the server writes to from its own goroutines.
type lockedBuffer = testkit.Logs

// A client cannot make the server count, keep or log what it never sent,
// nor fill the log: NACKs with nonces the server did not send last are
// ignored, a NACK's text is kept and logged only up to 1 KiB, and a
// stream's NACKs of one type are logged at most once per 10 s.
func TestHostileNACKs(t *testing.T) {
	t.Parallel()
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

// TestRejectedResources: a NACK makes every resource of the rejected
// response rejected by that stream, with its reason, until a later
// response carrying the resource is ACKed or the stream goes; streams count
// separately, and RejectedChanged signals each change.
func TestRejectedResources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	publishV1(t, h)
	one, two := startEnvoy(t, h, "envoy-1"), startEnvoy(t, h, "envoy-2")
	for _, name := range []string{"c1", "c2"} {
		if r := h.clients.Rejected(name); r != (server.Rejection{}) {
			t.Fatalf("%s rejected after ACKs: %+v", name, r)
		}
	}

	changed := h.clients.RejectedChanged()
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	bad1, bad2 := one.expect(EDS, "v2", "c1"), two.expect(EDS, "v2", "c1")
	one.nack(bad1, "v1", "port 9001 refused")
	eventually(t, "c1 rejected by one stream", func() bool { return h.clients.Rejected("c1").Streams == 1 })
	<-changed
	if r := h.clients.Rejected("c1"); r.Streams != 1 || r.Reason != "port 9001 refused" {
		t.Errorf("c1: %+v; want rejected by one stream with the client's reason", r)
	}
	// c2 was not in the rejected response
	if r := h.clients.Rejected("c2"); r != (server.Rejection{}) {
		t.Errorf("c2: %+v; want not rejected", r)
	}
	two.nack(bad2, "v1", "also refused")
	eventually(t, "c1 rejected by two streams", func() bool { return h.clients.Rejected("c1").Streams == 2 })
	if r := h.clients.Rejected("c1"); r.Reason != "port 9001 refused" {
		t.Errorf("c1: %+v; want the reason of the lowest-numbered stream", r)
	}

	// a fix, ACKed by one: only the other still rejects
	h.apply("v3", put(0, EDS, entry(t, "v3", cla("c1", 8001))))
	one.ack(one.expect(EDS, "v3", "c1"))
	eventually(t, "c1 rejected by one stream after one ACK", func() bool { return h.clients.Rejected("c1").Streams == 1 })
	if r := h.clients.Rejected("c1"); r.Reason != "also refused" {
		t.Errorf("c1 after the first ACK: %+v; want the other stream's reason", r)
	}
	// the other stream goes away: nothing is rejected
	two.close()
	eventually(t, "nothing rejected after the stream closed", func() bool {
		return h.clients.Rejected("c1") == (server.Rejection{})
	})
}
