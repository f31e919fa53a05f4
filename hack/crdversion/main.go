// Command crdversion is the last step of `make generate`: it writes each
// CRD's schema version (the annotation poise.dev/schema-version, see
// package crdschema) into the CRDs controller-gen wrote, and copies them
// into the CRD chart's templates with helm.sh/resource-policy: keep, so that
// `helm uninstall` never deletes them with every object of their kinds.
//
//	go run ./hack/crdversion -crds config/crd -chart charts/poise-crds/templates
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/pkg/kube/crdschema"
)

// keep is the annotation that keeps the chart's CRDs when a release is
// uninstalled, or when an upgrade or rollback no longer renders them.
const keep = "helm.sh/resource-policy"

func main() {
	crds := flag.String("crds", "config/crd", "directory of the CRDs controller-gen wrote (rewritten in place)")
	chart := flag.String("chart", "charts/poise-crds/templates", "the CRD chart's templates directory (its poise.dev_*.yaml are replaced)")
	flag.Parse()
	if err := run(*crds, *chart); err != nil {
		fmt.Fprintln(os.Stderr, "crdversion:", err)
		os.Exit(1)
	}
}

func run(crdDir, chartDir string) error {
	files, err := filepath.Glob(filepath.Join(crdDir, "poise.dev_*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no poise.dev_*.yaml in %s: run controller-gen first", crdDir)
	}
	old, err := filepath.Glob(filepath.Join(chartDir, "poise.dev_*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		generated, chartCopy, err := annotate(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := os.WriteFile(f, generated, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(chartDir, filepath.Base(f)), chartCopy, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// annotate returns the CRD with its schema version, and the chart's copy,
// which is also kept by Helm. Both are marshalled as controller-gen marshals
// (keys sorted), so a CRD already annotated comes out byte for byte.
func annotate(raw []byte) (generated, chartCopy []byte, err error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return nil, nil, err
	}
	version, err := crdschema.Version(crd.Spec)
	if err != nil {
		return nil, nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, nil, err
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		return nil, nil, fmt.Errorf("CRD %s has no metadata", crd.Name)
	}
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	annotations[crdschema.Annotation] = version
	delete(annotations, keep)
	if generated, err = marshal(doc); err != nil {
		return nil, nil, err
	}
	annotations[keep] = "keep"
	if chartCopy, err = marshal(doc); err != nil {
		return nil, nil, err
	}
	// Helm renders every file of templates/: a description holding "{{"
	// would be taken for a template action.
	if bytes.Contains(chartCopy, []byte("{{")) {
		return nil, nil, fmt.Errorf("CRD %s holds %q, which Helm would render as a template: reword the field's comment", crd.Name, "{{")
	}
	return generated, chartCopy, nil
}

func marshal(doc map[string]any) ([]byte, error) {
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return []byte("---\n" + strings.TrimPrefix(string(out), "---\n")), nil
}
