// Package partitionmap is the pure Go reference of the spatial routing decision
// described in docs/spatial.md: it parses OGC API Features bounding boxes and
// maps them onto a coarse lat/lon cell grid. The Lua script that Envoy runs per request
// must follow exactly the same rules, so each rule here is written as float comparisons a
// Lua 5.1 script can repeat bit for bit (strict number grammar, positive-form range
// checks, floor with exact edge correction).
package partitionmap
