package layering

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layers is the map of the module: every package, from the bottom up. The
// rule: a non-test file imports only packages of lower layers, never one of
// its own layer or above. A new package goes into the lowest layer above
// everything it imports; if it fits nowhere, the design has changed and this
// table with it.
var layers = []struct {
	name     string
	about    string // the layer as docs/architecture.md's table names it
	packages []string
}{
	// Standard library and third-party code only: the share math, the API
	// types and their generated CRDs, the Kubernetes side's condition
	// vocabulary, CRD schema check, Lease election and shared ConfigMaps, the
	// spatial cell map, the table of xDS types, the Prometheus collectors,
	// the "did you mean" of names, the clients' consistent-hash tables and
	// the simulated fleet of `controlplane load`.
	{"leaves", "leaves: standard library and third-party code only", []string{
		"api/v1alpha1",
		"config/crd",
		"pkg/hashring",
		"pkg/identity",
		"pkg/kube/conditions",
		"pkg/kube/crdschema",
		"pkg/kube/leader",
		"pkg/kube/shares",
		"pkg/loadgen",
		"pkg/metrics",
		"pkg/partitionmap",
		"pkg/partitionmap/luatest",
		"pkg/suggest",
		"pkg/weights",
		"pkg/xds/xdstype",
	}},
	// The share math run again per client locality; the token verifier's
	// questions answered from tables, for tests.
	{"affinity", "the share math per client locality; the token verifier's questions answered from tables (for tests)", []string{
		"pkg/affinity",
		"pkg/identity/identitytest",
	}},
	// The single-writer model every source feeds and every reader reads.
	{"model", "the model", []string{
		"pkg/topology",
	}},
	// The names of the published clusters, which the translator renders and
	// the load reports read back.
	{"names", "names of the published clusters", []string{
		"pkg/xds/xdsname",
	}},
	// Each reads or fills the model for one purpose.
	{"over the model", "over the model", []string{
		"pkg/convert",
		"pkg/signals/healthcheck",
		"pkg/signals/loadreport",
		"pkg/signals/demand",
		"pkg/topology/topologytest",
		"pkg/metrics/upstreamgauges",
		"pkg/xds/translate",
		"pkg/xds/xdscache",
	}},
	{"built on those", "built on those", []string{
		"pkg/explain",
		"pkg/manifest",
		"pkg/signals/outlier",
		"pkg/xds/publish",
		"pkg/xds/server",
	}},
	{"sources and views", "sources and views", []string{
		"pkg/planelog",
		"pkg/files",
		"pkg/kube/source",
		"pkg/trafficmap",
	}},
	// What the Kubernetes leader writes back: status and Events, from what
	// the reader found and the snapshot.
	{"writing back", "writing back to the cluster: status and Events", []string{
		"pkg/kube/status",
	}},
	// What the Kubernetes leader decides and writes into Upstreams' status:
	// the active checks' verdicts and the fleet's outlier ejections.
	{"leader's decisions", "the leader's decisions: active checks and fleet outlier detection", []string{
		"pkg/kube/checks",
		"pkg/kube/outliers",
	}},
	// One Kubernetes replica: the reader, the writers and the election.
	{"kubernetes replica", "one Kubernetes replica", []string{
		"pkg/kube/replica",
	}},
	{"admin port", "the admin port", []string{
		"pkg/admin",
	}},
	// One control-plane process assembled from all of the above.
	{"wiring", "wiring", []string{
		"pkg/controlplane",
	}},
	// Real gRPC traffic through grpc-go's xDS client, for the demo and the
	// end-to-end suites; the controlplane binary never links it (apart).
	{"traffic", "real gRPC traffic through grpc-go's xDS client: the demo's and the suites'", []string{
		"pkg/grpctraffic",
	}},
	{"commands", "commands", []string{
		"cmd/controlplane",
		"cmd/demo",
		"hack/crdversion",
		"hack/testsummary",
	}},
	// Imported by tests only (the rules below keep pkg/ and cmd/ off them).
	{"test helpers", "test helpers", []string{
		"test/adstest",
		"test/cpbinary",
		"test/golden",
		"test/history",
		"test/kubemanifests",
		"test/splitcheck",
		"test/testkit",
	}},
	// Test helpers built on the ones above.
	{"test harnesses", "test harnesses", []string{
		"test/xdsproxy",
	}},
	// Tests and their tools; nothing imports them.
	{"test suites", "test suites", []string{
		"test/browser",
		"test/chart",
		"test/e2e",
		"test/kind",
		"test/kube",
		"test/layering",
		"test/logkeys",
		"test/resilience",
		"test/scale",
		"test/scale/cmd/benchscale",
		"test/scale/cmd/gcpanchor",
		"test/scale/cmd/fleettable",
		"test/scale/cmd/kubefleet",
		"test/soak",
	}},
}

// apart keeps apart what the layers alone would let meet: the sources turn
// the outside world into topology batches and know nothing of how xDS renders
// it, so no source depends on the xDS packages, directly or through another
// package.
var apart = []struct {
	under string   // the packages of this directory and below
	to    []string // depend on none of these
	rule  string
}{{
	under: "pkg/files/",
	to:    []string{"pkg/xds/translate", "pkg/xds/xdscache", "pkg/xds/publish", "pkg/xds/server"},
	rule:  "a source never depends on the xDS translator, cache, publisher or server, not even through another package",
}, {
	under: "cmd/controlplane/",
	to:    []string{"pkg/grpctraffic"},
	rule:  "the controlplane binary never links grpc-go's xDS client: real gRPC traffic is the demo's and the tests'",
}, {
	under: "pkg/kube/source/",
	to:    []string{"pkg/xds/translate", "pkg/xds/xdscache", "pkg/xds/publish", "pkg/xds/server"},
	rule:  "a source never depends on the xDS translator, cache, publisher or server, not even through another package",
}}

// edge is one package importing another, both relative to the module root.
type edge struct{ from, to string }

// use is one import declaration in one file.
type use struct {
	file string // relative to the module root, with the import's line
	to   string
	test bool
}

func TestLayering(t *testing.T) {
	root, module := moduleRoot(t)
	pkgs, uses := readTree(t, root, module)

	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l.packages {
			if j, dup := rank[p]; dup {
				t.Errorf("%s is listed twice in layers, in %q and %q", p, layers[j].name, l.name)
			}
			rank[p] = i
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		if _, ok := rank[p]; !ok {
			t.Errorf("package %s is in no layer: add it to layers in test/layering/layering_test.go, in the lowest layer above everything it imports", p)
		}
	}
	for p := range rank {
		if !pkgs[p] {
			t.Errorf("layers lists %s, which is not a package of the tree any more: remove it", p)
		}
	}

	graph := map[string]map[string]bool{} // non-test imports that break no rule
	seen := map[edge]bool{}
	testEdges := map[edge]bool{}
	for _, from := range slices.Sorted(maps.Keys(uses)) {
		for _, u := range uses[from] {
			e := edge{from, u.to}
			if u.test {
				if u.to != from {
					testEdges[e] = true
				}
			} else {
				seen[e] = true
			}
			why := breaks(from, u, rank)
			if why == "" {
				if !u.test {
					if graph[from] == nil {
						graph[from] = map[string]bool{}
					}
					graph[from][u.to] = true
				}
				continue
			}
			t.Errorf("%s imports %s: %s", u.file, u.to, why)
		}
	}
	for _, a := range apart {
		for _, from := range slices.Sorted(maps.Keys(pkgs)) {
			if !strings.HasPrefix(from+"/", a.under) {
				continue
			}
			if path := pathTo(graph, from, a.to); len(path) > 1 {
				t.Errorf("%s: %s", strings.Join(path, " → "), a.rule)
			}
		}
	}

	for e := range seen {
		delete(testEdges, e)
	}
	t.Logf("%d packages; %d import edges between them from non-test files, %d more from _test files only",
		len(pkgs), len(seen), len(testEdges))
}

// breaks says which rule an import breaks, or "" if it breaks none.
func breaks(from string, u use, rank map[string]int) string {
	to := u.to
	rf, okf := rank[from]
	rt, okt := rank[to]
	if !okf || !okt {
		return "" // reported once, as a package in no layer
	}
	switch {
	case strings.HasPrefix(to, "cmd/"):
		return "nothing imports cmd/"
	case u.test && layers[rt].name == "test suites":
		return "a test suite is never imported"
	case u.test:
		return "" // a test may import any package of api/, pkg/ and the test helpers
	case !strings.HasPrefix(from, "test/") && strings.HasPrefix(to, "test/"):
		return "outside test/, only _test files import test/"
	case strings.HasSuffix(to, "test") && !strings.HasPrefix(from, "test/"):
		return fmt.Sprintf("%s is a helper for tests: outside test/, only _test files import it", to)
	case rt == rf:
		return fmt.Sprintf("both are in layer %d (%s), and packages of one layer do not import each other", rf, layers[rf].name)
	case rt > rf:
		return fmt.Sprintf("%s is in layer %d (%s) and %s in layer %d (%s): an import goes only to a lower layer",
			from, rf, layers[rf].name, to, rt, layers[rt].name)
	}
	return ""
}

// pathTo finds a chain of imports from one package to any of targets.
func pathTo(graph map[string]map[string]bool, from string, targets []string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && slices.Contains(targets, p) {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		for _, q := range slices.Sorted(maps.Keys(graph[p])) {
			if _, ok := prev[q]; !ok {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// moduleRoot finds the directory of go.mod above the test's directory and the
// module path it declares.
func moduleRoot(t *testing.T) (root, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			s := bufio.NewScanner(f)
			for s.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s: no module line", f.Name())
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// readTree parses the imports of every Go file of the module, whatever its
// build tags, and returns the packages (directories holding Go files,
// relative to the root) and, per package, its imports of module packages.
func readTree(t *testing.T, root, module string) (map[string]bool, map[string][]use) {
	t.Helper()
	pkgs := map[string]bool{}
	uses := map[string][]use{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			switch {
			case rel == ".":
				return nil
			case rel == "bin", name == "testdata", name == "vendor", strings.HasPrefix(name, "."), strings.HasPrefix(name, "_"):
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		pkgs[pkg] = true
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			uses[pkg] = append(uses[pkg], use{
				file: fmt.Sprintf("%s:%d", rel, fset.Position(spec.Pos()).Line),
				to:   to,
				test: strings.HasSuffix(rel, "_test.go"),
			})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the module's imports: %v", err)
	}
	return pkgs, uses
}
