// Package crd holds the CRDs `make generate` writes into this directory,
// embedded: the schemas a binary was built with, which it compares with
// those the cluster holds (package crdschema).
package crd

import "embed"

// Files are the generated CRDs, poise.dev_<plural>.yaml.
//
//go:embed poise.dev_*.yaml
var Files embed.FS

// Pattern matches the CRD files in Files.
const Pattern = "poise.dev_*.yaml"
