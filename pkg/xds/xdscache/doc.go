// Package xdscache holds the published xDS resources, each marshalled once
// per version, in one view per client rendering, and answers the watches of
// go-control-plane's SotW and Delta servers from them. A client is sent only
// what it does not have, so a rejected (NACKed) version is never re-sent in
// a loop, and an endpoint change reaches clients as the changed
// ClusterLoadAssignments alone.
package xdscache
