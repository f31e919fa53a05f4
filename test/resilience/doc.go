// Package resilience runs the resilience contract's fault scenarios
// (docs/resilience.md): clients record what they receive through
// test/xdsproxy, faults are injected there, and test/history checks every
// client's history against what the plane published.
package resilience
