// Package planelog writes what the control plane applied as log lines a
// person reads: for each upstream whose shares a publication moved, one line
// of the localities that moved most (before → after); a warning when an
// upstream's outcome, panic or drop changes, and when an active check or
// outlier detection takes an endpoint out or brings it back, with the
// origin explain gives. Every line is bounded: per key (an upstream, an
// endpoint) a burst of two lines and then one per period, the changes
// meanwhile merged into the next line; per look at the publications, at
// most ten lines of a kind and one line counting the rest.
package planelog
