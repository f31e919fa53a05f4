// Package golden compares a test's output with a file under the package's
// testdata/ and, run with -update, rewrites the file instead: a reviewed
// change of output is one flag away, an unreviewed one fails the test. Every
// golden of the module goes through it, so -update means the same everywhere.
package golden
