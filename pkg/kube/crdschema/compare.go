package crdschema

import (
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Bounds of one comparison: the paths listed in each direction (the rest
// are counted), how deep a schema is followed, and how many schema nodes
// are visited at most. The generated schemas are about ten levels deep and
// a few hundred nodes; an installed CRD is whatever someone applied.
const (
	MaxFields = 100
	maxDepth  = 32
	maxNodes  = 100_000
)

// Diff is what one CRD's schemas, as a binary knows them and as a cluster
// holds them, do not share. Paths are dotted from the object's root, with
// "[]" for the items of a list and "*" for the values of a map
// ("spec.endpoints[].address"); with more than one version each path starts
// with its version ("v1beta1: spec.x").
type Diff struct {
	// Pruned are the fields the binary knows and the installed schema does
	// not: the apiserver drops them from every object written, so the
	// binary never sees them. A version the binary reads that the cluster
	// does not serve is "version V".
	Pruned []string
	// PrunedMore counts the pruned fields beyond MaxFields.
	PrunedMore int
	// Unknown are the fields the installed schema has and the binary does
	// not know: a newer CRD, whose extra fields the binary ignores.
	Unknown     []string
	UnknownMore int
}

// PrunedCount is the number of pruned fields, listed or not.
func (d Diff) PrunedCount() int { return len(d.Pruned) + d.PrunedMore }

// UnknownCount is the number of unknown fields, listed or not.
func (d Diff) UnknownCount() int { return len(d.Unknown) + d.UnknownMore }

// Compare walks the schemas of every version binary serves against the
// same version of installed, and the other way. The apiserver prunes a
// field its schema does not list unless the object around it keeps
// unknown fields (x-kubernetes-preserve-unknown-fields) or is a map
// (additionalProperties); a field under such an object is not pruned.
func Compare(binary, installed *apiextensionsv1.CustomResourceDefinition) Diff {
	pruned, unknown := &walk{}, &walk{}
	multi := len(binary.Spec.Versions) > 1 || len(installed.Spec.Versions) > 1
	for _, bv := range binary.Spec.Versions {
		if !bv.Served {
			continue
		}
		prefix := ""
		if multi {
			prefix = bv.Name + ": "
		}
		iv := servedVersion(installed, bv.Name)
		if iv == nil {
			pruned.add("version " + bv.Name)
			continue
		}
		bs, is := schemaOf(bv), schemaOf(*iv)
		pruned.lacking(bs, is, prefix, 0)
		unknown.lacking(is, bs, prefix, 0)
	}
	for _, iv := range installed.Spec.Versions {
		if iv.Served && servedVersion(binary, iv.Name) == nil {
			unknown.add("version " + iv.Name)
		}
	}
	return Diff{Pruned: pruned.paths, PrunedMore: pruned.more, Unknown: unknown.paths, UnknownMore: unknown.more}
}

func servedVersion(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i, v := range crd.Spec.Versions {
		if v.Name == name && v.Served {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

// schemaOf is a version's schema; a version without one keeps every field
// (apiextensions.k8s.io/v1 requires one, so only a hand-made object lacks it).
func schemaOf(v apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.JSONSchemaProps {
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		t := true
		return &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &t}
	}
	return v.Schema.OpenAPIV3Schema
}

// walk collects, bounded, the paths of one direction of a comparison.
type walk struct {
	paths []string
	more  int
	nodes int
}

func (w *walk) add(path string) {
	if len(w.paths) < MaxFields {
		w.paths = append(w.paths, path)
		return
	}
	w.more++
}

func join(path, key string) string {
	if path == "" || strings.HasSuffix(path, ": ") {
		return path + key
	}
	return path + "." + key
}

// preserves reports whether a schema node keeps fields it does not list.
func preserves(s *apiextensionsv1.JSONSchemaProps) bool {
	return s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
}

// mapValues is the schema of a map's values, or nil when s is no map.
func mapValues(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s.AdditionalProperties == nil {
		return nil
	}
	if s.AdditionalProperties.Schema != nil {
		return s.AdditionalProperties.Schema
	}
	if s.AdditionalProperties.Allows {
		t := true
		return &apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: &t}
	}
	return nil
}

// scalar reports whether a schema node holds no fields at all: a value of
// another type than object is refused by validation, never pruned.
func scalar(s *apiextensionsv1.JSONSchemaProps) bool {
	return s.XIntOrString || (s.Type != "" && s.Type != "object" && s.Type != "array")
}

// lacking records each field path of want that have would prune: those
// want lists where have neither lists them nor keeps unknown fields.
func (w *walk) lacking(want, have *apiextensionsv1.JSONSchemaProps, path string, depth int) {
	w.nodes++
	if want == nil || have == nil || depth > maxDepth || w.nodes > maxNodes || scalar(have) {
		return
	}
	keys := make([]string, 0, len(want.Properties))
	for k := range want.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		wp := want.Properties[k]
		if hp, ok := have.Properties[k]; ok {
			w.lacking(&wp, &hp, join(path, k), depth+1)
			continue
		}
		switch {
		case have.XEmbeddedResource && (k == "apiVersion" || k == "kind" || k == "metadata"):
			// an embedded object's type and metadata are always kept
		case mapValues(have) != nil:
			// a map keeps every key; its values are pruned by its schema
			w.lacking(&wp, mapValues(have), join(path, k), depth+1)
		case preserves(have):
			// kept as it is, unknown to the schema
		default:
			w.add(join(path, k))
		}
	}
	if want.Items != nil && want.Items.Schema != nil && have.Items != nil && have.Items.Schema != nil {
		w.lacking(want.Items.Schema, have.Items.Schema, path+"[]", depth+1)
	}
	if wv := mapValues(want); wv != nil && !preserves(wv) {
		switch hv := mapValues(have); {
		case hv != nil:
			w.lacking(wv, hv, join(path, "*"), depth+1)
		case !preserves(have) && len(have.Properties) == 0:
			w.add(join(path, "*"))
		}
	}
}
