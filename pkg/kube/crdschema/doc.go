// Package crdschema knows which schemas of the CRDs this binary was built
// with, and compares them with the CRDs a cluster holds: each generated CRD
// carries its schema version (the annotation poise.dev/schema-version, a
// digest of its versions' schemas, written by `make generate`), and the
// comparison walks both OpenAPI v3 schemas for the field paths one knows and
// the other would prune. The Watcher reads the cluster's CRDs at start and
// on every change, and says what it found: a state per CRD, /readyz
// warnings, gauges and log lines. Package status turns its changes into
// Events.
package crdschema
