// Package layering holds the module's import graph to its dependency rule:
// the math at the bottom, the topology model above it, the translator, the
// sources and the wiring above that, and nothing importing a command. Its
// test reads every package's imports from source and fails on an import that
// goes up a layer, on a package that sits in no layer, and on a stale entry.
package layering
