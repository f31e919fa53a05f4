package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/loadgen"
)

// TestTinyRun runs the whole bench at a tiny size against the real binary:
// 50 upstreams, 5 clients, 3 single flips, 1 s of sustained flips. Every flip
// must reach every client, and the printed figures must parse.
func TestTinyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the controlplane binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "controlplane")
	// Without the symbol table and DWARF the link takes a third less time.
	if err := buildBinary(bin, "-ldflags=-s -w"); err != nil {
		t.Fatal(err)
	}

	// The generated manifests are valid, flipped or not.
	tr, err := loadgen.Generate(filepath.Join(dir, "validate"), 50)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if out, err := exec.Command(bin, "validate", "-f", tr.Dir).CombinedOutput(); err != nil {
			t.Fatalf("validate after %d flips: %v\n%s", i, err, out)
		}
		if err := tr.Flip(7); err != nil {
			t.Fatal(err)
		}
	}

	jsonPath := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err = run([]string{"-build=false", "-binary", bin, "-sizes", "1000", "-clients", "5", "-single-flips", "3",
		"-single-gap", "100ms", "-duration", "1s", "-rate", "200", "-drain", "15s", "-idle", "500ms", "-workdir", dir, "-json", jsonPath},
		&stdout, &stderr)
	t.Logf("run took %v; output:\n%s%s", time.Since(start), stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rs []result
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1", len(rs))
	}
	r := rs[0]
	if r.Upstreams != 50 || r.Clients != 5 || r.EDSNames != 50 || r.Error != "" {
		t.Errorf("result %+v", r)
	}
	if r.Startup.AllClientsSeconds <= 0 || r.Startup.ReadyzSeconds <= 0 || r.Memory.AfterStartup.RSSMiB <= 0 ||
		r.Memory.AfterStartup.HeapInuseMiB <= 0 || r.Memory.PeakRSSMiB <= 0 {
		t.Errorf("startup %+v, memory %+v", r.Startup, r.Memory)
	}
	if s := r.Single; s == nil || s.Delivered != 3 || s.Partial+s.Undelivered+s.TimedOut != 0 || s.LastClient.N != 3 {
		t.Errorf("single flips: %+v", s)
	}
	s := r.Sustained
	if s == nil || s.Issued < 100 || s.Delivered != s.Issued || s.Partial+s.Undelivered != 0 || s.LastClient.N != s.Issued {
		t.Fatalf("sustained: %+v", s)
	}
	// One flip at a time never sends CDS. (Sustained flips may, today: the
	// file source re-lists the directory, which on tmpfs can miss files being
	// renamed into it.)
	if r.Single.CDSResponses != 0 || r.Single.StrayCLAs+s.StrayCLAs != 0 {
		t.Errorf("single flips sent %d CDS responses; %d + %d CLAs went to clients that did not subscribe to them",
			r.Single.CDSResponses, r.Single.StrayCLAs, s.StrayCLAs)
	}

	// The printed figures parse.
	out := stdout.String()
	for _, re := range []string{
		`startup: process -> /readyz 200\s+(\S+) s`,
		`startup: process -> all clients\s+(\S+) s`,
		`RSS after startup\s+(\S+) MiB`,
		`heap in use after startup\s+(\S+) MiB`,
		`live heap after GC\s+(\S+) MiB`,
		`single: flips delivered\s+(\S+) of 3`,
		`single: event -> last client\s+min \S+ ms  p50 \S+ ms  p99 \S+ ms  max (\S+) ms`,
		`single: server CPU per flip\s+(\S+) ms`,
		`sustained: flips delivered\s+(\S+) of`,
		`sustained: event -> last client\s+p50 \S+ ms  p90 \S+ ms  p99 \S+ ms  max (\S+) ms`,
		`sustained: server CPU\s+(\S+) cores`,
		`sustained: pushes per cluster\s+(\S+)/s`,
		`RSS at end / peak\s+\S+ / (\S+) MiB`,
		`\n\s+1000\s+5\s+sotw\s+(\S+)`, // the summary row
	} {
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no line matches %q", re)
			continue
		}
		if _, err := strconv.ParseFloat(m[1], 64); err != nil {
			t.Errorf("%q: %v", re, err)
		}
	}
}

// TestRequests: the requests a client sends decode as the messages they
// stand for (pkg/loadgen's tests read the responses).
func TestRequests(t *testing.T) {
	// The requests a client sends decode as the messages they stand for.
	f := newFleet(10, 2, 3, false)
	c := &client{f: f, id: "n"}
	var req discovery.DiscoveryRequest
	ack := append(c.ack(loadgen.Header{Version: []byte("v9"), TypeURL: []byte(loadgen.TypeEDS), Nonce: []byte("n3")}), f.names...)
	if err := proto.Unmarshal(ack, &req); err != nil {
		t.Fatal(err)
	}
	if req.GetVersionInfo() != "v9" || req.GetResponseNonce() != "n3" || req.GetTypeUrl() != loadgen.TypeEDS ||
		len(req.GetResourceNames()) != 3 || req.GetResourceNames()[0] != "bench/svc-0002" || req.GetResourceNames()[2] != "bench/svc-0004" {
		t.Errorf("SotW ACK decodes as %v", &req)
	}
	f.delta = true
	var dreq discovery.DeltaDiscoveryRequest
	if err := proto.Unmarshal(append(c.ack(loadgen.Header{TypeURL: []byte(loadgen.TypeEDS)}), f.names...), &dreq); err != nil {
		t.Fatal(err)
	}
	if dreq.GetTypeUrl() != loadgen.TypeEDS || len(dreq.GetResourceNamesSubscribe()) != 3 || dreq.GetResponseNonce() != "" {
		t.Errorf("Delta subscription decodes as %v", &dreq)
	}
}
