// Package logkeys holds every structured log call of the module to keys that
// stay plain fields under --log-format json: a key is one word in camelCase,
// never a phrase with spaces. Its test parses the non-test sources and names
// each call that breaks the rule.
package logkeys
