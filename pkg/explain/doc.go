// Package explain turns a topology snapshot into the derivation a person
// reads: per priority its health, load and panic state, per locality its
// availability, effective weight and traffic, per endpoint its eligibility
// and share. The same Report is printed as text by `controlplane explain`,
// served as JSON by the admin port, and written to status.
package explain
