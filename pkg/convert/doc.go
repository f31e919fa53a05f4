// Package convert turns v1alpha1 objects into the topology model. It
// applies the same defaults and checks the same value rules as the CRD
// schema, so a manifest read from disk is judged as the apiserver would
// judge it, with errors that carry the field path.
package convert
