package manifest_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

const (
	upstreamX = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata:
  name: x
  namespace: shop
spec:
  protocol: GRPC
`
	localityX = `apiVersion: poise.dev/v1alpha1
kind: Locality
metadata:
  name: x-eu
  namespace: shop
spec:
  upstream: x
  region: eu
  weight: 2
`
	setX = `apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata:
  name: x-eu
  namespace: shop
spec:
  upstream: x
  locality: {region: eu}
  endpoints:
  - {address: 10.0.0.1, port: 80}
  - {address: 10.0.0.2, port: 80, weight: 3}
`
)

// writeFiles writes name → content under dir, creating subdirectories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wantErr is one expected manifest.Error; File is relative to the test's
// directory, and Detail need only be contained in the actual detail.
type wantErr struct {
	File     string
	Document int
	Object   string
	Field    string
	Detail   string
}

func docs(ds ...string) string { return strings.Join(ds, "---\n") }

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		load  []string // relative to the test directory; default: the directory
		want  []wantErr
	}{
		{
			name:  "unknown kind",
			files: map[string]string{"a.yaml": docs(upstreamX, "apiVersion: poise.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c, namespace: shop}\n")},
			want:  []wantErr{{"a.yaml", 2, "Cluster shop/c", "kind", `unknown kind "Cluster": want Upstream, Locality, EndpointSet, SpatialDomain or Partition`}},
		},
		{
			name:  "wrong apiVersion",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "poise.dev/v1alpha1", "poise.dev/v1", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "apiVersion", `unsupported apiVersion "poise.dev/v1": want poise.dev/v1alpha1`}},
		},
		{
			// the core group has no Upstream: the group was left out
			name:  "Poise kind in the core group",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "poise.dev/v1alpha1", "v1alpha1", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "apiVersion", `unsupported apiVersion "v1alpha1": want poise.dev/v1alpha1`}},
		},
		{
			name:  "the group without a version",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "poise.dev/v1alpha1", "poise.dev", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "apiVersion", `unsupported apiVersion "poise.dev"`}},
		},
		{
			name:  "unknown kind of the poise.dev group",
			files: map[string]string{"a.yaml": docs(strings.Replace(upstreamX, "kind: Upstream", "kind: Upstreams", 1), "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")},
			want:  []wantErr{{"a.yaml", 1, "Upstreams shop/x", "kind", `unknown kind "Upstreams"`}},
		},
		{
			name:  "a repeated key does not hide the other problems",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "protocol: GRPC", "protocol: GRPC\n  protocol: SCTP\n  colour: red", 1)},
			want: []wantErr{
				{"a.yaml", 1, "Upstream shop/x", "spec.protocol", "duplicate field: set on line 7 and again on line 8"},
				{"a.yaml", 1, "Upstream shop/x", "spec.colour", "unknown field"},
				{"a.yaml", 1, "Upstream shop/x", "spec.protocol", `Unsupported value: "SCTP"`},
			},
		},
		{
			name:  "every problem of a document, in order",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "protocol: GRPC", "protocol: SCTP\n  colour: red\n  connectTimout: 1s", 1)},
			want: []wantErr{
				{"a.yaml", 1, "Upstream shop/x", "spec.colour", "unknown field"},
				{"a.yaml", 1, "Upstream shop/x", "spec.connectTimout", "unknown field"},
				{"a.yaml", 1, "Upstream shop/x", "spec.protocol", `Unsupported value: "SCTP"`},
			},
		},
		{
			name:  "unknown field",
			files: map[string]string{"a.yaml": docs(upstreamX, localityX, strings.Replace(setX, "port: 80, weight: 3", "port: 80, wieght: 3", 1))},
			want:  []wantErr{{"a.yaml", 3, "EndpointSet shop/x-eu", "spec.endpoints[1].wieght", "unknown field"}},
		},
		{
			name:  "unknown field case mismatch",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "protocol:", "Protocol:", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "spec.Protocol", "unknown field"}},
		},
		{
			name:  "unknown top-level field",
			files: map[string]string{"a.yaml": upstreamX + "extra: 1\n"},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "extra", "unknown field"}},
		},
		{
			name:  "duplicate field",
			files: map[string]string{"a.yaml": upstreamX + "  protocol: HTTP1\n"},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "spec.protocol", "duplicate field: set on line 7 and again on line 8"}},
		},
		{
			name:  "duplicate field in a list item",
			files: map[string]string{"a.yaml": docs(upstreamX, strings.Replace(setX, "port: 80, weight: 3", "port: 80, port: 81", 1))},
			want:  []wantErr{{"a.yaml", 2, "EndpointSet shop/x-eu", "spec.endpoints[1].port", "duplicate field"}},
		},
		{
			name:  "duplicate field in JSON",
			files: map[string]string{"a.json": `{"apiVersion": "poise.dev/v1alpha1", "kind": "Upstream", "metadata": {"name": "x", "name": "y"}}`},
			want:  []wantErr{{"a.json", 1, "Upstream default/y", "metadata.name", "duplicate field"}},
		},
		{
			name:  "invalid value",
			files: map[string]string{"a.yaml": docs(upstreamX, strings.Replace(setX, "weight: 3", "weight: 0", 1))},
			want:  []wantErr{{"a.yaml", 2, "EndpointSet shop/x-eu", "spec.endpoints[1].weight", "Invalid value: 0: must be between 1 and 4294967295"}},
		},
		{
			name:  "invalid enum",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "GRPC", "HTTP3", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "spec.protocol", `Unsupported value: "HTTP3"`}},
		},
		{
			name:  "wrong type",
			files: map[string]string{"a.yaml": upstreamX + "  overprovisioningFactor: lots\n"},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "spec.overprovisioningFactor", `want an integer, got string "lots"`}},
		},
		{
			name:  "bad duration",
			files: map[string]string{"a.yaml": upstreamX + "  connectTimeout: 5 seconds\n"},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/x", "spec.connectTimeout", `want a duration such as "5s" or "1m30s", got string "5 seconds"`}},
		},
		{
			// every value of the wrong type and every unknown field, each on
			// its path, as every other problem is named
			name: "type errors name the field path",
			files: map[string]string{"a.yaml": docs(upstreamX,
				strings.Replace(localityX, "weight: 2", "weight: \"3\"\n  priority: first\n  zone: [a]\n  colour: red", 1),
				strings.NewReplacer("port: 80}", "port: \"80\"}", "weight: 3}", "weigth: 3}").Replace(setX),
				strings.Replace(upstreamX, "protocol: GRPC", "protocol: 2\n  connectTimeout: 10\n  overprovisioningFactor: 99999999999\n  addressPolicy: {allowLoopback: \"yes\"}", 1),
			)},
			want: []wantErr{
				{"a.yaml", 2, "Locality shop/x-eu", "spec.colour", "unknown field"},
				{"a.yaml", 2, "Locality shop/x-eu", "spec.priority", `want an integer, got string "first"`},
				{"a.yaml", 2, "Locality shop/x-eu", "spec.weight", `want an integer, got string "3" (the quotes make it a string: remove them)`},
				{"a.yaml", 2, "Locality shop/x-eu", "spec.zone", "want a string, got a list"},
				{"a.yaml", 3, "EndpointSet shop/x-eu", "spec.endpoints[1].weigth", "unknown field (did you mean spec.endpoints[1].weight?)"},
				{"a.yaml", 3, "EndpointSet shop/x-eu", "spec.endpoints[0].port", `want an integer, got string "80" (the quotes make it a string: remove them)`},
				{"a.yaml", 4, "Upstream shop/x", "spec.addressPolicy.allowLoopback", `want true or false, got string "yes"`},
				{"a.yaml", 4, "Upstream shop/x", "spec.connectTimeout", `want a duration such as "5s" or "1m30s", got number 10`},
				{"a.yaml", 4, "Upstream shop/x", "spec.overprovisioningFactor", "want an integer from -2147483648 to 2147483647, got number 99999999999"},
				{"a.yaml", 4, "Upstream shop/x", "spec.protocol", `want a string, got number 2 (YAML reads it as a number: quote it, "2")`},
			},
		},
		{
			name: "type errors in spatial objects and metadata",
			files: map[string]string{"a.yaml": docs(
				strings.Replace(domainX, "gridDegrees: 10", "gridDegrees: ten", 1),
				strings.NewReplacer("replicas: [us-1]", "replicas: us-1", "name: pacific", "name: 7").Replace(partitionX),
			)},
			want: []wantErr{
				{"a.yaml", 1, "SpatialDomain shop/cadastre", "spec.gridDegrees", `want an integer, got string "ten"`},
				{"a.yaml", 2, "", "metadata.name", "not a Kubernetes object: want a string, got number 7"},
			},
		},
		{
			name: "unknown fields say what was meant, for every kind",
			files: map[string]string{"a.yaml": docs(
				strings.Replace(upstreamX, "protocol:", "protcol:", 1),
				strings.NewReplacer("weight: 2", "weigth: 2", "namespace: shop", "namespace: shop\n  lables: {a: b}").Replace(localityX),
				strings.Replace(setX, "{address: 10.0.0.1,", "{adress: 10.0.0.1,", 1),
				strings.Replace(domainX, "{name: eu-1, upstream: x,", "{name: eu-1, upstrem: x,", 1),
				strings.NewReplacer("west: 170", "wset: 170", "domain: cadastre", "Domain: cadastre").Replace(partitionX),
				strings.Replace(upstreamX, "spec:", "sepc:", 1),
			)},
			want: []wantErr{
				{"a.yaml", 1, "Upstream shop/x", "spec.protcol", "unknown field (did you mean spec.protocol?)"},
				{"a.yaml", 2, "Locality shop/x-eu", "metadata.lables", "unknown field (did you mean metadata.labels?)"},
				{"a.yaml", 2, "Locality shop/x-eu", "spec.weigth", "unknown field (did you mean spec.weight?)"},
				{"a.yaml", 3, "EndpointSet shop/x-eu", "spec.endpoints[0].adress", "unknown field (did you mean spec.endpoints[0].address?)"},
				{"a.yaml", 3, "EndpointSet shop/x-eu", "spec.endpoints[0].address", "Required value"},
				{"a.yaml", 4, "SpatialDomain shop/cadastre", "spec.replicas[0].upstrem", "unknown field (did you mean spec.replicas[0].upstream?)"},
				{"a.yaml", 4, "SpatialDomain shop/cadastre", "spec.replicas[0].upstream", "Required value"},
				{"a.yaml", 5, "Partition shop/pacific", "spec.Domain", "unknown field (did you mean spec.domain?)"},
				{"a.yaml", 5, "Partition shop/pacific", "spec.extent.wset", "unknown field (did you mean spec.extent.west?)"},
				{"a.yaml", 5, "Partition shop/pacific", "spec.domain", "Required value"},
				{"a.yaml", 6, "Upstream shop/x", "sepc", "unknown field (did you mean spec?)"},
			},
		},
		{
			// the document's eighth line, the file's 26th
			name:  "a YAML syntax error names the line of the file",
			files: map[string]string{"a.yaml": docs(upstreamX, localityX, strings.Replace(upstreamX, "protocol: GRPC", "protocol: GRPC\n   bad: indent", 1))},
			want:  []wantErr{{"a.yaml", 3, "", "", "not valid YAML: line 26: mapping values are not allowed in this context"}},
		},
		{
			name:  "a repeated key names the lines of the file",
			files: map[string]string{"a.yaml": docs(upstreamX, strings.Replace(localityX, "weight: 2", "weight: 2\n  weight: 3", 1))},
			want:  []wantErr{{"a.yaml", 2, "Locality shop/x-eu", "spec.weight", "duplicate field: set on line 17 and again on line 18"}},
		},
		{
			name: "a Poise kind under a mistyped group",
			files: map[string]string{"a.yaml": docs(
				strings.Replace(upstreamX, "poise.dev/", "poise.io/", 1),
				strings.Replace(localityX, "poise.dev/", "piose.dev/", 1),
				strings.Replace(upstreamX, "poise.dev/", "gloo.solo.io/", 1), // another project's Upstream: skipped
			)},
			want: []wantErr{
				{"a.yaml", 1, "Upstream shop/x", "apiVersion", `unknown apiVersion "poise.io/v1alpha1" for kind Upstream: did you mean poise.dev/v1alpha1?`},
				{"a.yaml", 2, "Locality shop/x-eu", "apiVersion", `unknown apiVersion "piose.dev/v1alpha1" for kind Locality: did you mean poise.dev/v1alpha1?`},
			},
		},
		{
			name:  "a mistyped kind",
			files: map[string]string{"a.yaml": docs(strings.Replace(upstreamX, "kind: Upstream", "kind: Upstrem", 1), strings.Replace(localityX, "kind: Locality", "kind: locality", 1))},
			want: []wantErr{
				{"a.yaml", 1, "Upstrem shop/x", "kind", `unknown kind "Upstrem": want Upstream, Locality, EndpointSet, SpatialDomain or Partition (did you mean Upstream?)`},
				{"a.yaml", 2, "locality shop/x-eu", "kind", `(did you mean Locality?)`},
			},
		},
		{
			name:  "health for an endpoint not in spec",
			files: map[string]string{"a.yaml": setX + "status:\n  health:\n  - {address: 10.0.0.9, port: 80, probe: Unhealthy}\n"},
			want:  []wantErr{{"a.yaml", 1, "EndpointSet shop/x-eu", "status.health[0]", "10.0.0.9 port 80 is not in spec.endpoints"}},
		},
		{
			name: "same object in two files",
			files: map[string]string{
				"a.yaml": docs(localityX, upstreamX),
				"b.yaml": docs(setX, upstreamX),
			},
			want: []wantErr{{"b.yaml", 2, "Upstream shop/x", "metadata.name", "Upstream shop/x is also defined in a.yaml document 2"}},
		},
		{
			name:  "same object twice in one file, namespace defaulted",
			files: map[string]string{"a.yaml": docs(strings.Replace(upstreamX, "  namespace: shop\n", "", 1), strings.Replace(upstreamX, "shop", "default", 1))},
			want:  []wantErr{{"a.yaml", 2, "Upstream default/x", "metadata.name", "also defined in a.yaml document 1"}},
		},
		{
			name:  "same name, different kinds is fine; same kind different namespace is fine",
			files: map[string]string{"a.yaml": docs(localityX, setX, upstreamX, strings.Replace(upstreamX, "shop", "other", 1)), "b.yaml": "kind: Upstream\n"},
			want:  []wantErr{{"b.yaml", 1, "", "", "apiVersion and kind are required"}},
		},
		{
			name:  "malformed YAML",
			files: map[string]string{"a.yaml": docs(upstreamX, "apiVersion: poise.dev/v1alpha1\nkind: Locality\nspec: [upstream: x\n", localityX)},
			want:  []wantErr{{"a.yaml", 2, "", "", "not valid YAML"}},
		},
		{
			name:  "tab indentation",
			files: map[string]string{"a.yaml": "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata:\n\tname: x\n"},
			want:  []wantErr{{"a.yaml", 1, "", "", "not valid YAML"}},
		},
		{
			name:  "missing apiVersion",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "apiVersion: poise.dev/v1alpha1\n", "", 1)},
			want:  []wantErr{{"a.yaml", 1, "", "", "apiVersion and kind are required"}},
		},
		{
			name:  "missing kind",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "kind: Upstream\n", "", 1)},
			want:  []wantErr{{"a.yaml", 1, "", "", "apiVersion and kind are required"}},
		},
		{
			name:  "not an object",
			files: map[string]string{"a.yaml": "- just\n- a list\n"},
			want:  []wantErr{{"a.yaml", 1, "", "", "not a Kubernetes object"}},
		},
		{
			name:  "missing name",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "  name: x\n", "", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream shop/", "metadata.name", "Required value"}},
		},
		{
			name:  "invalid namespace",
			files: map[string]string{"a.yaml": strings.Replace(upstreamX, "namespace: shop", "namespace: Shop", 1)},
			want:  []wantErr{{"a.yaml", 1, "Upstream Shop/x", "metadata.namespace", "Invalid value"}},
		},
		{
			name: "document numbers skip empty and comment-only documents",
			files: map[string]string{"a.yaml": "---\n# a comment\n---\n" + upstreamX + "--- # trailing comment\n# only a comment\n---\n\n---\n" +
				strings.Replace(localityX, "weight: 2", "weight: -2", 1)},
			want: []wantErr{{"a.yaml", 2, "Locality shop/x-eu", "spec.weight", "Invalid value: -2"}},
		},
		{
			name:  "spatial objects: unknown field",
			files: map[string]string{"a.yaml": docs(domainX, strings.Replace(partitionX, "replicas:", "replica:", 1))},
			want: []wantErr{
				{"a.yaml", 2, "Partition shop/pacific", "spec.replica", "unknown field"},
				{"a.yaml", 2, "Partition shop/pacific", "spec.replicas", "Required value"},
			},
		},
		{
			name:  "spatial objects: duplicate field",
			files: map[string]string{"a.yaml": strings.Replace(partitionX, "north: 10}", "north: 10, west: 0}", 1)},
			want:  []wantErr{{"a.yaml", 1, "Partition shop/pacific", "spec.extent.west", "duplicate field"}},
		},
		{
			name:  "spatial objects: a string for a coordinate",
			files: map[string]string{"a.yaml": strings.Replace(partitionX, "west: 170", `west: "170"`, 1)},
			want:  []wantErr{{"a.yaml", 1, "Partition shop/pacific", "spec.extent.west", `want a number, got string "170" (the quotes make it a string: remove them)`}},
		},
		{
			name: "spatial objects: broken fields name file, document, object and field",
			files: map[string]string{
				"a.yaml": docs(
					upstreamX,
					strings.NewReplacer("gridDegrees: 10", "gridDegrees: 7", "localityCapPercent: 50", "localityCapPercent: 101",
						"{name: us-1, upstream: x-us, region: us-east}", "{name: eu-1, upstream: x-us, region: us east}",
						"pathPrefix: /owners", "pathPrefix: /parcels", "allowedRegions: [eu]}", "allowedRegions: []}").Replace(domainX),
					strings.NewReplacer("west: 170", "west: 181", "replicas: [us-1]", "replicas: []").Replace(partitionX),
					strings.NewReplacer("pacific", "europe", "south: -20.5", "south: 20.5", "domain: cadastre", "domain: Cadastre").Replace(partitionX),
				),
			},
			want: []wantErr{
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.gridDegrees", "Invalid value: 7: gridDegrees must divide 180"},
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.localityCapPercent", "Invalid value: 101: must be between 0 and 100"},
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.replicas[1].region", `Invalid value: "us east"`},
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.replicas[1]", `Duplicate value: "replica name \"eu-1\" (also replicas[0])"`},
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.products[1].allowedRegions", "Required value"},
				{"a.yaml", 2, "SpatialDomain shop/cadastre", "spec.products[1].pathPrefix", "each product needs its own pathPrefix"},
				{"a.yaml", 3, "Partition shop/pacific", "spec.extent.west", "Invalid value: 181: must be a longitude between -180 and 180"},
				{"a.yaml", 3, "Partition shop/pacific", "spec.replicas", "Required value"},
				{"a.yaml", 4, "Partition shop/europe", "spec.domain", `Invalid value: "Cadastre"`},
				{"a.yaml", 4, "Partition shop/europe", "spec.extent.south", "south must not be greater than north"},
			},
		},
		{
			name: "every error is reported, in file and document order",
			files: map[string]string{
				"b.yaml": docs(
					strings.Replace(upstreamX, "GRPC", "SPDY", 1)+"  overprovisioningFactor: 0\n",
					strings.Replace(setX, "port: 80, weight: 3", "port: 70000, weight: 0", 1),
					"kind: Locality\n",
				),
				"a.yaml": docs(localityX, localityX+"  prio: 1\n  colour: red\n"),
				"c.yml":  strings.Replace(upstreamX, "v1alpha1", "v1beta1", 1),
			},
			want: []wantErr{
				{"a.yaml", 2, "Locality shop/x-eu", "spec.colour", "unknown field"},
				{"a.yaml", 2, "Locality shop/x-eu", "spec.prio", "unknown field"},
				{"b.yaml", 1, "Upstream shop/x", "spec.overprovisioningFactor", "Invalid value: 0"},
				{"b.yaml", 1, "Upstream shop/x", "spec.protocol", `Unsupported value: "SPDY"`},
				{"b.yaml", 2, "EndpointSet shop/x-eu", "spec.endpoints[1].port", "Invalid value: 70000"},
				{"b.yaml", 2, "EndpointSet shop/x-eu", "spec.endpoints[1].weight", "Invalid value: 0"},
				{"b.yaml", 3, "", "", "apiVersion and kind are required"},
				{"c.yml", 1, "Upstream shop/x", "apiVersion", "unsupported apiVersion"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			paths := []string{dir}
			if tc.load != nil {
				paths = nil
				for _, p := range tc.load {
					paths = append(paths, filepath.Join(dir, p))
				}
			}
			set, err := manifest.Load(paths...)
			if err == nil {
				t.Fatalf("Load succeeded with %d objects, want errors", len(set.Objects))
			}
			if set != nil {
				t.Errorf("Load returned a set with its error")
			}
			var errs manifest.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T %v is not manifest.Errors", err, err)
			}
			msg := err.Error()
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(errs), len(tc.want), msg)
			}
			for i, w := range tc.want {
				g := errs[i]
				file := filepath.Join(dir, filepath.FromSlash(w.File))
				w.Detail = strings.ReplaceAll(w.Detail, " in a.yaml ", " in "+filepath.Join(dir, "a.yaml")+" ")
				if g.File != file || g.Document != w.Document || g.Object != w.Object || g.Field != w.Field || !strings.Contains(g.Detail, w.Detail) {
					t.Errorf("error %d:\n got %+v\nwant %+v (detail contained)", i, *g, w)
				}
				// The message names file, document, object and field.
				line := strings.Split(msg, "\n")[i]
				for _, part := range []string{file + ": ", "document " + strconv.Itoa(w.Document), w.Object, w.Field} {
					if !strings.Contains(line, part) {
						t.Errorf("message %q lacks %q", line, part)
					}
				}
				var one *manifest.Error
				if !errors.As(err, &one) {
					t.Errorf("errors.As(*manifest.Error) failed")
				}
			}
			if strings.Contains(msg, "panic") {
				t.Errorf("message mentions panic: %s", msg)
			}
		})
	}
}

func TestLoadPathErrors(t *testing.T) {
	t.Parallel()
	if _, err := manifest.Load(); err == nil {
		t.Error("Load() without paths succeeded")
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := manifest.Load(missing)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("Load(missing) = %v, want an error naming the file", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want it to wrap os.ErrNotExist", err)
	}
}

func TestLoadSkipsEmptyDocuments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml":        "# header comment\n---\n---\n" + upstreamX + "---\n# nothing here\n   # indented comment\n--- # separator with a comment\n\n---\n" + localityX + "---\n",
		"empty.yaml":    "",
		"comments.yaml": "# just a comment\n",
		"blank.yml":     "\n\n   \n",
	})
	set, err := manifest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dir, "a.yaml")
	want := []manifest.Object{
		{File: a, Document: 1, Kind: "Upstream", Key: topology.Key{Namespace: "shop", Name: "x"}},
		{File: a, Document: 2, Kind: "Locality", Key: topology.Key{Namespace: "shop", Name: "x-eu"}},
	}
	if !slices.Equal(set.Objects, want) {
		t.Errorf("objects:\n got %+v\nwant %+v", set.Objects, want)
	}
	if set.Batch.Len() != 2 {
		t.Errorf("batch touches %d objects, want 2", set.Batch.Len())
	}
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	obj := func(kind, name string) string {
		return "apiVersion: poise.dev/v1alpha1\nkind: " + kind + "\nmetadata: {name: " + name + "}\nspec: {upstream: u}\n"
	}
	writeFiles(t, dir, map[string]string{
		"b.yaml":                "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\n",
		"a.yml":                 obj("Locality", "l-a"),
		"a/x.yaml":              obj("EndpointSet", "s-ax"),
		"a-b.yaml":              obj("Locality", "l-ab"),
		"sub/deeper/c.json":     `{"apiVersion": "poise.dev/v1alpha1", "kind": "EndpointSet", "metadata": {"name": "s-c"}, "spec": {"upstream": "u"}}`,
		"sub/UPPER.YAML":        obj("Locality", "l-upper"),
		"notes.txt":             "this is not YAML: [",
		"README.md":             "# not a manifest\n",
		"sub/script.sh":         "#!/bin/sh\n",
		"sub/deeper/x.yaml.bak": "kind: Broken\n",
	})
	set, err := manifest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sub, err := manifest.Load(filepath.Join(dir, "sub")); err != nil || len(sub.Objects) != 1 {
		t.Errorf("loading a subdirectory itself: %v, %+v", err, sub)
	}
	var files, names []string
	for _, o := range set.Objects {
		rel, _ := filepath.Rel(dir, o.File)
		files = append(files, filepath.ToSlash(rel))
		names = append(names, o.String())
	}
	// like kubectl apply -f DIR: the directory's own files, not its subdirectories
	wantFiles := []string{"a-b.yaml", "a.yml", "b.yaml"}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("files in load order = %q, want %q", files, wantFiles)
	}
	wantNames := []string{"Locality default/l-ab", "Locality default/l-a", "Upstream default/u"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("objects = %q, want %q", names, wantNames)
	}

	// Explicit files are read in the order given, even a non-manifest name.
	explicit := filepath.Join(dir, "explicit.txt")
	writeFiles(t, dir, map[string]string{"explicit.txt": obj("Locality", "l-txt")})
	set, err = manifest.Load(filepath.Join(dir, "b.yaml"), explicit, filepath.Join(dir, "a.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, o := range set.Objects {
		names = append(names, o.String())
	}
	if want := []string{"Upstream default/u", "Locality default/l-txt", "Locality default/l-a"}; !slices.Equal(names, want) {
		t.Errorf("explicit files: objects = %q, want %q", names, want)
	}
}

func TestIsManifest(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"a.yaml": true, "a.yml": true, "a.json": true, "A.YAML": true, "dir/b.Yml": true,
		"a.txt": false, "a.yaml.bak": false, "yaml": false, "a": false, "a.jsonl": false,
	} {
		if got := manifest.IsManifest(name); got != want {
			t.Errorf("IsManifest(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestDecodeMatchesLoad(t *testing.T) {
	t.Parallel()
	set, err := manifest.Decode("inline.yaml", []byte(docs(upstreamX, localityX, setX)))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Objects) != 3 || set.Objects[2].File != "inline.yaml" || set.Objects[2].Document != 3 {
		t.Fatalf("objects = %+v", set.Objects)
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	u := snap.Upstream(topology.Key{Namespace: "shop", Name: "x"})
	if u == nil {
		t.Fatal("upstream shop/x missing")
	}
	if u.Upstream.Protocol != "GRPC" || len(u.Endpoints) != 2 || u.Endpoints[1].Weight != 3 || u.Endpoints[0].LocalityWeight != 2 {
		t.Errorf("upstream state = %+v", u)
	}

	_, err = manifest.Decode("inline.yaml", []byte(docs(upstreamX, upstreamX)))
	if err == nil || !strings.Contains(err.Error(), "inline.yaml: document 2 (Upstream shop/x): metadata.name: Upstream shop/x is also defined in inline.yaml document 1") {
		t.Errorf("duplicate in Decode: %v", err)
	}
}

// TestExamples checks that examples/ loads, applies, and shows every
// feature the examples are meant to demonstrate.
func TestExamples(t *testing.T) {
	t.Parallel()
	set, err := manifest.Load("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Orphans()) != 0 {
		t.Errorf("orphans: %v", snap.Orphans())
	}
	ups := snap.Upstreams()
	if len(ups) < 2 {
		t.Errorf("%d upstreams, want at least 2", len(ups))
	}
	regions := map[string]bool{}
	priorities := map[uint32]bool{}
	var draining, unhealthy, spill int
	for _, u := range ups {
		for _, e := range u.Endpoints {
			regions[e.Locality.Region] = true
			priorities[e.Priority] = true
			if e.Admin == weights.Draining {
				draining++
			}
			if e.Probe == weights.ProbeUnhealthy {
				unhealthy++
			}
		}
		r := u.Result
		if r.Outcome == weights.Routable && len(r.Priorities) > 0 && r.Priorities[0].Priority == 0 && r.Priorities[0].Load < weights.Million {
			spill++
		}
	}
	if len(regions) < 2 {
		t.Errorf("regions %v, want at least 2", regions)
	}
	if len(priorities) < 2 {
		t.Errorf("priorities %v, want at least 2", priorities)
	}
	if draining == 0 {
		t.Error("no Draining endpoint")
	}
	if unhealthy == 0 {
		t.Error("no probe-Unhealthy endpoint")
	}
	if spill == 0 {
		t.Error("no upstream spills over from priority 0 (load < 1000000)")
	}
	// Every example object is in the set exactly once.
	seen := map[string]bool{}
	for _, o := range set.Objects {
		if seen[o.String()] {
			t.Errorf("%s twice", o)
		}
		seen[o.String()] = true
	}
	if set.Batch.Len() != len(set.Objects) {
		t.Errorf("batch has %d objects, set lists %d", set.Batch.Len(), len(set.Objects))
	}
}
