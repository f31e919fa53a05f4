// Package partitionmap is the pure Go reference of the spatial routing decision of
// docs/spatial.md: it builds a domain's partition map (grid cell → partitions →
// replicas), parses OGC API Features bounding boxes, and decides per request in the fixed
// order residency, health, locality, fallback. It also renders the same map as the Lua
// DATA table Envoy runs with the fixed logic in lua/decide.lua; every rule is written as
// float comparisons LuaJIT repeats bit for bit, and a differential test holds them equal.
package partitionmap
