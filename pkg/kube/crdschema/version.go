package crdschema

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Annotation names a CRD's schema version: "sha256:" and the first 16 hex
// digits of the SHA-256 of its versions' names and OpenAPI v3 schemas, as
// JSON (keys sorted). `make generate` writes it; equal versions mean equal
// schemas. A digest, not a counter: it is computed from the schema alone,
// so every generation of the same schema gives the same version, and two
// branches that change the schema never give the same one.
const Annotation = "poise.dev/schema-version"

// Version is the schema version of a CRD's spec (see Annotation).
func Version(spec apiextensionsv1.CustomResourceDefinitionSpec) (string, error) {
	type version struct {
		Name   string                                    `json:"name"`
		Schema *apiextensionsv1.CustomResourceValidation `json:"schema,omitempty"`
	}
	vs := make([]version, 0, len(spec.Versions))
	for _, v := range spec.Versions {
		vs = append(vs, version{Name: v.Name, Schema: v.Schema})
	}
	slices.SortFunc(vs, func(a, b version) int { return cmp.Compare(a.Name, b.Name) })
	b, err := json.Marshal(vs)
	if err != nil {
		return "", fmt.Errorf("CRD %s.%s: encoding its schemas: %w", spec.Names.Plural, spec.Group, err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8]), nil
}

// maxCRDFile bounds what is read of one generated CRD file.
const maxCRDFile = 4 << 20

// Load reads the CRDs of fsys whose names match pattern (the generated
// files, embedded in the binary), sorted by name. Each must carry the
// Annotation with its own Version: a file edited by hand, or generated
// before the annotation existed, is an error naming it.
func Load(fsys fs.FS, pattern string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no CRD matches %s", pattern)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		if len(raw) > maxCRDFile {
			return nil, fmt.Errorf("%s: %d bytes, more than %d", name, len(raw), maxCRDFile)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(name), err)
		}
		want, err := Version(crd.Spec)
		if err != nil {
			return nil, err
		}
		if got := crd.Annotations[Annotation]; got != want {
			return nil, fmt.Errorf("%s: CRD %s has %s %q, its schemas are version %q: run `make generate`", path.Base(name), crd.Name, Annotation, got, want)
		}
		out = append(out, crd)
	}
	slices.SortFunc(out, func(a, b *apiextensionsv1.CustomResourceDefinition) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
