package manifest_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

var fuzzSeeds = []string{
	"",
	"---\n",
	"# only a comment\n",
	"null\n",
	"~\n",
	"[]\n",
	"{}\n",
	"\ufeff" + upstreamX,
	"\x00",
	"--- {a: 1}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {protocol: GRPC, protocol: TCP}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {overprovisioningFactor: 1e400}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {panicThreshold: -9223372036854775809}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {connectTimeout: 9999999999h, endpointsFrom: {service: {name: s, port: x--y}}}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {endpointsFrom: {service: {name: s, port: 0}}}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {endpointsFrom: {}}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {addressPolicy: {allowLoopback: true}}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u, namespace: shop}\nspec: {exportTo: [\".\", shop, \"*\"]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec:\n  exportTo:\n  - '*'\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {exportTo: [., b, a, b, Bad, null]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u}\nspec: {exportTo: []}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s}\nspec: {upstream: u, endpoints: [{address: 169.254.169.254, port: 80}, {address: 127.0.0.1, port: 80}]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u, namespace: n}\nspec: null\nstatus: {outcome: Routable}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: l}\nspec: {upstream: u, priority: 127, weight: 4294967295, region: \"\u00fc\"}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s}\nspec:\n  upstream: u\n  priority: 127\n  endpoints:\n  - {address: \"::1\", port: 65535, weight: 4294967295}\n  - {address: a.b, port: 1, weight: 4294967295, adminState: Draining}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s}\nspec: {upstream: u, endpoints: [{address: 1.1.1.1, port: 1}, {address: 1.1.1.1, port: 1}]}\nstatus: {health: [{address: 1.1.1.1, port: 1}, {address: 1.1.1.1, port: 1}, {address: 2.2.2.2, port: 2}]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s}\nspec: {upstream: u, endpoints: [null, 1, {}]}\nstatus: {health: [null]}\n",
	"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
	"base: &base {upstream: u, priority: 1}\napiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: l}\nspec:\n  <<: *base\n  weight: 3\n",
	strings.Repeat("[", 200) + strings.Repeat("]", 200) + "\n",
	"apiVersion: !!binary cG9pc2UuZGV2L3YxYWxwaGEx\nkind: Upstream\nmetadata: {name: u}\n",
	"? [complex, key]\n: value\n",
	"1: a\n\"1\": b\n",
	"kind: Upstream\napiVersion: poise.dev/v1alpha1\nmetadata:\n\tname: u\n",
	`{"apiVersion": "poise.dev/v1alpha1", "kind": "EndpointSet", "metadata": {"name": "s"}, "spec": {"upstream": "u", "endpoints": [{"address": "10.0.0.1", "port": 80, "weight": 2}]}}`,
	upstreamX + "---\n" + localityX + "---\n" + setX,
	upstreamX + "---\n" + upstreamX,
	upstreamX + "---\n" + domainX + "---\n" + partitionX,
	"apiVersion: poise.dev/v1alpha1\nkind: SpatialDomain\nmetadata: {name: d}\nspec: {gridDegrees: 7, maxCells: 0, localityCapPercent: 101, replicas: [{name: a, upstream: u, region: eu}, {name: a, upstream: u, region: \"e u\"}], products: [{name: p, pathPrefix: /p, allowedRegions: []}, {name: q, pathPrefix: /p, allowedRegions: [eu, eu]}]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: SpatialDomain\nmetadata: {name: d}\nspec: {replicas: null, products: [null, {}]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Partition\nmetadata: {name: p}\nspec: {domain: d, extent: {west: 180, south: 90, east: -180, north: 90}, replicas: [a, a]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Partition\nmetadata: {name: p}\nspec: {domain: d, extent: {west: 1e400, south: .nan, east: -.inf, north: 0x10}, replicas: [a]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Partition\nmetadata: {name: p}\nspec: {domain: nowhere, extent: {west: 0, south: 0, east: 0, north: 0}, replicas: [ghost]}\n",
}

// mistakeSeeds are the one-character mistakes whose errors name the field
// and the file's line: a type error, an unknown field near a known one, a
// syntax error in a later document, a mistyped group or kind.
var mistakeSeeds = []string{
	upstreamX + "---\n" + localityX + "---\n" + strings.Replace(upstreamX, "protocol: GRPC", "protocol: GRPC\n   bad: indent", 1),
	strings.Replace(localityX, "weight: 2", "weight: \"3\"", 1),
	strings.Replace(localityX, "weight: 2", "weigth: 2", 1),
	strings.Replace(localityX, "weight: 2", "weight: [2]\n  priority: {a: 1}\n  zone: 7", 1),
	strings.Replace(setX, "port: 80, weight: 3", "port: \"80\", weigth: 3", 1),
	strings.Replace(setX, "{address: 10.0.0.1,", "{adress: 10.0.0.1,", 1),
	strings.Replace(upstreamX, "poise.dev/", "poise.io/", 1),
	strings.Replace(upstreamX, "kind: Upstream", "kind: Upstrem", 1),
	strings.Replace(upstreamX, "protocol: GRPC", "connectTimeout: 10\n  addressPolicy: {allowLoopback: \"yes\"}\n  exportTo: shop", 1),
	strings.Replace(upstreamX, "protocol: GRPC", "protocol: GRPC\n  protocol: TCP", 1) + "---\n" + localityX + "  weight: 3\n",
	"apiVersion: 1\nkind: [Upstream]\nmetadata: {name: 7}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: SpatialDomain\nmetadata: {name: d}\nspec: {gridDegrees: \"10\", replicas: [{name: a, upstrem: u, region: eu}]}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Partition\nmetadata: {name: p}\nspec: {domain: d, extent: {wset: 1, south: \"0\", east: true, north: null}, replicas: a}\n",
}

// checkDecodeFile: DecodeFile agrees with Decode on the same data, and
// reusing documents from another version of the file changes nothing.
func checkDecodeFile(t *testing.T, data []byte, set *manifest.Set, err error, prev *manifest.File) {
	file := manifest.DecodeFile("fuzz.yaml", data, nil)
	if again := manifest.DecodeFile("fuzz.yaml", data, prev); !reflect.DeepEqual(again.Documents, file.Documents) ||
		!reflect.DeepEqual(again.Errors, file.Errors) {
		t.Fatalf("reusing documents changed the result:\n%+v %v\n%+v %v", again.Documents, again.Err(), file.Documents, file.Err())
	}
	if again := manifest.DecodeFile("fuzz.yaml", data, file); again.Decoded != countDocs(again.Errors) {
		t.Fatalf("decoding the same data again decoded %d documents, with errors in %d", again.Decoded, countDocs(again.Errors))
	}
	if err == nil {
		var objects []manifest.Object
		for _, d := range file.Documents {
			objects = append(objects, d.Object)
		}
		if file.Err() != nil || !slices.Equal(objects, set.Objects) {
			t.Fatalf("Decode gives %+v, DecodeFile %+v, %v", set.Objects, objects, file.Err())
		}
		return
	}
	// Decode's errors are DecodeFile's and one per later definition of an object.
	var errs manifest.Errors
	errors.As(err, &errs)
	var decodeErrs manifest.Errors
	for _, e := range errs {
		if !strings.Contains(e.Detail, " is also defined in ") {
			decodeErrs = append(decodeErrs, e)
		}
	}
	if !reflect.DeepEqual(decodeErrs, file.Errors) {
		t.Fatalf("Decode reports %v\nDecodeFile reports %v", decodeErrs, file.Err())
	}
}

func FuzzDecode(f *testing.F) {
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		f.Fatalf("no example manifests: %v", err)
	}
	var all []string
	for _, p := range examples {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		all = append(all, string(b))
	}
	joined := []byte(strings.Join(all, "\n---\n"))
	f.Add(joined)
	for _, s := range append(fuzzSeeds, mistakeSeeds...) {
		f.Add([]byte(s))
	}
	prev := manifest.DecodeFile("fuzz.yaml", joined, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := manifest.Decode("fuzz.yaml", data)
		checkDecodeFile(t, data, set, err, prev)
		if err != nil {
			if set != nil {
				t.Fatal("Decode returned a set with an error")
			}
			var errs manifest.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Decode error %T is not a non-empty manifest.Errors: %v", err, err)
			}
			for _, e := range errs {
				if e.File != "fuzz.yaml" || e.Document < 1 || e.Detail == "" {
					t.Fatalf("malformed error %+v", *e)
				}
			}
			return
		}
		if set.Batch.Len() != len(set.Objects) {
			t.Fatalf("batch touches %d objects, set lists %d", set.Batch.Len(), len(set.Objects))
		}
		snap, err := topology.NewDirectory().Apply(set.Batch)
		if err != nil {
			var be *topology.BatchError
			if !errors.As(err, &be) || len(be.Problems) == 0 {
				t.Fatalf("Apply error %T is not a BatchError: %v", err, err)
			}
			return
		}
		// The offline explain path must not panic on anything Apply accepts.
		rep := explain.Build(snap)
		if err := explain.WriteText(io.Discard, rep); err != nil {
			t.Fatal(err)
		}
	})
}
