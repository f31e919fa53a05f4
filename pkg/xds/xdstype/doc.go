// Package xdstype is the table of the xDS types the control plane serves:
// each type's URL, short name, whether SotW sends it whole, and its own
// discovery service. The cache, the server and the commands size, index,
// order and name everything per type from it, so a new type is one row here.
package xdstype
