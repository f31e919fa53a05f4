package crdschema

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/config/crd"
)

// crdOf is a CRD named things.example.com whose one version (v1) has the
// openAPIV3Schema given as YAML.
func crdOf(t *testing.T, schema string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var s apiextensionsv1.JSONSchemaProps
	if err := yaml.UnmarshalStrict([]byte(schema), &s); err != nil {
		t.Fatalf("schema: %v\n%s", err, schema)
	}
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Name = "things.example.com"
	c.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &s}}}
	return c
}

const binarySchema = `
type: object
properties:
  spec:
    type: object
    properties:
      exportTo: {type: array, items: {type: string}}
      port: {type: integer}
      endpoints:
        type: array
        items:
          type: object
          properties:
            address: {type: string}
            zone: {type: string}
      labels:
        type: object
        additionalProperties:
          type: object
          properties:
            value: {type: string}
            weight: {type: integer}
      extra:
        type: object
        properties:
          a: {type: string}
          b: {type: string}
`

func TestCompare(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, installed        string
		pruned, unknown        []string
		state                  State
		sameVersionAsInstalled bool
	}{
		{name: "same schema", installed: binarySchema, state: Current, sameVersionAsInstalled: true},
		{name: "a field of spec missing", installed: strings.Replace(binarySchema, "      exportTo: {type: array, items: {type: string}}\n", "", 1),
			pruned: []string{"spec.exportTo"}, state: Outdated},
		{name: "a field of a list's items missing", installed: strings.Replace(binarySchema, "            zone: {type: string}\n", "", 1),
			pruned: []string{"spec.endpoints[].zone"}, state: Outdated},
		{name: "a field of a map's values missing", installed: strings.Replace(binarySchema, "            weight: {type: integer}\n", "", 1),
			pruned: []string{"spec.labels.*.weight"}, state: Outdated},
		{name: "spec keeps unknown fields", installed: `
type: object
properties:
  spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`},
		{name: "a map instead of an object keeps its keys", installed: `
type: object
properties:
  spec:
    type: object
    properties:
      exportTo: {type: array, items: {type: string}}
      port: {type: integer}
      endpoints: {type: array, items: {type: object, x-kubernetes-preserve-unknown-fields: true}}
      labels: {type: object, x-kubernetes-preserve-unknown-fields: true}
      extra: {type: object, additionalProperties: {type: string}}
`, state: Compatible},
		{name: "a map's values missing", installed: strings.Replace(binarySchema, `        additionalProperties:
          type: object
          properties:
            value: {type: string}
            weight: {type: integer}
`, "", 1), pruned: []string{"spec.labels.*"}, state: Outdated},
		{name: "the installed schema has more", installed: binarySchema + "      newer: {type: string}\n",
			unknown: []string{"spec.newer"}, state: Newer},
		{name: "both", installed: strings.Replace(binarySchema, "      port: {type: integer}\n", "      portName: {type: string}\n", 1),
			pruned: []string{"spec.port"}, unknown: []string{"spec.portName"}, state: Outdated},
		{name: "a type changed is refused, not pruned", installed: strings.Replace(binarySchema, `      extra:
        type: object
        properties:
          a: {type: string}
          b: {type: string}
`, "      extra: {type: string}\n", 1), state: Compatible},
		{name: "only a description differs", installed: strings.Replace(binarySchema, "      port: {type: integer}\n", "      port: {type: integer, description: the port}\n", 1),
			state: Compatible},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bin, inst := crdOf(t, binarySchema), crdOf(t, c.installed)
			d := Compare(bin, inst)
			if !slices.Equal(d.Pruned, c.pruned) || !slices.Equal(d.Unknown, c.unknown) || d.PrunedMore != 0 || d.UnknownMore != 0 {
				t.Errorf("Compare: pruned %v (+%d), unknown %v (+%d); want pruned %v, unknown %v", d.Pruned, d.PrunedMore, d.Unknown, d.UnknownMore, c.pruned, c.unknown)
			}
			if c.state == "" {
				return
			}
			annotate(t, bin)
			annotate(t, inst)
			if s := Check(bin, inst); s.State != c.state {
				t.Errorf("Check: %s, want %s (%+v)", s.State, c.state, s)
			}
		})
	}
}

// annotate gives a test CRD its schema version, as make generate does.
func annotate(t *testing.T, c *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	v, err := Version(c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	c.Annotations = map[string]string{Annotation: v}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	bin := crdOf(t, binarySchema)
	inst := crdOf(t, binarySchema)
	inst.Spec.Versions[0].Name = "v2"
	d := Compare(bin, inst)
	if !slices.Equal(d.Pruned, []string{"version v1"}) || !slices.Equal(d.Unknown, []string{"version v2"}) {
		t.Errorf("a CRD serving v2 for a binary reading v1: pruned %v, unknown %v", d.Pruned, d.Unknown)
	}
	inst.Spec.Versions[0].Name, inst.Spec.Versions[0].Served = "v1", false
	if d := Compare(bin, inst); !slices.Equal(d.Pruned, []string{"version v1"}) {
		t.Errorf("a CRD that stopped serving v1: pruned %v", d.Pruned)
	}
	// two versions: each path names its version
	inst = crdOf(t, strings.Replace(binarySchema, "      port: {type: integer}\n", "", 1))
	inst.Spec.Versions = append(inst.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: "v2", Served: true,
		Schema: inst.Spec.Versions[0].Schema})
	if d := Compare(bin, inst); !slices.Equal(d.Pruned, []string{"v1: spec.port"}) || !slices.Equal(d.Unknown, []string{"version v2"}) {
		t.Errorf("two installed versions: pruned %v, unknown %v", d.Pruned, d.Unknown)
	}
}

// Bounds: a schema of many fields lists MaxFields and counts the rest; a
// deep one is followed to maxDepth and no further.
func TestCompareBounds(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("type: object\nproperties:\n  spec:\n    type: object\n    properties:\n")
	for i := range MaxFields + 50 {
		fmt.Fprintf(&b, "      f%03d: {type: string}\n", i)
	}
	bin := crdOf(t, b.String())
	inst := crdOf(t, "type: object\nproperties:\n  spec: {type: object}\n")
	d := Compare(bin, inst)
	if len(d.Pruned) != MaxFields || d.PrunedMore != 50 || d.PrunedCount() != MaxFields+50 {
		t.Errorf("%d fields missing: %d listed, %d more", MaxFields+50, len(d.Pruned), d.PrunedMore)
	}
	if got := Fields(d.Pruned, d.PrunedMore); !strings.HasPrefix(got, "spec.f000, spec.f001, ") || !strings.HasSuffix(got, "spec.f019 and 130 more") {
		t.Errorf("Fields: %s", got)
	}

	deep := func(levels int, leaf string) *apiextensionsv1.CustomResourceDefinition {
		s := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{leaf: {Type: "string"}}}
		for range levels {
			s = &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"n": *s}}
		}
		c := crdOf(t, "type: object")
		c.Spec.Versions[0].Schema.OpenAPIV3Schema = s
		return c
	}
	if d := Compare(deep(maxDepth-2, "x"), deep(maxDepth-2, "y")); d.PrunedCount() != 1 || d.UnknownCount() != 1 {
		t.Errorf("within the depth bound: %+v", d)
	}
	if d := Compare(deep(10_000, "x"), deep(10_000, "y")); d.PrunedCount() != 0 || d.UnknownCount() != 0 {
		t.Errorf("beyond the depth bound the walk stops: %+v", d)
	}
}

// The generated CRDs, as the binary embeds them: each carries its own
// schema version, and the Upstream's schema without spec.exportTo is
// outdated by exactly that field.
func TestGeneratedCRDs(t *testing.T) {
	t.Parallel()
	crds, err := Load(crd.Files, crd.Pattern)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
		if s := Check(c, c.DeepCopy()); s.State != Current || s.BinaryVersion == "" || !strings.HasPrefix(s.BinaryVersion, "sha256:") || len(s.BinaryVersion) != len("sha256:")+16 {
			t.Errorf("%s against itself: %+v", c.Name, s)
		}
	}
	want := []string{"endpointsets.poise.dev", "localities.poise.dev", "partitions.poise.dev", "spatialdomains.poise.dev", "upstreams.poise.dev"}
	if !slices.Equal(names, want) {
		t.Fatalf("embedded CRDs %v, want %v", names, want)
	}
	up := crds[4]
	old := up.DeepCopy()
	spec := old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	delete(spec.Properties, "exportTo")
	old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	annotate(t, old)
	s := Check(up, old)
	if s.State != Outdated || !slices.Equal(s.PrunedFields, []string{"spec.exportTo"}) || len(s.UnknownFields) != 0 || s.InstalledVersion == s.BinaryVersion {
		t.Errorf("Upstream without spec.exportTo: %+v", s)
	}
	if w := s.Warning(); !strings.Contains(w, "upstreams.poise.dev") || !strings.Contains(w, "spec.exportTo") ||
		!strings.Contains(w, s.InstalledVersion) || !strings.Contains(w, s.BinaryVersion) {
		t.Errorf("warning %q does not name the CRD, the versions and the field", w)
	}
	// the other way round: a binary older than the cluster's CRD
	if s := Check(old, up); s.State != Newer || !slices.Equal(s.UnknownFields, []string{"spec.exportTo"}) {
		t.Errorf("a cluster's CRD with spec.exportTo, for a binary without it: %+v", s)
	}
}

// A generated file whose annotation is not its schemas' version is refused.
func TestLoadRefusesAStaleVersion(t *testing.T) {
	t.Parallel()
	raw, err := crd.Files.ReadFile("poise.dev_localities.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stale := strings.Replace(string(raw), "poise.dev/schema-version: sha256:", "poise.dev/schema-version: sha256:0", 1)
	fsys := fstest.MapFS{"poise.dev_localities.yaml": {Data: []byte(stale)}}
	if _, err := Load(fsys, "*.yaml"); err == nil || !strings.Contains(err.Error(), "make generate") || !strings.Contains(err.Error(), "localities.poise.dev") {
		t.Errorf("Load of a stale annotation: %v", err)
	}
}
