// Package xdscache holds the published xDS resources, each marshalled once
// per version, in one view per client rendering, and the watches of every
// stream, reached from each resource name through a reverse index over
// subscription sets that equal clients share. A change costs what it touches:
// it visits only the streams that want the changed resource, a client is
// sent only what changed since its last response, a NACKed version is never
// re-sent in a loop, and an ACK that repeats its subscription costs O(1).
package xdscache
