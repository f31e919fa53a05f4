package controlplane

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"poise.dev/poise/pkg/xds/server"
)

// TestKlogLevels: klog's warnings and errors keep their level through slog,
// and its structured calls are unchanged.
// Not parallel: it sets klog's process-wide logger.
func TestKlogLevels(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	klog.SetLoggerWithOptions(logr.FromSlogHandler(log.Handler()), klog.WriteKlogBuffer(klogWriter(log)))
	t.Cleanup(klog.ClearLogger)

	klog.Warning("watch of *v1.EndpointSlice ended")
	klog.Infof("cache synced %d", 3)
	klog.Errorf("lease %s lost", "poise")
	klog.InfoS("structured", "k", "v")
	klog.Flush()

	type record struct{ Level, Msg, Caller, K string }
	var got []record
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []record{
		{Level: "WARN", Msg: "watch of *v1.EndpointSlice ended"},
		{Level: "INFO", Msg: "cache synced 3"},
		{Level: "ERROR", Msg: "lease poise lost"},
		{Level: "INFO", Msg: "structured", K: "v"},
	}
	if len(got) != len(want) {
		t.Fatalf("records:\n%s", buf.String())
	}
	for i := range want {
		if got[i].Level != want[i].Level || got[i].Msg != want[i].Msg || got[i].K != want[i].K {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
		if i < 3 && !strings.HasPrefix(got[i].Caller, "logs_test.go:") {
			t.Errorf("record %d: caller %q, want this file", i, got[i].Caller)
		}
	}
}

// TestBannerJSON: under --log-format json the banner is one JSON object.
func TestBannerJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a := Addrs{XDS: "127.0.0.1:18000", Admin: "127.0.0.1:19000", Metrics: "0.0.0.0:19001", Instance: "i-1"}
	writeBanner(&buf, Config{BannerFormat: "json", Version: "v1.2.3", Paths: []string{"examples"}, TLS: &server.TLS{ClientCAFile: "ca"}}, trustDomain{}, a)
	var b map[string]any
	dec := json.NewDecoder(&buf)
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("banner is not JSON: %v\n%s", err, buf.String())
	}
	if dec.More() {
		t.Error("banner is more than one JSON value")
	}
	for k, v := range map[string]any{"msg": "poise control plane", "version": "v1.2.3", "instance": "i-1", "xds": a.XDS,
		"transport": "mTLS", "admin": a.Admin, "metrics": a.Metrics, "source": "files"} {
		if b[k] != v {
			t.Errorf("%s = %v, want %v", k, b[k], v)
		}
	}
	buf.Reset()
	writeBanner(&buf, Config{Version: "v1.2.3", Source: "kubernetes"}, trustDomain{}, a)
	if !strings.HasPrefix(buf.String(), "poise control plane v1.2.3 (instance i-1)\n") || !strings.Contains(buf.String(), "source:                    kubernetes") {
		t.Errorf("text banner:\n%s", buf.String())
	}
}
