// Package outliers decides fleet outlier detection while this replica
// leads: it merges every replica's shared load aggregate, decides with
// package outlier, and writes the ejections in force to each Upstream's
// status.outlierEjections, where every replica's source reads them back.
package outliers
