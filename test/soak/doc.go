// Package soak runs the real controlplane binary for a bounded time while
// hostile manifest writers and hostile xDS clients work against it, and
// checks what a well-behaved client meanwhile sees: no crash, no wrong
// publication, bounded memory and log, and every legitimate edit delivered.
// `make soak` runs it for five minutes; `make test` for a short while.
package soak
