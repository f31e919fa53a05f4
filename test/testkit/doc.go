// Package testkit holds what tests of a running system share: waiting for a
// condition with a deadline and a last word on failure, reading JSON from
// an HTTP endpoint such as the admin port, and reading back its JSON log. It imports only the standard
// library, so a test of any package may use it without a cycle.
package testkit
