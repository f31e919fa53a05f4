// Package history checks what every xDS client received against what the
// plane published: the resilience contract's rules (docs/resilience.md)
// over recorded histories. It works on the wire only — response versions,
// resource names and the hashes of their bytes, ACKs and NACKs — never on
// the server's structures, so a fault in the cache cannot hide itself.
package history
