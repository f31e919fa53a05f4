// Package explain turns a topology snapshot into the derivation a person
// reads: per priority its health, load and panic state, per locality its
// availability, effective weight and traffic, per endpoint its eligibility
// and share; who may read each upstream and SpatialDomain, and whether a
// client of a given namespace may; and for a spatial request each step of
// its routing decision.
// The same reports are printed as text by `controlplane explain` and
// `explain-route`, served as JSON by the admin port, and written to status.
package explain
