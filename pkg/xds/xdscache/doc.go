// Package xdscache holds the published xDS resources, each marshalled once
// per version, in one view per client rendering, and the watches of every
// stream, reached from each resource name through a reverse index over
// subscription sets that equal clients share. A change costs what it touches:
// it visits only the streams that want the changed resource, a client is
// sent only what changed since its last response, a NACKed version is never
// re-sent in a loop, and an ACK that repeats its subscription costs O(1).
// A resource may have a variant per client zone, sent to that zone's streams
// instead of the base; the cache counts the streams of each zone, bounded,
// and sums the demand weight the server weighed each stream at, per zone and
// resource (the census the client-demand signal reads).
// Each entry says who may read it and each stream has an audience (the
// namespace its identity proves, or anonymous): the watches of each zone and
// audience are a group of their own, and a stream is sent only what its
// audience may read. A resource may also have audience variants, one per
// audience class of disjoint namespaces, sent to those namespaces' streams
// instead of its base under the same name (the spatial route, which holds
// only the domains its reader may read); a change wakes only the streams
// whose content of it changed. What a stream asks for and is not sent, and
// why, is read on demand for people, never on the send path.
package xdscache
