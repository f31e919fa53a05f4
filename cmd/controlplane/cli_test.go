package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/golden"
)

const examples = "../../examples"

// examplesNote is what the commands say of the examples' Namespace objects,
// which are for kubectl apply.
const examplesNote = "note: skipped 3 objects of other kinds (Namespace 3) in " + examples + "\n"

// stderrOf is what a command reading the manifests of args says on stderr
// when all is well: the note on the examples' Namespaces, if it reads them.
func stderrOf(args []string) string {
	for i, a := range args {
		if a == "-f" && i+1 < len(args) && args[i+1] == examples {
			return examplesNote
		}
	}
	return ""
}

// runCLI runs the command line in-process.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// checkNoCrash fails if stderr mentions "panic" or "goroutine" anywhere
// but in the field names panicThreshold and panicMode.
func checkNoCrash(t *testing.T, stderr string) {
	t.Helper()
	rest := strings.NewReplacer("panicThreshold", "", "panicMode", "").Replace(stderr)
	for _, s := range []string{"panic", "goroutine"} {
		if strings.Contains(rest, s) {
			t.Errorf("stderr contains %q:\n%s", s, stderr)
		}
	}
}

func TestGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"explain", []string{"explain", "-f", examples}},
		{"explain-json", []string{"explain", "-f", examples, "-o", "json"}},
		{"explain-checkout-simulate", []string{"explain", "-f", examples, "--upstream", "shop/checkout", "--simulate", "20000", "--seed", "7"}},
		{"validate", []string{"validate", "-f", examples}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			if want := stderrOf(tc.args); stderr != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
			}
			golden.Check(t, tc.name, stdout)
		})
	}
}

// TestDeterministic: the same input gives byte-identical output, so the
// golden files are meaningful.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"explain", "-f", examples, "-o", "json", "--simulate", "1000", "--seed", "3"},
		{"explain", "-f", examples},
	} {
		_, first, _ := runCLI(args...)
		for i := 0; i < 3; i++ {
			if _, again, _ := runCLI(args...); again != first {
				t.Fatalf("%v: output changed between runs", args)
			}
		}
	}
	// Files given one by one, in either order, explain the same topology.
	_, a, _ := runCLI("explain", "-f", examples+"/catalog.yaml", "-f", examples+"/checkout.yaml", "-f", examples+"/cart.yaml")
	_, b, _ := runCLI("explain", "-f", examples+"/checkout.yaml,"+examples+"/cart.yaml,"+examples+"/catalog.yaml")
	_, c, _ := runCLI("explain", "-f", examples)
	if a != b || a != c {
		t.Errorf("explain depends on how the files are given")
	}
}

func TestExplainJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("explain", "-f", examples, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var rep explain.Report
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("JSON does not decode into explain.Report: %v", err)
	}
	if rep.Revision != 1 {
		t.Errorf("revision %d, want 1", rep.Revision)
	}
	if len(rep.Upstreams) < 2 {
		t.Fatalf("%d upstreams, want at least 2", len(rep.Upstreams))
	}
	routable := 0
	for _, u := range rep.Upstreams {
		if u.Outcome != "Routable" {
			continue
		}
		routable++
		var sum, load, traffic uint64
		for _, p := range u.Priorities {
			load += p.Load
			for _, l := range p.Localities {
				traffic += l.Traffic
				var inLocality uint64
				for _, e := range l.Endpoints {
					sum += e.Share
					inLocality += e.Share
					if !e.Selectable && e.Share != 0 {
						t.Errorf("%s/%s %s:%d: not selectable but share %d", u.Namespace, u.Name, e.Address, e.Port, e.Share)
					}
				}
				if inLocality != l.Traffic {
					t.Errorf("%s/%s locality %s/%s: endpoint shares sum to %d, traffic %d", u.Namespace, u.Name, l.Region, l.Zone, inLocality, l.Traffic)
				}
			}
		}
		if sum+u.DroppedMillionths != 1_000_000 {
			t.Errorf("%s/%s: endpoint shares %d + dropped %d = %d, want 1000000", u.Namespace, u.Name, sum, u.DroppedMillionths, sum+u.DroppedMillionths)
		}
		if load != 1_000_000 {
			t.Errorf("%s/%s: priority loads sum to %d, want 1000000", u.Namespace, u.Name, load)
		}
	}
	if routable == 0 {
		t.Error("no Routable upstream in the examples")
	}

	// The JSON and the text describe the same report.
	_, text, _ := runCLI("explain", "-f", examples)
	var buf bytes.Buffer
	if err := explain.WriteText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if buf.String() != text {
		t.Error("text rendered from the decoded JSON differs from `explain` text output")
	}
}

func TestSimulateJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("explain", "-f", examples, "--upstream", "shop/checkout", "-o", "json", "--simulate", "20000", "--seed", "7")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep explain.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Upstreams) != 1 || rep.Upstreams[0].Name != "checkout" || rep.Upstreams[0].Namespace != "shop" {
		t.Fatalf("upstreams = %+v, want only shop/checkout", rep.Upstreams)
	}
	u := rep.Upstreams[0]
	if u.Simulation == nil || u.Simulation.Picks != 20000 || u.Simulation.Seed != 7 {
		t.Fatalf("simulation = %+v", u.Simulation)
	}
	total := u.Simulation.Dropped
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			if l.Observed == nil {
				t.Fatal("locality without observed count")
			}
			var eps uint64
			for _, e := range l.Endpoints {
				if e.Observed == nil {
					t.Fatal("endpoint without observed count")
				}
				if !e.Selectable && *e.Observed != 0 {
					t.Errorf("%s:%d is not selectable but was picked %d times", e.Address, e.Port, *e.Observed)
				}
				eps += *e.Observed
			}
			if eps != *l.Observed {
				t.Errorf("locality %s: endpoints observed %d, locality %d", l.Zone, eps, *l.Observed)
			}
			total += *l.Observed
		}
	}
	if total != 20000 {
		t.Errorf("observed picks sum to %d, want 20000", total)
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("version")
	if code != exitOK || !strings.HasPrefix(stdout, "controlplane dev (go") || stderr != "" {
		t.Errorf("version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, h := range []string{"help", "-h", "--help"} {
		code, stdout, _ := runCLI(h)
		if code != exitOK || !strings.Contains(stdout, "Usage:\n  controlplane [command]") {
			t.Errorf("%s: exit %d, stdout %q", h, code, stdout)
		}
	}
}

// TestValidateRefusesOrphans: a manifest set is the whole truth, so an
// object naming an upstream no object defines is an error naming the file,
// document, object and field.
func TestValidateRefusesOrphans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "orphan.yaml", locality("l", "missing", 0, "eu", 1))
	code, stdout, stderr := runCLI("validate", "-f", dir)
	if code != exitInvalid || stdout != "" {
		t.Fatalf("exit %d, want %d; stdout %q", code, exitInvalid, stdout)
	}
	want := "error: invalid manifests:\n  " + filepath.Join(dir, "orphan.yaml") + ": document 1 (Locality shop/l): spec.upstream: no Upstream shop/missing\n"
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
}

// TestValidateSpatialProblems: what only shows across spatial objects is a
// warning naming the object, where it is defined, and the field; a name no
// object defines (a replica's Upstream, a Partition's domain or replica) is
// an error, in file and document order.
func TestValidateSpatialProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const domain = `apiVersion: poise.dev/v1alpha1
kind: SpatialDomain
metadata: {name: roads, namespace: geo}
spec:
  replicas: [{name: eu, upstream: roads-eu, region: eu}]
  products: [{name: maps, pathPrefix: /maps, allowedRegions: [us]}]
---
apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: roads-eu, namespace: geo}
`
	write(t, dir, "spatial.yaml", domain)
	code, stdout, stderr := runCLI("validate", "-f", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	file := filepath.Join(dir, "spatial.yaml")
	for _, want := range []string{
		"spatial: 1 domain(s)",
		"warning: SpatialDomain geo/roads (" + file + " document 1): spec.products[maps].allowedRegions: no replica is in regions [us]",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}

	write(t, dir, "spatial.yaml", strings.Replace(domain, "name: roads-eu, namespace", "name: roads-ue, namespace", 1)+`---
apiVersion: poise.dev/v1alpha1
kind: Partition
metadata: {name: alps, namespace: geo}
spec: {domain: roads, extent: {west: 5, south: 44, east: 16, north: 48}, replicas: [eu, us]}
---
apiVersion: poise.dev/v1alpha1
kind: Partition
metadata: {name: stray, namespace: geo}
spec: {domain: rivers, extent: {west: 5, south: 44, east: 16, north: 48}, replicas: [eu]}
`)
	code, stdout, stderr = runCLI("validate", "-f", dir)
	want := strings.ReplaceAll(`error: invalid manifests:
  FILE: document 1 (SpatialDomain geo/roads): spec.replicas[0].upstream: no Upstream geo/roads-eu (did you mean roads-ue?) (see Upstream geo/roads-ue (FILE document 2))
  FILE: document 3 (Partition geo/alps): spec.replicas[1]: SpatialDomain geo/roads has no replica "us" (see SpatialDomain geo/roads (FILE document 1))
  FILE: document 4 (Partition geo/stray): spec.domain: no SpatialDomain geo/rivers
`, "FILE", file)
	if code != exitInvalid || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, stdout, stderr, want)
	}
}

// TestValidateRefusesAddresses: an endpoint address EDS cannot carry, or a
// range no client should be sent to, is refused with the file, document,
// object and field; loopback only without the Upstream's opt-in.
func TestValidateRefusesAddresses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := write(t, dir, "vms.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}, {address: vm1.example.internal, port: 80}, {address: 169.254.169.254, port: 80}]"))
	loopback := write(t, dir, "local.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}, {address: 127.0.0.1, port: 8080}]"))
	allowed := write(t, dir, "allowed.yaml", upstream("web")+"spec: {addressPolicy: {allowLoopback: true}}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}, {address: 127.0.0.1, port: 8080}, {address: \"::1\", port: 8080}]"))
	metadataAllowed := write(t, dir, "metadata.yaml", upstream("web")+"spec: {addressPolicy: {allowLoopback: true}}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 169.254.169.254, port: 80}]"))
	for _, tc := range []struct {
		name   string
		file   string
		stderr []string
	}{
		{"DNS name and cloud metadata", refused, []string{
			refused + ": document 2 (EndpointSet shop/web-a): spec.endpoints[1].address: Invalid value: \"vm1.example.internal\": address is not an IP address: EDS carries IP addresses only",
			refused + ": document 2 (EndpointSet shop/web-a): spec.endpoints[2].address: Invalid value: \"169.254.169.254\": address is a link-local address",
		}},
		{"loopback without the opt-in", loopback, []string{
			"the topology is rejected",
			"upstream shop/web: AddressNotAllowed: EndpointSet shop/web-a spec.endpoints[1].address: \"127.0.0.1\" is a loopback address",
			"spec.addressPolicy.allowLoopback: true on the Upstream shop/web",
			"involves EndpointSet shop/web-a (" + loopback + " document 2)",
		}},
		{"link-local despite the opt-in", metadataAllowed, []string{
			metadataAllowed + ": document 2 (EndpointSet shop/web-a): spec.endpoints[0].address", "never allowed",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI("validate", "-f", tc.file)
			if code != exitInvalid || stdout != "" {
				t.Fatalf("exit %d, want %d; stdout %q", code, exitInvalid, stdout)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
	if code, stdout, stderr := runCLI("validate", "-f", allowed); code != exitOK || !strings.Contains(stdout, "3 endpoint(s)") {
		t.Errorf("loopback with the opt-in: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestExplicitNoneAffinity: in files mode an Upstream that sets
// localityAffinity mode None validates, and explain names the mode and
// that the Upstream set it.
func TestExplicitNoneAffinity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "web.yaml", upstream("web")+"spec: {localityAffinity: {mode: None}}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}]"))
	if code, stdout, stderr := runCLI("validate", "-f", dir); code != exitOK || !strings.Contains(stdout, "1 upstream(s)") {
		t.Fatalf("validate: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCLI("explain", "-f", dir)
	if want := "  locality affinity: None (from spec.localityAffinity)\n"; code != exitOK || !strings.Contains(stdout, want) {
		t.Errorf("explain: exit %d, stdout lacks %q:\n%s%s", code, want, stdout, stderr)
	}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func upstream(name string) string {
	return "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: " + name + ", namespace: shop}\n"
}

func locality(name, up string, prio int, zone string, weight int) string {
	return "apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: " + name + ", namespace: shop}\n" +
		"spec: {upstream: " + up + ", priority: " + strconv.Itoa(prio) + ", region: eu, zone: " + zone + ", weight: " + strconv.Itoa(weight) + "}\n"
}

func endpointSet(name, up, zone, endpoints string) string {
	return "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: " + name + ", namespace: shop}\n" +
		"spec:\n  upstream: " + up + "\n  locality: {region: eu, zone: " + zone + "}\n  endpoints: " + endpoints + "\n"
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	invalid := write(t, dir, "invalid.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80, weight: 0}]"))
	unknownField := write(t, dir, "typo.yaml", upstream("web")+"spec: {protcol: GRPC}\n")
	// Two Locality objects for the same group with different weights, in two files.
	conflict := filepath.Join(dir, "conflict")
	if err := os.Mkdir(conflict, 0o755); err != nil {
		t.Fatal(err)
	}
	first := write(t, conflict, "a.yaml", upstream("web")+"---\n"+locality("web-a1", "web", 1, "a", 2)+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}]"))
	second := write(t, conflict, "b.yaml", "# the same group again\n"+locality("web-a2", "web", 1, "a", 3))
	duplicate := write(t, dir, "dup.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}]")+"---\n"+
		endpointSet("web-b", "web", "b", "[{address: 10.0.0.1, port: 80}]"))
	valid := write(t, dir, "valid.yaml", upstream("web"))
	missing := filepath.Join(dir, "does-not-exist.yaml")

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string // each must appear in stderr
	}{
		{"no args", nil, exitUsage, []string{"Usage:\n  controlplane [command]", "serve ", "explain "}},
		{"unknown command", []string{"serve-all"}, exitUsage, []string{`unknown command "serve-all"`, "Run 'controlplane --help' for usage."}},
		{"explain without -f", []string{"explain"}, exitUsage, []string{"-f PATH is required", "Run 'controlplane explain --help' for usage."}},
		{"serve without -f", []string{"serve"}, exitUsage, []string{"-f PATH is required"}},
		{"serve bad log level", []string{"serve", "-f", examples, "--log-level", "loud"}, exitUsage, []string{`--log-level "loud"`}},
		{"serve invalid manifests", []string{"serve", "-f", invalid, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, exitInvalid,
			[]string{"initial manifests are invalid; nothing to serve", "invalid.yaml: document 2 (EndpointSet shop/web-a): spec.endpoints[0].weight"}},
		{"serve contradiction", []string{"serve", "-f", conflict, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, exitInvalid,
			[]string{"InconsistentTopology", "Locality shop/web-a1", "Locality shop/web-a2"}},
		{"serve debounce-max below debounce", []string{"serve", "-f", examples, "--debounce", "100ms", "--debounce-max", "50ms"}, exitUsage,
			[]string{"--debounce-max 50ms is shorter than --debounce 100ms"}},
		{"serve negative debounce", []string{"serve", "-f", examples, "--debounce", "-1s"}, exitUsage, []string{"--debounce -1s: want 0s to 1m0s"}},
		{"serve negative settle", []string{"serve", "-f", examples, "--settle", "-1s"}, exitUsage, []string{"--settle -1s: want 0s to 10m0s"}},
		{"serve no load-report cells", []string{"serve", "-f", examples, "--load-report-max-cells", "0"}, exitUsage,
			[]string{"--load-report-max-cells 0: want 1 to 100000000"}},
		{"serve load-report bucket too short", []string{"serve", "-f", examples, "--load-report-bucket", "50ms"}, exitUsage,
			[]string{"--load-report-bucket 50ms: want 100ms to 10s"}},
		{"serve half a TLS pair", []string{"serve", "-f", examples, "--tls-cert", missing, "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, exitInvalid,
			[]string{"both a certificate and a key file are required"}},
		{"validate without -f", []string{"validate"}, exitUsage, []string{"-f PATH is required", "Run 'controlplane validate --help' for usage."}},
		{"empty -f", []string{"validate", "-f", ""}, exitUsage, []string{"-f PATH is required"}},
		{"bad -o", []string{"explain", "-f", examples, "-o", "yaml"}, exitUsage, []string{`-o "yaml": want text or json`}},
		{"unknown flag", []string{"explain", "--frobnicate"}, exitUsage, []string{"unknown flag --frobnicate\n", "Run 'controlplane explain --help' for usage."}},
		{"misspelt flag", []string{"explain", "--upstrem", "shop/checkout"}, exitUsage, []string{"unknown flag --upstrem; did you mean --upstream?"}},
		{"unknown shorthand", []string{"explain", "-x"}, exitUsage, []string{"unknown flag -x\n"}},
		{"flag without its value", []string{"explain", "-f", examples, "--upstream"}, exitUsage, []string{"--upstream needs a value\n"}},
		{"duration without its value", []string{"serve", "--debounce"}, exitUsage, []string{"--debounce needs a value: a duration such as 500ms, 30s or 5m"}},
		{"bad duration", []string{"serve", "--debounce", "soon"}, exitUsage, []string{`--debounce "soon": want a duration such as 500ms, 30s or 5m`}},
		{"single-dash long flag", []string{"explain", "-upstream", "shop/checkout"}, exitUsage, []string{"unknown flag -upstream: a flag of more than one letter takes two dashes: --upstream"}},
		{"validate positional argument", []string{"validate", "-f", examples, "extra.yaml"}, exitUsage, []string{`unexpected argument "extra.yaml"`}},
		{"positional argument", []string{"explain", "-f", examples, "extra.yaml"}, exitUsage, []string{`unexpected argument "extra.yaml"`}},
		{"bad --simulate", []string{"explain", "-f", examples, "--simulate", "-1"}, exitUsage, []string{`--simulate "-1": want a whole number, 0 or more`}},
		{"--simulate past 64 bits", []string{"explain", "-f", examples, "--simulate", "99999999999999999999"}, exitUsage, []string{`--simulate "99999999999999999999": want a whole number of at most 64 bits`}},
		{"too many picks", []string{"explain", "-f", examples, "--simulate", "1000000001"}, exitUsage, []string{"--simulate 1000000001: want 0 to 1000000000 picks"}},
		{"nonexistent file", []string{"validate", "-f", missing}, exitInvalid, []string{missing, "no such file"}},
		{"nonexistent file explain", []string{"explain", "-f", valid, "-f", missing}, exitInvalid, []string{missing}},
		{"invalid manifest", []string{"validate", "-f", invalid}, exitInvalid,
			[]string{"invalid manifests", invalid + ": document 2 (EndpointSet shop/web-a): spec.endpoints[0].weight: Invalid value: 0"}},
		{"invalid manifest explain", []string{"explain", "-f", invalid}, exitInvalid,
			[]string{invalid, "document 2", "EndpointSet shop/web-a", "spec.endpoints[0].weight"}},
		{"unknown field", []string{"validate", "-f", unknownField}, exitInvalid,
			[]string{unknownField + ": document 1 (Upstream shop/web)", "spec.protcol: unknown field"}},
		{"inconsistent topology", []string{"validate", "-f", conflict}, exitInvalid, []string{
			"the topology is rejected",
			"upstream shop/web: InconsistentTopology",
			"involves Locality shop/web-a1 (" + first + " document 2)",
			"involves Locality shop/web-a2 (" + second + " document 1)",
		}},
		{"inconsistent topology explain", []string{"explain", "-f", conflict, "-o", "json"}, exitInvalid,
			[]string{"InconsistentTopology", "Locality shop/web-a1", first, "Locality shop/web-a2", second}},
		{"duplicate endpoint across sets", []string{"validate", "-f", duplicate}, exitInvalid,
			[]string{"DuplicateEndpoint", "EndpointSet shop/web-a (" + duplicate + " document 2)", "EndpointSet shop/web-b (" + duplicate + " document 3)"}},
		{"unknown upstream", []string{"explain", "-f", examples, "--upstream", "shop/nope"}, exitInvalid, []string{"--upstream shop/nope: no such upstream"}},
		{"unknown upstream, default namespace", []string{"explain", "-f", examples, "--upstream", "checkout"}, exitInvalid,
			[]string{"--upstream default/checkout: no such upstream in the manifests; did you mean shop/checkout?"}},
		{"unknown upstream, a slip", []string{"explain", "-f", examples, "--upstream", "shop/chekcout"}, exitInvalid,
			[]string{"--upstream shop/chekcout: no such upstream in the manifests; did you mean shop/checkout?"}},
		{"malformed --upstream", []string{"explain", "-f", examples, "--upstream", "a/b/c"}, exitUsage, []string{`"a/b/c": want NAMESPACE/NAME`}},
		{"empty namespace in --upstream", []string{"explain", "-f", examples, "--upstream", "/checkout"}, exitUsage, []string{"want NAMESPACE/NAME"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout should be empty on failure, got:\n%s", stdout)
			}
			checkNoCrash(t, stderr)
		})
	}
}

// buildBinary builds the command with main.version set to version, or
// skips the test in -short mode or without a go tool.
func buildBinary(t *testing.T, version string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	bin := filepath.Join(t.TempDir(), "controlplane")
	build := exec.Command(goTool, "build", "-ldflags", "-X main.version="+version, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinary builds the real command and runs it, checking exit codes as a
// shell sees them. Not parallel: the peak RSS of the alias bomb's process
// grows when its garbage collector shares the CPU with the other tests.
func TestBinary(t *testing.T) {
	bin := buildBinary(t, "v0.0.0-test")
	invalid := write(t, t.TempDir(), "bad.yaml", upstream("web")+"spec: {panicThreshold: 101}\n")
	// a 1 MB anchor used 3,000 times: 3 GB once expanded
	bomb := write(t, t.TempDir(), "bomb.yaml", "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata:\n  name: bomb\n  namespace: shop\n"+
		"  annotations:\n    a: &big "+strings.Repeat("x", 1<<20)+"\n    b: ["+strings.TrimSuffix(strings.Repeat("*big, ", 3000), ", ")+"]\n")
	afterEnd := write(t, t.TempDir(), "end.yaml", upstream("web")+"...\nspec: {panicThreshold: 40}\n")
	vms := write(t, t.TempDir(), "vms.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: vm1.example.internal, port: 80}, {address: 169.254.169.254, port: 80}]"))
	// a Locality's zone typo'd: its weight would apply to nothing
	zoneTypo := write(t, t.TempDir(), "zone.yaml", upstream("web")+"---\n"+locality("web-a", "web", 0, "eu-west-la", 3)+"---\n"+
		endpointSet("web-a", "web", "eu-west-1a", "[{address: 10.0.0.1, port: 80}]"))
	tests := []struct {
		args      []string
		code      int
		stdout    string
		stderr    string
		maxRSSMiB int64 // 0: not checked
	}{
		{[]string{"explain", "-f", examples}, 0, "Upstream shop/checkout", "", 0},
		{[]string{"version"}, 0, "controlplane v0.0.0-test", "", 0},
		{[]string{"validate", "-f", invalid}, 1, "", invalid + ": document 1 (Upstream shop/web): spec.panicThreshold", 0},
		{[]string{"validate", "-f", bomb}, 1, "", bomb + ": document 1: its YAML aliases expand it beyond 64 MiB", 200},
		{[]string{"explain", "-f", bomb}, 1, "", "its YAML aliases expand it beyond 64 MiB", 200},
		{[]string{"validate", "-f", afterEnd}, 0, "valid: 1 object", afterEnd + `: document 1: line 5 comes after the document end marker "..."`, 0},
		{[]string{"validate", "-f", vms}, 1, "", vms + ": document 2 (EndpointSet shop/web-a): spec.endpoints[0].address: Invalid value: \"vm1.example.internal\": address is not an IP address", 0},
		{[]string{"validate", "-f", vms}, 1, "", vms + ": document 2 (EndpointSet shop/web-a): spec.endpoints[1].address: Invalid value: \"169.254.169.254\": address is a link-local address", 0},
		{[]string{"validate", "-f", zoneTypo}, 1, "", zoneTypo + `: document 2 (Locality shop/web-a): spec.zone: matches no endpoints of Upstream shop/web: no endpoint set is in priority 0, locality region "eu" zone "eu-west-la" (did you mean zone "eu-west-1a"?`, 0},
		{[]string{"bogus"}, 2, "", "unknown command", 0},
	}
	for _, tc := range tests {
		cmd := exec.Command(bin, tc.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("%v: stdout lacks %q:\n%s", tc.args, tc.stdout, stdout.String())
		}
		if !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%v: stderr lacks %q:\n%s", tc.args, tc.stderr, stderr.String())
		}
		checkNoCrash(t, stderr.String())
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && tc.maxRSSMiB > 0 && ru.Maxrss>>10 > tc.maxRSSMiB {
			t.Errorf("%v: peak RSS %d MiB, want under %d MiB", tc.args, ru.Maxrss>>10, tc.maxRSSMiB)
		}
	}
}

// TestHelpFitsIn100Columns: every command's help, flags included, is
// wrapped to at most 100 columns when it is not written to a terminal
// (whose own narrower width applies).
func TestHelpFitsIn100Columns(t *testing.T) {
	t.Parallel()
	cmds := [][]string{{"--help"}}
	for _, c := range newRoot(io.Discard, io.Discard).Commands() {
		cmds = append(cmds, []string{c.Name(), "--help"})
	}
	for _, args := range cmds {
		code, stdout, stderr := runCLI(args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if n := utf8.RuneCountInString(line); n > maxHelpWidth {
				t.Errorf("%v: a line of %d columns:\n%s", args, n, line)
			}
		}
	}
}
